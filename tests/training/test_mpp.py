import math

import numpy as np
import pytest
import torch

from robustvit.errors import RobustvitError
from robustvit.models import create_model
from robustvit.training import TrainConfig, train
from robustvit.training.losses import create_loss, list_losses
from robustvit.training.mpp import (KEEP, MASK, RANDOM, apply_corruption, mean_colour_targets, sample_corruption)
from robustvit.training.finetune import finetune
from robustvit.training.recipes import get_recipe
from robustvit.training.trainer import STATE_FILE


def test_corruption_proportions():
    n, length = 400, 64
    c = sample_corruption(n, length, torch.Generator().manual_seed(0))
    assert (c.corrupted.sum(1) == 32).all()                         # exactly 50 % of every image's patches
    assert (c.action[~c.corrupted] == KEEP).all()
    acts = c.action[c.corrupted]
    m = acts.numel()                                                # 12 800 corrupted patches
    for kind, p in ((MASK, 0.8), (RANDOM, 0.1), (KEEP, 0.1)):
        frac = float((acts == kind).float().mean())
        assert abs(frac - p) < 4 * math.sqrt(p * (1 - p) / m), (kind, frac)
    own = torch.arange(n * length).view(n, length)
    assert (c.source != own).all() and c.source.min() >= 0 and c.source.max() < n * length
    # positions are uniform: every patch index is corrupted about half of the time
    per_pos = c.corrupted.float().mean(0)
    assert (per_pos - 0.5).abs().max() < 4 * math.sqrt(0.25 / n)
    again = sample_corruption(n, length, torch.Generator().manual_seed(0))
    assert torch.equal(again.action, c.action) and torch.equal(again.source, c.source)


def test_apply_corruption_replaces_as_sampled():
    g = torch.Generator().manual_seed(1)
    tokens = torch.randn(3, 10, 5, generator=g)
    c = sample_corruption(3, 10, g, ratio=0.6, p_mask=0.4, p_random=0.4)
    mask = torch.randn(5, generator=g)
    out = apply_corruption(tokens, c, mask)
    flat = tokens.reshape(30, 5)
    for i in range(3):
        for j in range(10):
            a = int(c.action[i, j])
            expect = mask if a == MASK else flat[c.source[i, j]] if a == RANDOM else tokens[i, j]
            torch.testing.assert_close(out[i, j], expect)
    assert {int(a) for a in c.action[c.corrupted]} == {KEEP, MASK, RANDOM}


def test_mean_colour_targets_match_a_loop():
    x = torch.rand(2, 3, 8, 12, generator=torch.Generator().manual_seed(2))
    x[0, :, :4, :4] = 1.0                                           # a saturated patch: index 511
    got = mean_colour_targets(x, 4)
    xs = x.numpy()
    for n in range(2):
        k = 0
        for r in range(2):
            for col in range(3):
                mean = xs[n, :, 4 * r:4 * r + 4, 4 * col:4 * col + 4].reshape(3, -1).mean(1)
                q = [min(int(v * 8), 7) for v in mean]
                assert int(got[n, k]) == q[0] * 64 + q[1] * 8 + q[2]
                k += 1
    assert int(got[0, 0]) == 511 and got.shape == (2, 6)


def _tiny_vit(prefix=True):
    torch.manual_seed(0)
    kw = {"embed_dim": 32, "depth": 2, "num_heads": 2, "img_size": 16}
    if prefix:
        kw.update(class_token=True, global_pool="token")
    return create_model("vit_cifar_micro", num_classes=4, **kw)


@pytest.mark.parametrize("prefix", [True, False])
def test_uncorrupted_encoding_is_the_models_own_forward(prefix):
    model = _tiny_vit(prefix).eval()
    model.mean.fill_(0.4)
    model.std.fill_(0.3)
    loss = create_loss("mpp", mask_ratio=1.0, p_mask=0.0, p_random=0.0)     # every patch "corrupted" = kept
    loss.setup(model)
    x = torch.rand(2, 3, 16, 16)
    c = sample_corruption(2, 16, torch.Generator().manual_seed(0), 1.0, 0.0, 0.0)
    with torch.no_grad():
        got = loss.corrupt_and_encode(model, x, c)
        ref = model.net.forward_features((x - 0.4) / 0.3)
    torch.testing.assert_close(got, ref)
    assert loss.num_prefix == (1 if prefix else 0)


def test_mpp_loss_falls_and_trains_mask_embedding_and_head():
    torch.set_num_threads(1)
    model = _tiny_vit()
    loss_fn = create_loss("mpp", seed=3)
    loss_fn.setup(model)
    names = [n for n, _ in loss_fn.optimized_parameters()]
    assert names[0] == "mpp.mask_token" and "mpp.head.weight" in names
    params = list(model.parameters()) + [p for _, p in loss_fn.optimized_parameters()]
    opt = torch.optim.Adam(params, lr=3e-3)
    g = torch.Generator().manual_seed(0)
    # images of a few flat colours per 4×4 patch: the colour is predictable from the uncorrupted neighbours
    base = torch.rand(8, 3, 2, 2, generator=g)
    x = base.repeat_interleave(8, 2).repeat_interleave(8, 3)
    y = torch.zeros(8, dtype=torch.long)
    losses = []
    for step in range(40):
        opt.zero_grad()
        loss, cls, adv = loss_fn(model, x, y, 0)
        loss.backward()
        if step == 0:
            assert loss_fn.mask_embedding.grad is not None and loss_fn.mask_embedding.grad.abs().sum() > 0
            assert loss_fn.head.weight.grad.abs().sum() > 0
            assert model.net.blocks[0].attn.qkv.weight.grad.abs().sum() > 0
            assert cls.shape == (8, 4) and adv is None and not cls.requires_grad
            assert float(loss.detach()) == pytest.approx(math.log(512), rel=0.15)
        opt.step()
        losses.append(float(loss.detach()))
    assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5])
    assert int(loss_fn.calls) == 40 and 0 < loss_fn.metrics()["mpp_acc"] <= 1


def test_mpp_refuses_models_the_probe_does_not_support():
    assert "mpp" in list_losses()
    with pytest.raises(RobustvitError, match="probe does not support"):
        create_loss("mpp").setup(create_model("resnet_cifar18", width_mult=0.0625))
    with pytest.raises(RobustvitError, match="mask_ratio"):
        create_loss("mpp", mask_ratio=0.0)


def test_mpp_training_run_then_finetune(tmp_path):
    torch.set_num_threads(1)
    common = dict(data="synthshapes:train,count=48,size=16", batch_size=24, device="cpu")
    kw = {"embed_dim": 32, "depth": 1, "num_heads": 2, "img_size": 16}
    cfg = TrainConfig.from_dict({"recipe": "mpp", "model": "vit_cifar_micro", "out": str(tmp_path / "mpp"),
                                 "epochs": 1, "model_kwargs": kw, **common})
    assert (cfg.loss, cfg.lr) == ("mpp", get_recipe("mpp").settings["lr"])
    ck = train(cfg, progress=False)
    state = torch.load(tmp_path / "mpp" / "last" / STATE_FILE, weights_only=True)
    assert {"mask_embedding", "head.weight", "head.bias", "calls"} <= set(state["loss"])
    assert int(state["loss"]["calls"]) == 2 and state["loss"]["head.weight"].shape == (512, 32)
    model = create_model(str(ck))                       # a plain timm model: loads without the MPP parts
    assert type(model.net).__name__ == "VisionTransformer"
    # the trainer's optimizer stepped every model parameter and the three MPP parameters
    assert len(state["optimizer"]["state"]) == len(list(model.parameters())) + 3
    ft = TrainConfig(model=str(ck), out=str(tmp_path / "ft"), epochs=1, lr=1e-3, **common)
    out = finetune(ft, progress=False)
    assert create_model(str(out)).spec.num_classes == 10
