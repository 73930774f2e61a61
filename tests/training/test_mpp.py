import math

import numpy as np
import pytest
import torch

from robustvit.errors import RobustvitError
from robustvit.runs import read_results
from robustvit.models import create_model
from robustvit.training import TrainConfig, train
from robustvit.training.losses import create_loss, list_losses
from robustvit.training.losses.mpp import (KEEP, MASK, RANDOM, apply_corruption, corrupt_pixels, mean_colour_targets,
                                    patch_embed_is_local, sample_corruption)
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


@pytest.mark.parametrize("prefix,space", [(True, "embedding"), (False, "embedding"), (True, "pixels")])
def test_uncorrupted_encoding_is_the_models_own_forward(prefix, space):
    model = _tiny_vit(prefix).eval()
    model.mean.fill_(0.4)
    model.std.fill_(0.3)
    loss = create_loss("mpp", mask_ratio=1.0, p_mask=0.0, p_random=0.0, space=space)   # all "corrupted" = kept
    loss.setup(model)
    x = torch.rand(2, 3, 16, 16)
    c = sample_corruption(2, 16, torch.Generator().manual_seed(0), 1.0, 0.0, 0.0)
    with torch.no_grad():
        got = loss.corrupt_and_encode(model, x, c)
        ref = model.net.forward_features((x - 0.4) / 0.3)
    torch.testing.assert_close(got, ref)
    assert loss.num_prefix == (1 if prefix else 0)


def test_corrupt_pixels_replaces_patches_as_sampled():
    g = torch.Generator().manual_seed(4)
    z = torch.randn(2, 3, 8, 12, generator=g)
    c = sample_corruption(2, 6, g, ratio=0.7, p_mask=0.4, p_random=0.4)
    mask = torch.randn(3 * 16, generator=g)
    out = corrupt_pixels(z, c, mask, 4)
    cell = lambda t, n, k: t[n, :, 4 * (k // 3):4 * (k // 3) + 4, 4 * (k % 3):4 * (k % 3) + 4]   # row-major
    for n in range(2):
        for k in range(6):
            a, src = int(c.action[n, k]), int(c.source[n, k])
            expect = (mask.view(3, 4, 4) if a == MASK else cell(z, src // 6, src % 6) if a == RANDOM
                      else cell(z, n, k))
            torch.testing.assert_close(cell(out, n, k), expect)


def test_patch_embed_locality_is_checked_on_the_module():
    micro, demo = create_model("vit_cifar_micro"), create_model("vit_cifar_demo")
    assert patch_embed_is_local(micro.net.patch_embed, (32, 32), (8, 8))             # patchify projection
    assert not patch_embed_is_local(demo.net.patch_embed, (32, 32), (8, 8))          # 3×3 convs see neighbours
    assert demo.net.patch_embed.training                                             # mode restored
    spaces = {}
    for name, m in (("micro", micro), ("demo", demo)):
        loss = create_loss("mpp")
        loss.setup(m)
        spaces[name] = (loss.space, loss.mask_embedding.numel())
    assert spaces == {"micro": ("embedding", 128), "demo": ("pixels", 3 * 4 * 4)}
    with pytest.raises(RobustvitError, match="expected one of auto, embedding, pixels"):
        create_loss("mpp", space="tokens")


def test_pixel_corruption_equals_embedding_corruption_for_a_patchify_projection():
    """For a linear patch projection, replacing a patch's pixels by a [mask] patch m is replacing its embedding
    by proj(m): the two spaces give the same encoding (the paper's corruption, generalised)."""
    model = _tiny_vit().eval()
    px, emb = create_loss("mpp", space="pixels"), create_loss("mpp", space="embedding")
    px.setup(model)
    emb.setup(model)
    pe = model.net.patch_embed
    with torch.no_grad():
        emb.mask_embedding.copy_(pe.proj(px.mask_embedding.view(1, 3, 4, 4)).flatten())
        x = torch.rand(3, 3, 16, 16)
        c = sample_corruption(3, 16, torch.Generator().manual_seed(5))
        torch.testing.assert_close(px.corrupt_and_encode(model, x, c), emb.corrupt_and_encode(model, x, c),
                                   rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("space,leaks", [("pixels", False), ("embedding", True)])
def test_masked_colour_does_not_leak_through_a_conv_stem(space, leaks):
    """With a convolutional stem, a masked patch's pixels reach its neighbours' embeddings: corrupting the
    embeddings leaks the target, corrupting the pixels (``auto``'s choice there) does not."""
    model = create_model("vit_cifar_demo").eval()
    loss = create_loss("mpp", space=space)
    loss.setup(model)
    c = sample_corruption(1, 64, torch.Generator().manual_seed(0), 0.5, 1.0, 0.0)
    k = int(c.corrupted[0].nonzero()[len(c.corrupted[0].nonzero()) // 2])            # a masked patch
    x = torch.rand(1, 3, 32, 32)
    x2 = x.clone()
    r, col = divmod(k, 8)
    x2[..., 4 * r:4 * r + 4, 4 * col:4 * col + 4] = 1 - x2[..., 4 * r:4 * r + 4, 4 * col:4 * col + 4]
    with torch.no_grad():
        a, b = (loss.corrupt_and_encode(model, v, c) for v in (x, x2))
    assert (not torch.allclose(a, b)) == leaks


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
    assert read_results(tmp_path / "mpp")["train"]["loss"] == {"name": "mpp", "space": "embedding"}
    model = create_model(str(ck))                       # a plain timm model: loads without the MPP parts
    assert type(model.net).__name__ == "VisionTransformer"
    # the trainer's optimizer stepped every model parameter and the three MPP parameters
    assert len(state["optimizer"]["state"]) == len(list(model.parameters())) + 3
    ft = TrainConfig(model=str(ck), out=str(tmp_path / "ft"), epochs=1, lr=1e-3, **common)
    out = finetune(ft, progress=False)
    assert create_model(str(out)).spec.num_classes == 10
