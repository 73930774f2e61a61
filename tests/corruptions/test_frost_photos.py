"""frost uses the ImageNet-C photographs when a folder of them is given, the procedural texture otherwise.

The photographs are resized as ``imagecorruptions`` 1.1.2 does (always ×1.1, ``ceil`` sizes, OpenCV's
``INTER_CUBIC``); ``fixtures/imagecorruptions_fixed_draws.npz`` holds OpenCV's resize of a small photo
(``benchmarks/_ref_corruptions.py fixtures``), so these tests need nothing but robustvit.
"""

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from robustvit.corruptions import CORRUPTIONS, corrupt, corruption_params
from robustvit.corruptions.frost import (FROST_ENV, FROST_FILES, frost_photo_dir, frost_source, photo_scale,
                                        resized_size)
from robustvit.errors import RobustvitError

FIXTURES = Path(__file__).parent / "fixtures" / "imagecorruptions_fixed_draws.npz"


def cubic_resize(img: np.ndarray, height: int, width: int) -> np.ndarray:
    """OpenCV's ``INTER_CUBIC`` written out in numpy: half-pixel centres, Keys' kernel with a = −0.75,
    edge pixels repeated, separable, rounded to uint8 values (float64 arrays in, (H, W, C) out)."""

    def weights(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray]:
        src = (np.arange(n_out) + 0.5) * (n_in / n_out) - 0.5
        i0 = np.floor(src).astype(int)
        t = src - i0
        taps = np.arange(-1, 3)
        d = np.abs(t[:, None] - taps[None])
        a = -0.75
        w = np.where(d <= 1, ((a + 2) * d - (a + 3)) * d * d + 1, ((a * d - 5 * a) * d + 8 * a) * d - 4 * a)
        return np.clip(i0[:, None] + taps[None], 0, n_in - 1), w

    ri, rw = weights(img.shape[0], height)
    ci, cw = weights(img.shape[1], width)
    rows = (img[ri] * rw[..., None, None]).sum(1)                      # (H, W_in, C)
    out = (rows[:, ci] * cw[None, ..., None]).sum(2)                   # (H, W, C)
    return np.clip(np.round(out), 0, 255)


@pytest.fixture
def photos(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    for i, f in enumerate(FROST_FILES):
        arr = rng.integers(0, 256, (60 + 4 * i, 70 + 2 * i, 3), dtype=np.uint8)
        Image.fromarray(arr).save(tmp_path / f, quality=100) if f.endswith("jpg") else Image.fromarray(arr).save(tmp_path / f)
    monkeypatch.setenv(FROST_ENV, str(tmp_path))
    return tmp_path


def test_frost_blends_a_crop_of_the_enlarged_photograph(photos):
    assert frost_photo_dir() == photos and frost_source() == f"photos:{photos}"
    x = torch.rand(6, 3, 40, 40)
    spec = CORRUPTIONS.get("frost")
    p = corruption_params("frost", 4, "imagenet")          # unscaled: the photos ×1.1, as imagecorruptions
    assert p.photo_zoom == 1.1 and corruption_params("frost", 4, "cifar").photo_zoom == 1
    draw = spec.sample(6, (40, 40), p, torch.Generator().manual_seed(1))
    y = spec.apply(x, p, draw)
    assert torch.equal(y, corrupt(x, "frost", 4, seed=1, preset="imagenet", size_scaling=False))
    for i in range(6):
        k, (t, l) = int(draw["photo"][i]), draw["top_left"][i].tolist()
        photo = np.asarray(Image.open(photos / FROST_FILES[k]).convert("RGB"), dtype=np.float64)
        h, w = (math.ceil(side * 1.1) for side in photo.shape[:2])
        assert 0 <= t < h - 40 and 0 <= l < w - 40
        big = cubic_resize(photo, h, w) / 255
        crop = torch.from_numpy(big[t:t + 40, l:l + 40]).permute(2, 0, 1).float()
        expected = (0.65 * x[i] + 0.7 * crop).clamp(0, 1)
        torch.testing.assert_close(y[i], expected, rtol=0, atol=0.7 / 255 + 1e-6)
        assert float((y[i] - expected).abs().mean()) < 1e-3 / 255      # a grey level off in a rare pixel at most
    assert len(set(draw["photo"].tolist())) > 1


def test_photo_resize_is_opencvs_inter_cubic(tmp_path, monkeypatch):
    """The crops come from OpenCV's ×1.1 bicubic resize of the photo (the reference's ``cv2.resize``)."""
    ref = np.load(FIXTURES)
    photo, big = ref["frost_photo"], ref["frost_resized"].astype(np.float32) / 255      # (20, 24) → (22, 27)
    assert big.shape[:2] == resized_size(photo.shape[:2], 1.1, 16, 16) == (22, 27)
    for f in FROST_FILES:                               # the same lossless photo under every name
        Image.fromarray(photo).save(tmp_path / f, format="PNG")
    monkeypatch.setenv(FROST_ENV, str(tmp_path))
    p = corruption_params("frost", 1, "imagenet")
    draw = CORRUPTIONS.get("frost").sample(8, (16, 16), p, torch.Generator().manual_seed(0))
    for i, (t, l) in enumerate(draw["top_left"].tolist()):
        crop = torch.from_numpy(big[t:t + 16, l:l + 16]).permute(2, 0, 1)
        torch.testing.assert_close(draw["texture"][i], crop, rtol=0, atol=1 / 255 + 1e-6)
        assert int(((draw["texture"][i] - crop).abs() > 1e-6).sum()) <= 2
    assert np.abs(cubic_resize(photo.astype(np.float64), 22, 27) - ref["frost_resized"]).max() <= 1


def test_photo_sizes_follow_imagecorruptions():
    """The reference's frost photos at 224 px: ×1.1 and ``ceil`` (900·1.1 is 990.0000000000001 → 991)."""
    sizes = {(600, 900): (660, 991), (315, 560): (347, 616), (350, 527): (386, 580), (495, 660): (545, 727)}
    for photo, size in sizes.items():
        assert resized_size(photo, photo_scale(photo, 224, 224, 1.0, 1.1), 224, 224) == size
    # a photo smaller than the image: the smallest covering factor, then ×1.1 (imagecorruptions)
    assert photo_scale((315, 560), 448, 448, 1.0, 1.1) == 448 / 315 * 1.1
    assert photo_scale((315, 560), 32, 32, 0.2, 1.0) == 0.2            # make_cifar_c.py: 0.2, no zoom


def test_small_photos_are_enlarged_to_cover_the_image(photos):
    y = corrupt(torch.rand(2, 3, 96, 128), "frost", 2, seed=0, preset="imagenet", size_scaling=False)
    assert y.shape == (2, 3, 96, 128) and 0 <= float(y.min()) and float(y.max()) <= 1


def test_without_photos_the_texture_is_procedural(monkeypatch, tmp_path):
    monkeypatch.setenv(FROST_ENV, "procedural")
    assert frost_photo_dir() is None and frost_source() == "procedural"
    draw = CORRUPTIONS.get("frost").sample(2, (32, 32), corruption_params("frost", 1, "cifar"), torch.Generator())
    assert set(draw) == {"texture"}
    monkeypatch.setenv(FROST_ENV, str(tmp_path))       # a folder without the photographs
    with pytest.raises(RobustvitError, match="frost1.png"):
        corrupt(torch.rand(1, 3, 32, 32), "frost", 1, seed=0)
