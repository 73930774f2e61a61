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
