"""The corruption engine over the whole registry: shape, range, determinism, batching, severity, errors."""

from __future__ import annotations

import pytest
import torch

from robustvit.corruptions import (BENCHMARK_CORRUPTIONS, CORRUPTION_GROUPS, EXTRA_CORRUPTIONS, corrupt,
                                   corruption_params, is_random, jpeg_roundtrip, list_corruptions, resolve_preset)
from robustvit.errors import RobustvitError

NAMES = list_corruptions()
DETERMINISTIC = [n for n in NAMES if not is_random(n)]
RANDOM = [n for n in NAMES if is_random(n)]
# severity tables that grow monotonically in strength (saturate, elastic, snow, frost, glass, spatter do not)
MONOTONE = ["gaussian_noise", "shot_noise", "impulse_noise", "speckle_noise", "defocus_blur", "motion_blur",
            "zoom_blur", "gaussian_blur", "fog", "brightness", "contrast", "pixelate", "jpeg_compression"]


def natural(n: int = 2, size: int = 32, seed: int = 0) -> torch.Tensor:
    """Smooth, image-like test inputs: gradients, a disc and mild texture, inside (0.1, 0.9)."""
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.linspace(0, 1, size), torch.linspace(0, 1, size), indexing="ij")
    imgs = []
    for i in range(n):
        c = torch.rand(3, generator=g)
        disc = (((yy - 0.5) ** 2 + (xx - 0.4 - 0.1 * i) ** 2) < 0.08).float()
        base = torch.stack([c[0] * xx + 0.3 * disc, c[1] * yy, 0.5 * (1 - xx) + 0.2 * disc])
        imgs.append(base + 0.05 * torch.rand(3, size, size, generator=g))
    return (0.1 + 0.8 * torch.stack(imgs).clamp(0, 1))


def test_registry_groups_and_constants():
    assert len(BENCHMARK_CORRUPTIONS) == 15 and len(EXTRA_CORRUPTIONS) == 4
    assert NAMES == list(BENCHMARK_CORRUPTIONS + EXTRA_CORRUPTIONS) == list_corruptions("all")
    assert list_corruptions("benchmark") == list(BENCHMARK_CORRUPTIONS)
    parts = [list_corruptions(gr) for gr in ("noise", "blur", "weather", "digital")]
    assert sum(parts, []) == list(BENCHMARK_CORRUPTIONS)
    assert parts[2] == ["snow", "frost", "fog", "brightness"]
    assert list_corruptions("extra") == ["speckle_noise", "gaussian_blur", "spatter", "saturate"]
    assert set(CORRUPTION_GROUPS) == {"noise", "blur", "weather", "digital", "extra", "benchmark", "all", "imagenet_c_bar",
                                      "cifar10_c_bar"}
    assert set(DETERMINISTIC) == {"defocus_blur", "zoom_blur", "brightness", "contrast", "pixelate",
                                  "jpeg_compression", "gaussian_blur", "saturate"}


@pytest.mark.parametrize("severity", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("name", NAMES)
def test_shared_checker(name: str, severity: int):
    x = natural(2, 32)
    y = corrupt(x, name, severity, seed=3)
    assert y.shape == x.shape and y.dtype == x.dtype and y.device == x.device
    assert torch.isfinite(y).all()
    assert y.min() >= 0 and y.max() <= 1
    assert torch.equal(y, corrupt(x, name, severity, seed=3)), "same seed must give the same output"
    g = torch.Generator().manual_seed(3)
    assert torch.equal(y, corrupt(x, name, severity, generator=g)), "seed=k is a generator seeded with k"
    if name in DETERMINISTIC:
        per_image = torch.cat([corrupt(x[i:i + 1], name, severity, seed=11) for i in range(len(x))])
        torch.testing.assert_close(y, per_image, atol=1e-5, rtol=0)
    else:
        other = corrupt(x, name, severity, seed=4)
        assert not torch.equal(y, other), "a different seed should give a different draw"


@pytest.mark.parametrize("name", RANDOM)
def test_random_batch_statistics_match_per_image(name: str):
    """Random corruptions: image i in a batch is another draw from the same distribution as alone."""
    x = natural(1, 32).expand(8, -1, -1, -1).contiguous()
    batch = corrupt(x, name, 3, seed=0)
    singles = torch.cat([corrupt(x[:1], name, 3, seed=s) for s in range(8)])
    d_batch, d_single = (batch - x).abs(), (singles - x).abs()
    assert d_batch.mean().item() == pytest.approx(d_single.mean().item(), rel=0.35, abs=3e-3)


@pytest.mark.parametrize("name", MONOTONE)
def test_damage_grows_with_severity(name: str):
    x = natural(4, 32)
    damage = [(corrupt(x, name, s, seed=0) - x).abs().mean().item() for s in range(1, 6)]
    assert all(b >= a - 1e-3 for a, b in zip(damage, damage[1:])), damage
    assert damage[-1] > damage[0]


def test_float64_and_empty_batches():
    x = natural(2, 32).double()
    y = corrupt(x, "gaussian_blur", 2)
    assert y.dtype == torch.float64
    empty = torch.zeros(0, 3, 32, 32)
    assert corrupt(empty, "fog", 1).shape == (0, 3, 32, 32)


def test_preset_choice_and_scaling():
    assert resolve_preset(None, 32, 32) == "cifar"
    assert resolve_preset(None, 64, 200) == "cifar"
    assert resolve_preset(None, 65, 65) == "imagenet"
    assert resolve_preset("imagenet", 32, 32) == "imagenet"
    p = corruption_params("motion_blur", 3, "imagenet")
    assert (p.radius, p.sigma, p.scale) == (15.0, 8.0, 1.0)
    p2 = corruption_params("motion_blur", 3, "imagenet", size=448)
    assert (p2.radius, p2.sigma) == (30.0, 16.0)
    assert corruption_params("gaussian_noise", 2, "cifar", size=(64, 96)).c == 0.06   # not spatial
    assert corruption_params("defocus_blur", 5, "cifar", size=64).radius == 3.0
    assert corruption_params("glass_blur", 1, "imagenet").table["iters"] == 2
    with pytest.raises(AttributeError, match="has no parameter"):
        _ = p.nope
    # a cifar-size image with the imagenet preset differs from the default (cifar) parameters
    x = natural(1, 32)
    assert not torch.equal(corrupt(x, "gaussian_blur", 3), corrupt(x, "gaussian_blur", 3, preset="imagenet"))


def test_jpeg_quality_round_trip():
    x = natural(2, 32)
    y = corrupt(x, "contrast", 1, jpeg_quality=85)
    assert torch.equal(torch.round(y * 255), y * 255)            # on the uint8 grid
    assert 0 < (y - corrupt(x, "contrast", 1)).abs().mean() < 0.02


@pytest.mark.parametrize("kwargs,match", [
    (dict(name="gausian_noise", severity=1), "did you mean gaussian_noise"),
    (dict(name="fog", severity=0), "severity must be an integer from 1 to 5"),
    (dict(name="fog", severity=6), "severity"),
    (dict(name="fog", severity=True), "severity"),
    (dict(name="fog", severity="3"), "severity"),
    (dict(name="fog", severity=1, preset="imagenet64"), "unknown corruption preset"),
    (dict(name="fog", severity=1, jpeg_quality=0), "jpeg_quality"),
])
def test_errors_are_one_line(kwargs, match):
    x = natural(1, 32)
    with pytest.raises(RobustvitError, match=match) as e:
        corrupt(x, **kwargs)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("x,match", [
    (torch.rand(2, 32, 32), r"shape \(N, 3, H, W\)"),
    (torch.rand(1, 1, 32, 32), "shape"),
    ((torch.rand(1, 3, 32, 32) * 255).to(torch.uint8), "must be float"),
    (torch.rand(1, 3, 32, 32) * 2, r"\[0, 1\]"),
    (torch.full((1, 3, 32, 32), float("nan")), r"\[0, 1\], got values in \[nan, nan\]"),
])
def test_bad_images(x, match):
    with pytest.raises(RobustvitError, match=match):
        corrupt(x, "fog", 1)


@pytest.mark.parametrize("n", [1, 40])          # one chunk; several chunks on the coding threads
@pytest.mark.parametrize("bad, shown", [(-0.25, r"\[-0.25, 1\]"), (1.5, r"\[\S+, 1.5\]"), (float("nan"), r"\[nan, nan\]")])
def test_jpeg_checks_the_range(n, bad, shown):
    """jpeg_compression checks the range on its coding threads (corrupt skips its own check for it)."""
    x = torch.rand(n, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    x[-1, 2, 5, 7] = bad                        # in the last chunk
    with pytest.raises(RobustvitError, match=r"x must lie in \[0, 1\], got values in " + shown) as e:
        corrupt(x, "jpeg_compression", 2)
    assert "\n" not in str(e.value)
    with pytest.raises(RobustvitError, match=r"x must lie in \[0, 1\]"):
        jpeg_roundtrip(x, 50, rounding="floor")
    quality = int(corruption_params("jpeg_compression", 2, "cifar").quality)      # 64 px: the cifar preset
    x = x.nan_to_num().clamp(0, 1)
    assert torch.equal(corrupt(x, "jpeg_compression", 2), jpeg_roundtrip(x, quality))


def test_unknown_group():
    with pytest.raises(RobustvitError, match="unknown corruption group"):
        list_corruptions("weathr")


def test_larger_images_use_imagenet_parameters():
    x = natural(1, 96)
    for name in ("motion_blur", "snow", "glass_blur", "spatter", "frost", "elastic_transform"):
        y = corrupt(x, name, 2, seed=0)
        assert y.shape == x.shape and 0 <= y.min() and y.max() <= 1


def test_unseeded_calls_draw_from_torchs_global_generator():
    x = torch.full((2, 3, 32, 32), 0.5)
    a, b = corrupt(x, "gaussian_noise", 3), corrupt(x, "gaussian_noise", 3)
    assert not torch.equal(a, b)                      # a loop over batches gets fresh noise each time
    torch.manual_seed(0)
    c = corrupt(x, "gaussian_noise", 3)
    torch.manual_seed(0)
    assert torch.equal(c, corrupt(x, "gaussian_noise", 3))
    assert torch.equal(corrupt(x, "gaussian_noise", 3, seed=4), corrupt(x, "gaussian_noise", 3, seed=4))
