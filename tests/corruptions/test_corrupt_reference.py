"""Deterministic corruptions and building blocks against numbers computed independently (numpy/scipy/PIL); with
``ROBUSTVIT_REF_PYTHON`` set, frost and spatter against ``imagecorruptions`` 1.1.2 itself on its own draws."""

from __future__ import annotations

import colorsys
import importlib.util
import io
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from scipy import ndimage

from robustvit.corruptions import (clipped_zoom, corrupt, corrupt_image, disk_kernel, get_corruption_names,
                                   glass_shuffle, hsv_to_rgb, motion_blur, plasma_fractal, rgb_to_hsv)
from robustvit.errors import RobustvitError


def checkerboard(size: int = 8, lo: float = 0.2, hi: float = 0.7) -> torch.Tensor:
    yy, xx = np.indices((size, size))
    board = np.where((yy + xx) % 2 == 0, hi, lo)
    img = np.stack([board, board * 0.5 + 0.1, 1 - board])
    return torch.tensor(img[None], dtype=torch.float32)


def photo(size: int, seed: int = 0) -> np.ndarray:
    """A smooth uint8 RGB image with edges (H, W, 3)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size] / size
    img = np.stack([xx, yy, (xx + yy) / 2], -1) * 180 + 30
    img[(yy - .5) ** 2 + (xx - .5) ** 2 < .06] += 40
    img += rng.normal(0, 4, img.shape)
    return img.clip(0, 255).astype(np.uint8)


def to_t(img: np.ndarray) -> torch.Tensor:
    return torch.tensor(img, dtype=torch.float32).permute(2, 0, 1)[None] / 255


def to_np(x: torch.Tensor) -> np.ndarray:
    return x[0].permute(1, 2, 0).double().numpy()


def test_contrast_on_checkerboard():
    x = checkerboard()
    c = 0.4                                                # imagenet severity 1
    mean = x.mean(dim=(2, 3), keepdim=True)                # per channel: (0.45, 0.325, 0.55)
    torch.testing.assert_close(mean.flatten(), torch.tensor([0.45, 0.325, 0.55]))
    expected = (x - mean) * c + mean
    torch.testing.assert_close(corrupt(x, "contrast", 1, preset="imagenet", size_scaling=False), expected)


@pytest.mark.parametrize("severity", [1, 3, 5])
def test_brightness_and_saturate_match_colorsys(severity: int):
    x = checkerboard()
    rgb = to_np(x)
    c = [.1, .2, .3, .4, .5][severity - 1]
    f, s0 = [(0.3, 0), (0.1, 0), (2, 0), (5, 0.1), (20, 0.2)][severity - 1]
    bright = np.zeros_like(rgb)
    sat = np.zeros_like(rgb)
    for i, j in np.ndindex(rgb.shape[:2]):
        h, s, v = colorsys.rgb_to_hsv(*rgb[i, j])
        bright[i, j] = colorsys.hsv_to_rgb(h, s, min(v + c, 1.0))
        sat[i, j] = colorsys.hsv_to_rgb(h, min(max(s * f + s0, 0.0), 1.0), v)
    np.testing.assert_allclose(to_np(corrupt(x, "brightness", severity, preset="imagenet", size_scaling=False)), bright, atol=1e-5)
    np.testing.assert_allclose(to_np(corrupt(x, "saturate", severity, preset="imagenet", size_scaling=False)), sat, atol=1e-5)


def test_saturate_of_grey_follows_skimage_hue_zero():
    x = torch.full((1, 3, 2, 2), 0.5)
    h, s, v = 0.0, min(0 * 5 + 0.1, 1), 0.5                  # severity 4: S = 0·5 + 0.1
    expected = torch.tensor(colorsys.hsv_to_rgb(h, s, v), dtype=torch.float32).view(1, 3, 1, 1).expand_as(x)
    torch.testing.assert_close(corrupt(x, "saturate", 4, preset="imagenet", size_scaling=False), expected)


def test_hsv_round_trip():
    x = torch.rand(2, 3, 8, 8)
    torch.testing.assert_close(hsv_to_rgb(rgb_to_hsv(x)), x, atol=1e-5, rtol=0)


def test_brightness_of_black_is_grey():
    x = torch.zeros(1, 3, 4, 4)
    torch.testing.assert_close(corrupt(x, "brightness", 2, preset="cifar"), torch.full_like(x, 0.1))


@pytest.mark.parametrize("severity", [1, 4])
def test_pixelate_matches_pil(severity: int):
    img = photo(64)
    c = [0.6, 0.5, 0.4, 0.3, 0.25][severity - 1]
    pil = Image.fromarray(img)
    small = pil.resize((int(64 * c), int(64 * c)), Image.BOX)
    ref = np.asarray(small.resize((64, 64), Image.NEAREST)).astype(np.float64) / 255
    out = to_np(corrupt(to_t(img), "pixelate", severity, preset="imagenet", size_scaling=False))
    assert np.abs(out - ref).max() <= 1.01 / 255          # PIL rounds to uint8 after each pass


@pytest.mark.parametrize("sigma_sev", [1, 3])
def test_gaussian_blur_matches_scipy(sigma_sev: int):
    img = photo(40)
    sigma = [1, 2, 3, 4, 6][sigma_sev - 1]
    ref = ndimage.gaussian_filter(img / 255.0, sigma=(sigma, sigma, 0), mode="nearest", truncate=4.0)
    out = to_np(corrupt(to_t(img), "gaussian_blur", sigma_sev, preset="imagenet", size_scaling=False))
    np.testing.assert_allclose(out, ref.clip(0, 1), atol=1e-5)


def _cv_gauss(ksize: int, sigma: float) -> np.ndarray:
    i = np.arange(ksize) - (ksize - 1) / 2
    k = np.exp(-i ** 2 / (2 * sigma ** 2))
    return k / k.sum()


@pytest.mark.parametrize("radius,alias", [(3, 0.1), (10, 0.5)])
def test_defocus_matches_scipy_correlate(radius: int, alias: float):
    lim = 8 if radius <= 8 else radius
    yy, xx = np.mgrid[-lim:lim + 1, -lim:lim + 1]
    disk = (xx ** 2 + yy ** 2 <= radius ** 2).astype(np.float64)
    disk /= disk.sum()
    g = _cv_gauss(3 if radius <= 8 else 5, alias)
    disk = ndimage.correlate1d(ndimage.correlate1d(disk, g, 0, mode="mirror"), g, 1, mode="mirror")
    np.testing.assert_allclose(disk_kernel(radius, alias).numpy(), disk, atol=1e-12)
    img = photo(48)
    ref = np.stack([ndimage.correlate(img[..., ch] / 255.0, disk, mode="mirror") for ch in range(3)], -1)
    severity = [3, 4, 6, 8, 10].index(radius) + 1
    out = to_np(corrupt(to_t(img), "defocus_blur", severity, preset="imagenet", size_scaling=False))
    np.testing.assert_allclose(out, ref.clip(0, 1), atol=2e-5)


def _scipy_clipped_zoom(img: np.ndarray, z: float) -> np.ndarray:
    h = img.shape[0]
    ch = int(np.ceil(h / z))
    top = (h - ch) // 2
    zoomed = ndimage.zoom(img[top:top + ch, top:top + ch], (z, z, 1), order=1)
    trim = (zoomed.shape[0] - h) // 2
    return zoomed[trim:trim + h, trim:trim + h]


def test_zoom_blur_matches_scipy():
    img = photo(48) / 255.0
    factors = np.arange(1, 1.11, 0.01)
    assert len(factors) == 12
    ref = (img + sum(_scipy_clipped_zoom(img, z) for z in factors)) / (len(factors) + 1)
    out = to_np(corrupt(to_t((img * 255).round().astype(np.uint8)), "zoom_blur", 1, preset="imagenet", size_scaling=False))
    np.testing.assert_allclose(out, ref, atol=1e-4)
    np.testing.assert_allclose(to_np(clipped_zoom(to_t((img * 255).astype(np.uint8)), 3.0)),
                               _scipy_clipped_zoom((img * 255).astype(np.uint8) / 255.0, 3.0), atol=1e-4)


def test_jpeg_matches_pil():
    img = photo(64)
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, "JPEG", quality=18)
    ref = np.asarray(Image.open(buf)).astype(np.float64) / 255
    out = to_np(corrupt(to_t(img), "jpeg_compression", 2, preset="imagenet", size_scaling=False))
    assert np.abs(out - ref).mean() < 0.5 / 255


def _numpy_motion_blur(x: np.ndarray, radius: int, sigma: float, angle: float) -> np.ndarray:
    width = 2 * radius + 1
    k = np.exp(-np.arange(width) ** 2 / (2 * sigma ** 2))
    k /= k.sum()
    h, w = x.shape[:2]
    out = np.zeros_like(x)
    for i in range(width):
        oy = math.ceil(i * math.sin(math.radians(angle)) - 0.5)
        ox = math.ceil(i * math.cos(math.radians(angle)) - 0.5)
        if abs(oy) >= h or abs(ox) >= w:
            break
        rows = np.clip(np.arange(h) + oy, 0, h - 1)
        cols = np.clip(np.arange(w) + ox, 0, w - 1)
        out += k[i] * x[rows][:, cols]
    return out


def test_motion_blur_per_image_angles_match_numpy():
    imgs = [photo(40, s) / 255.0 for s in range(3)]
    angles = [-40.0, 0.0, 33.3]
    x = torch.cat([to_t((im * 255).round().astype(np.uint8)) for im in imgs])
    out = motion_blur(x, 5, 2.0, torch.tensor(angles))
    for i, a in enumerate(angles):
        ref = _numpy_motion_blur(x[i].permute(1, 2, 0).double().numpy(), 5, 2.0, a)
        np.testing.assert_allclose(out[i].permute(1, 2, 0).double().numpy(), ref, atol=1e-5)
    # taps that leave a tiny image stop the sum, as in the reference
    tiny = torch.rand(1, 3, 4, 4)
    ref = _numpy_motion_blur(tiny[0].permute(1, 2, 0).double().numpy(), 6, 3.0, 10.0)
    np.testing.assert_allclose(motion_blur(tiny, 6, 3.0, 10.0)[0].permute(1, 2, 0).double().numpy(), ref, atol=1e-5)


def test_glass_walk_equals_the_sequential_loop():
    n, h, w, d = 2, 12, 11, 2
    x = torch.arange(n * h * w, dtype=torch.float32).view(n, 1, h, w)
    out = glass_shuffle(x, d, 1, torch.Generator().manual_seed(5))
    g = torch.Generator().manual_seed(5)
    off = torch.randint(-d, d, (n, 2, h - 2 * d, w - 2 * d), generator=g)
    for b in range(n):
        img = x[b, 0].clone()
        for hh in range(h - d, d, -1):
            for ww in range(w - d, d, -1):
                dx, dy = off[b, 0, hh - d - 1, ww - d - 1], off[b, 1, hh - d - 1, ww - d - 1]
                img[hh, ww] = img[hh + dy, ww + dx]
        assert torch.equal(out[b, 0], img)
    small = torch.rand(1, 1, 4, 4)      # no pixel is far enough from the border to be walked
    assert torch.equal(glass_shuffle(small, 2, 2, torch.Generator()), small)


def test_plasma_fractal_range_and_seed():
    g = torch.Generator().manual_seed(0)
    m = plasma_fractal(3, 64, 2.0, g)
    assert m.shape == (3, 64, 64)
    assert torch.allclose(m.amin(dim=(1, 2)), torch.zeros(3)) and torch.allclose(m.amax(dim=(1, 2)), torch.ones(3))
    assert torch.equal(m, plasma_fractal(3, 64, 2.0, torch.Generator().manual_seed(0)))
    with pytest.raises(ValueError):
        plasma_fractal(1, 48, 2.0, g)


def test_corrupt_image_drop_in():
    img = photo(40)
    out = corrupt_image(img, "contrast", 1)
    assert out.dtype == np.uint8 and out.shape == img.shape
    ref = np.uint8(np.clip((img / 255 - (img / 255).mean((0, 1))) * 0.4 + (img / 255).mean((0, 1)), 0, 1) * 255)
    assert np.abs(out.astype(int) - ref.astype(int)).max() <= 1
    gray = img[..., 0]
    assert corrupt_image(gray, "fog", 2, seed=0).shape == gray.shape
    assert corrupt_image(gray[..., None], "motion_blur", 2).shape == (40, 40, 1)
    np.testing.assert_array_equal(corrupt_image(img, corruption_number=11, severity=1), out)
    assert np.array_equal(corrupt_image(img, "snow", 3, seed=1), corrupt_image(img, "snow", 3, seed=1))
    assert get_corruption_names() == get_corruption_names("common") and len(get_corruption_names("all")) == 19
    assert get_corruption_names("validation") == ["speckle_noise", "gaussian_blur", "spatter", "saturate"]
    for bad, match in [(img.astype(np.float32), "uint8"), (img[..., :2], "shape"), (list(img), "numpy")]:
        with pytest.raises(RobustvitError, match=match):
            corrupt_image(bad, "fog", 1)
    with pytest.raises(RobustvitError, match="corruption_number"):
        corrupt_image(img, severity=1)
    with pytest.raises(RobustvitError, match="did you mean"):
        corrupt_image(img, "frosted", 1)


REF_PYTHON = os.environ.get("ROBUSTVIT_REF_PYTHON", "")


@pytest.mark.skipif(not REF_PYTHON, reason="set ROBUSTVIT_REF_PYTHON to the python of an imagecorruptions 1.1.2 env "
                                          "(benchmarks/corruption_fidelity.py says how to make one)")
def test_frost_and_spatter_replay_imagecorruptions_on_its_own_draws(tmp_path, monkeypatch):
    """The reference's frost photo/crop and spatter liquid draws, fed to robustvit, give its outputs."""
    bench = Path(__file__).resolve().parents[2] / "benchmarks"
    spec = importlib.util.spec_from_file_location("corruption_fidelity", bench / "corruption_fidelity.py")
    fidelity = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fidelity)
    frost_dir = json.loads(fidelity.ref_call(REF_PYTHON, "versions"))["frost_dir"]
    monkeypatch.setenv("ROBUSTVIT_FROST_DIR", frost_dir)
    imgs = np.stack([photo(64, seed=s) for s in range(2)])
    rows = fidelity.run_replay("64", imgs, ["frost", "spatter"], REF_PYTHON, 1, 0, tmp_path, frost_dir)
    for row in rows:
        assert row["mad"] <= 0.05 and row["frac_diff"] <= 0.03, row      # ±1 grey level from float rounding
