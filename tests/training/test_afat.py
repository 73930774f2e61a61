import copy
import math

import pytest
import torch
import torch.nn.functional as F

from robustvit.errors import RobustvitError
from robustvit.training import create_loss
from robustvit.training.losses.afat import PatchCorruptor, _TopKOcclusion, corrupt, num_occluded, random_occlusion


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


# ---- RSPC's step rule, noise space and soft targets -------------------------------------------------------
def _afat_setup(tiny_vit, **opts):
    loss_fn = create_loss("afat", rho=0.25, **opts)
    loss_fn.setup(tiny_vit)
    tiny_vit.eval()                      # no dropout: the hand computation replays the same forward
    return loss_fn


def _hand_step(loss_fn, model, x, y, scale):
    """RSPC's corruption-model update computed by hand: the mask gradient g = ∂(CE + λ·align)/∂M, the estimator's
    hardtanh(scale·g), its backward through the scores, negation, clip at norm 5, SGD-Nesterov with decay."""
    from robustvit.models.probe import ViTProbe
    from robustvit.utils import derive_seed

    corr = copy.deepcopy(loss_fn.corruptor)
    gen = torch.Generator().manual_seed(derive_seed(0, "afat", 0, 0))
    u = torch.rand(x.shape, generator=gen)
    mean = torch.tensor(model.spec.mean).view(1, 3, 1, 1)
    std = torch.tensor(model.spec.std).view(1, 3, 1, 1)
    fill = u * std + mean                                        # U[0, 1) in normalised space
    scores = corr.scores(x)
    m = torch.zeros_like(scores).scatter_(1, scores.topk(corr.k, 1).indices, 1.0).requires_grad_(True)
    o = m.view(len(x), 1, *corr.grid).repeat_interleave(corr.patch_size, 2).repeat_interleave(corr.patch_size, 3)
    x_hat = x * (1 - o) + fill * o
    out = ViTProbe(model).run(torch.cat([x, x_hat]), tokens=True)
    n = len(x)
    align = torch.stack([((t[n:] - t[:n]) ** 2).mean() for t in out.tokens]).mean()
    total = F.cross_entropy(out.logits[:n], y, label_smoothing=0.1) + 0.005 * align
    (g_m,) = torch.autograd.grad(total, m)
    h = (scale * g_m).clamp(-1, 1)
    params = list(corr.parameters())
    grads = torch.autograd.grad((scores * h).sum(), params)
    asc = [-g for g in grads]
    norm = torch.sqrt(sum((g ** 2).sum() for g in asc))
    coef = min(1.0, 5.0 / (float(norm) + 1e-6))
    new = []
    for p, g in zip(params, asc):
        d = g * coef + 0.05 * p.detach()
        d = d + 0.9 * d                                           # Nesterov, first step: buf = d
        new.append(p.detach() - 1e-4 * d)
    return new, g_m, float(norm)


def test_rspc_step_is_the_amp_scaled_saturated_and_clipped_step(tiny_vit, batch):
    x, y = batch
    loss_fn = _afat_setup(tiny_vit)
    want, g_m, norm = _hand_step(loss_fn, tiny_vit, x, y, 65536.0)
    saturated = (65536.0 * g_m).abs() >= 1
    assert saturated.sum() >= len(x) and not (g_m.abs() >= 1).any()   # the scale saturates what λ·∇ never does
    assert norm > 5                                               # … and the clip at 5 acts
    loss, _, _ = loss_fn(tiny_vit, x, y, 0)
    loss.backward()
    loss_fn.after_step()
    for p, w in zip(loss_fn.corruptor.parameters(), want):
        assert torch.allclose(p.detach(), w, rtol=1e-5, atol=1e-9)


def test_paper_rule_is_the_plain_gradient_and_orders_of_magnitude_smaller(tiny_vit, batch):
    x, y = batch
    steps = {}
    for rule in ("rspc", "paper"):
        loss_fn = _afat_setup(tiny_vit, step_rule=rule, weight_decay=0.0)
        before = [p.detach().clone() for p in loss_fn.corruptor.parameters()]
        if rule == "paper":
            want, _, norm = _hand_step(loss_fn, tiny_vit, x, y, 1.0)
            assert norm < 5                                       # the clip does not act
        loss, _, _ = loss_fn(tiny_vit, x, y, 0)
        loss.backward()
        loss_fn.after_step()
        steps[rule] = math.sqrt(sum(float(((p - b) ** 2).sum()) for p, b in zip(loss_fn.corruptor.parameters(), before)))
    assert steps["rspc"] > 100 * steps["paper"] > 0


def test_corruption_model_moves_every_step_and_its_mask_changes_over_an_epoch(tiny_vit):
    g = torch.Generator().manual_seed(1)
    xs, ys = torch.rand(64, 3, 16, 16, generator=g), torch.randint(0, 4, (64,), generator=g)
    loss_fn = create_loss("afat", rho=0.25)
    loss_fn.setup(tiny_vit)
    tiny_vit.train()
    opt = torch.optim.AdamW(tiny_vit.parameters(), lr=1e-3)
    with torch.no_grad():
        mask0 = loss_fn.corruptor(xs)
    prev = [p.detach().clone() for p in loss_fn.corruptor.parameters()]
    for i in range(8):
        loss, _, _ = loss_fn(tiny_vit, xs[8 * i: 8 * i + 8], ys[8 * i: 8 * i + 8], 0)
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss_fn.after_step()
        now = [p.detach().clone() for p in loss_fn.corruptor.parameters()]
        assert all((a - b).norm() > 1e-4 for a, b in zip(now, prev))   # a fixed-norm step, not weight decay alone
        prev = now
    with torch.no_grad():
        assert (loss_fn.corruptor(xs) != mask0).any(1).sum() >= 5


def test_noise_is_uniform_in_normalised_or_pixel_space(tiny_vit):
    x = torch.rand(4, 3, 16, 16)
    mean = torch.tensor(tiny_vit.spec.mean).view(1, 3, 1, 1)
    std = torch.tensor(tiny_vit.spec.std).view(1, 3, 1, 1)
    for space in ("normalized", "pixel"):
        loss_fn = create_loss("afat_random", noise_space=space)
        fill = loss_fn.noise(tiny_vit, x, torch.Generator().manual_seed(0))
        u = torch.rand(x.shape, generator=torch.Generator().manual_seed(0))
        assert torch.allclose(fill, u * std + mean if space == "normalized" else u)
    z = (create_loss("afat").noise(tiny_vit, x, torch.Generator().manual_seed(0)) - mean) / std
    assert 0 <= z.min() and z.max() < 1                           # what the network sees is U[0, 1)


def test_afat_takes_soft_targets_and_mixup_is_allowed(tiny_vit, batch):
    from robustvit.training import TrainConfig

    x, y = batch
    soft = F.one_hot(y, 4).float() * 0.7 + 0.075
    loss_fn = create_loss("afat", lam=0.0)
    tiny_vit.eval()
    loss, clean, _ = loss_fn(tiny_vit, x, soft, 0)
    assert torch.allclose(loss, -(soft * F.log_softmax(clean, 1)).sum(1).mean())
    TrainConfig(model="m", data="d", out="o", loss="afat", mixup=0.8, cutmix=1.0).validate()
    with pytest.raises(RobustvitError, match="soft targets"):
        TrainConfig(model="m", data="d", out="o", loss="pgd_at", mixup=0.8).validate()
