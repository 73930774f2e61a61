import math

import pytest
import torch
import torch.nn.functional as F

from robustvit.training import create_loss
from robustvit.training.afat import PatchCorruptor, _TopKOcclusion, corrupt, num_occluded, random_occlusion


@pytest.mark.parametrize("rho,n", [(0.1, 16), (0.1, 64), (0.25, 64), (0.5, 9)])
def test_mask_occludes_exactly_ceil_rho_n_patches(rho, n):
    side = int(math.isqrt(n))
    corr = PatchCorruptor(patch_size=4, grid=(side, side), rho=rho)
    occ = corr(torch.rand(5, 3, 4 * side, 4 * side))
    assert occ.shape == (5, n)
    assert set(occ.unique().tolist()) <= {0.0, 1.0}
    assert (occ.sum(1) == math.ceil(rho * n)).all() and num_occluded(rho, n) == math.ceil(rho * n)
    occ = random_occlusion(5, n, num_occluded(rho, n), torch.Generator().manual_seed(0), torch.device("cpu"))
    assert (occ.sum(1) == math.ceil(rho * n)).all()


def test_straight_through_estimator_passes_hardtanh_of_the_gradient():
    s = torch.randn(2, 6, requires_grad=True)
    occ = _TopKOcclusion.apply(s, 2)
    g = torch.tensor([[3.0, -0.5, 0.2, -4.0, 1.0, 0.0]] * 2)
    (occ * g).sum().backward()
    assert torch.equal(s.grad, g.clamp(-1, 1))


def test_corruption_model_gets_gradients_and_replaces_patches():
    corr = PatchCorruptor(patch_size=4, grid=(4, 4), rho=0.25)
    x = torch.rand(3, 3, 16, 16)
    fill = torch.rand(3, 3, 16, 16)
    occ = corr(x)
    x_hat = corrupt(x, occ, fill, (4, 4), 4)
    o = occ.detach().view(3, 1, 4, 4).repeat_interleave(4, 2).repeat_interleave(4, 3).bool().expand_as(x)
    assert torch.equal(x_hat[o], fill[o]) and torch.equal(x_hat[~o], x[~o])
    ((x_hat - x) ** 2).sum().backward()
    assert corr.conv.weight.grad is not None and corr.conv.weight.grad.abs().sum() > 0
    assert corr.fc.weight.grad.abs().sum() > 0


def test_afat_loss_and_ascent_step(tiny_vit, batch):
    x, y = batch
    loss_fn = create_loss("afat", lam=1.0, rho=0.25)
    loss_fn.setup(tiny_vit)
    tiny_vit.train()
    loss, clean, corrupted = loss_fn(tiny_vit, x, y, 0)
    assert clean.shape == corrupted.shape == (16, 4)
    ce = F.cross_entropy(clean, y, label_smoothing=0.1)
    assert loss.item() > ce.item()                          # + λ·alignment > 0
    loss.backward()
    before = [p.detach().clone() for p in loss_fn.corruptor.parameters()]
    grads = [p.grad.clone() for p in loss_fn.corruptor.parameters()]
    assert all(g.abs().sum() > 0 for g in grads)
    loss_fn.optimizer = torch.optim.SGD(loss_fn.corruptor.parameters(), lr=1e-3)   # plain SGD to read the direction
    loss_fn.grad_clip = 1e9
    loss_fn.after_step()
    for p0, p, g in zip(before, loss_fn.corruptor.parameters(), grads):
        assert torch.allclose(p - p0, 1e-3 * g, atol=1e-8)   # moved *up* the alignment loss
        assert p.grad is None
    assert "align_loss" in loss_fn.metrics()


def test_afat_with_lambda_zero_is_ce_on_clean(tiny_vit, batch):
    x, y = batch
    tiny_vit.eval()
    for name in ("afat", "afat_random", "afat_patchdrop"):
        loss, clean, _ = create_loss(name, lam=0.0)(tiny_vit, x, y, 0)
        assert torch.allclose(loss, F.cross_entropy(tiny_vit(x), y, label_smoothing=0.1), atol=1e-5)
