import pytest
import torch

from robustvit.corruptions.occlusion import (apply_patch_masks, default_patch_size, num_occluded, occlude_patches,
                                             occlusion_patch_size, sample_patch_masks)
from robustvit.errors import RobustvitError


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("rho,p,m", [(0.0, 64, 0), (0.1, 64, 6), (0.25, 64, 16), (0.5, 16, 8), (1.0, 16, 16),
                                     (0.125, 4, 1), (0.375, 4, 2)])
def test_exact_number_of_occluded_patches(rho, p, m):
    assert num_occluded(rho, p) == m   # round half up: 0.5 → 1, 1.5 → 2
    side = int(p ** 0.5)
    masks = sample_patch_masks(5, (side, side), rho, num_masks=3, generator=gen())
    assert masks.shape == (3, 5, side, side) and masks.dtype == torch.bool
    assert (masks.sum((-1, -2)) == m).all()


def test_noise_replaces_exactly_the_masked_patches():
    x = torch.full((4, 3, 16, 16), 0.5)
    xo, masks = occlude_patches(x, 0.25, 4, generator=gen(1))
    assert xo.shape == x.shape and masks.shape == (4, 4, 4)
    pix = masks.repeat_interleave(4, 1).repeat_interleave(4, 2)[:, None].expand_as(x)
    assert torch.equal(xo[~pix], x[~pix])                       # kept patches untouched
    noise = xo[pix]
    assert noise.numel() == 4 * 4 * 3 * 16 and (noise != 0.5).all()
    assert 0 <= noise.min() and noise.max() < 1 and abs(noise.mean().item() - 0.5) < 0.05   # U[0, 1)


def test_drop_zeroes_patches_and_masks_are_patch_aligned():
    x = torch.rand(3, 3, 8, 12) * 0.5 + 0.25
    xo, masks = occlude_patches(x, 0.5, 4, mode="drop", generator=gen(2))
    assert masks.shape == (3, 2, 3) and (masks.sum((1, 2)) == 3).all()
    zero = (xo == 0).all(1)                                      # (N, H, W) pixels zeroed in every channel
    assert torch.equal(zero, masks.repeat_interleave(4, 1).repeat_interleave(4, 2))


def test_multiple_masks_and_determinism():
    x = torch.rand(6, 3, 16, 16)
    a, ma = occlude_patches(x, 0.3, 4, num_masks=4, generator=gen(3))
    b, mb = occlude_patches(x, 0.3, 4, num_masks=4, generator=gen(3))
    c, mc = occlude_patches(x, 0.3, 4, num_masks=4, generator=gen(4))
    assert a.shape == (4, 6, 3, 16, 16) and torch.equal(a, b) and torch.equal(ma, mb)
    assert not torch.equal(ma, mc)
    flat = ma.flatten(2)
    assert len({tuple(r.tolist()) for r in flat.flatten(0, 1)}) > 12   # draws differ across images and masks


def test_patches_are_chosen_uniformly():
    masks = sample_patch_masks(4000, (4, 4), 0.25, generator=gen(5))[0].float()
    freq = masks.mean(0)                                          # each patch occluded with probability 4/16
    assert torch.allclose(freq, torch.full_like(freq, 0.25), atol=0.03)


def test_apply_matches_given_masks():
    x = torch.rand(2, 3, 8, 8)
    masks = torch.zeros(1, 2, 2, 2, dtype=torch.bool)
    masks[0, 0, 1, 0] = True
    out = apply_patch_masks(x, masks, 4, mode="drop")[0]
    assert (out[0, :, 4:, :4] == 0).all() and torch.equal(out[0, :, :4], x[0, :, :4]) and torch.equal(out[1], x[1])


def test_patch_size_of_models(tiny_vit, tiny_resnet):
    assert occlusion_patch_size(tiny_vit) == tiny_vit.spec.patch_size == 4
    assert tiny_resnet.spec.patch_size is None and occlusion_patch_size(tiny_resnet) == 4   # 32 px → 8×8 grid
    assert occlusion_patch_size(tiny_resnet, patch_size=8) == 8
    assert default_patch_size(224) == 16 and default_patch_size(32) == 4


def test_bad_input_errors():
    x = torch.rand(2, 3, 10, 10)
    with pytest.raises(RobustvitError, match="cannot be cut"):
        occlude_patches(x, 0.1, 4)
    with pytest.raises(RobustvitError, match="rho"):
        occlude_patches(torch.rand(2, 3, 8, 8), 1.5, 4)
    with pytest.raises(RobustvitError, match="mode"):
        occlude_patches(torch.rand(2, 3, 8, 8), 0.1, 4, mode="blur")


# -- one occlusion-noise definition (RSPC: U[0, 1) in the model's normalised input) ------------------------
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def test_occlusion_noise_is_uniform_in_normalised_space_by_default():
    from robustvit.corruptions.occlusion import occlusion_noise

    fill = occlusion_noise((2, 3, 8, 8), mean=MEAN, std=STD, generator=gen(4))
    u = torch.rand(2, 3, 8, 8, generator=gen(4))
    z = (fill - torch.tensor(MEAN).view(3, 1, 1)) / torch.tensor(STD).view(3, 1, 1)
    assert torch.allclose(z, u, atol=1e-6)                       # the network sees U[0, 1)
    assert torch.equal(occlusion_noise((2, 3, 8, 8), noise_space="pixel", mean=MEAN, std=STD, generator=gen(4)), u)
    with pytest.raises(RobustvitError, match="noise space"):
        occlusion_noise((1, 3, 2, 2), noise_space="lab")


def _tiny_vit():
    from robustvit.models import create_model

    torch.manual_seed(0)
    return create_model("vit_cifar_tiny", embed_dim=16, depth=1, num_heads=2, img_size=16, num_classes=3).eval()


def test_afat_patch_occlusion_and_stability_share_the_noise():
    """afat's fill, patch_occlusion's and attention_stability's occluded pixels are the same function of the
    uniform draw: u·std + mean with the model's normalisation (pixel space: u)."""
    from robustvit.analysis.stability import StabilityOptions
    from robustvit.corruptions.occlusion import model_normalization, occlusion_noise
    from robustvit.evaluation.suites import Batch, EvalContext, create_suite
    from robustvit.training.losses import create_loss

    model = _tiny_vit()
    mean, std = model_normalization(model)
    assert (mean, std) == (tuple(model.spec.mean), tuple(model.spec.std)) and std != (1.0, 1.0, 1.0)
    x = torch.rand(2, 3, 16, 16)
    for space in ("normalized", "pixel"):
        want = occlusion_noise(tuple(x.shape), noise_space=space, mean=mean, std=std, generator=gen(7))
        got = create_loss("afat_random", noise_space=space).noise(model, x, gen(7))
        assert torch.equal(got, want)
    # patch_occlusion: what the model sees on occluded patches is U[0, 1) once normalised (default)
    seen = []
    real = model.forward
    model.forward = lambda t: (seen.append(t.clone()), real(t))[1]
    suite = create_suite("patch_occlusion:rhos=0.5:masks=1")
    ctx = EvalContext(model=model, model_name="m", models={"m": model}, data_spec="t", dataset=None, num_classes=3,
                      device=torch.device("cpu"), seed=0)
    g = gen(9)
    suite.run(ctx, "0.5", Batch(x, torch.zeros(2, dtype=torch.long), torch.arange(2), g))
    masks = sample_patch_masks(2, (4, 4), 0.5, num_masks=1, generator=gen(9))
    want = apply_patch_masks(x, masks, 4, generator=_after(masks, 9), mean=mean, std=std)[0]
    assert torch.equal(seen[0], want)
    pix = masks[0].repeat_interleave(4, 1).repeat_interleave(4, 2)[:, None].expand_as(x)
    z = ((seen[0] - torch.tensor(mean).view(3, 1, 1)) / torch.tensor(std).view(3, 1, 1))[pix]
    assert 0 <= float(z.min()) and float(z.max()) < 1
    assert StabilityOptions().noise_space == "normalized" and suite.finalize(
        ctx, {"clean": {"n": 2, "correct": 1}, "0.5": {"n": 2, "correct": [1]}})["noise_space"] == "normalized"


def _after(masks, seed):
    """A generator in the state patch_occlusion leaves it after drawing ``masks`` (the fill is drawn next)."""
    g = gen(seed)
    sample_patch_masks(masks.shape[1], tuple(masks.shape[2:]), 0.5, num_masks=masks.shape[0], generator=g)
    return g
