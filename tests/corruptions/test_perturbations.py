"""ImageNet-P / CIFAR-P perturbation sequences: shapes, ranges, invariants and hand-checked frames."""

import math

import numpy as np
import pytest
import torch

from robustvit.corruptions.perturbations import (TEST_PERTURBATIONS, VALIDATION_PERTURBATIONS, _affine_frames,
                                                 iter_perturbation_frames, list_perturbations, num_frames,
                                                 perturbation_params, perturbation_sequence, tilt_homography)
from robustvit.errors import RobustvitError

ALL = list_perturbations("all")


def _smooth(n=2, h=16, w=16):
    yy, xx = torch.meshgrid(torch.linspace(0, 1, h), torch.linspace(0, 1, w), indexing="ij")
    base = torch.stack([xx, yy, 0.5 * (xx + yy)])
    return torch.stack([base * (0.6 + 0.2 * i) + 0.1 for i in range(n)])


def test_groups_and_frame_counts():
    assert len(list_perturbations("test")) == 10 and list_perturbations("test") == list(TEST_PERTURBATIONS)
    assert list_perturbations("validation") == list(VALIDATION_PERTURBATIONS) and len(ALL) == 14
    assert num_frames("translate", "imagenet") == 41 and num_frames("translate", "cifar") == 16
    assert num_frames("motion_blur", "cifar") == 21 and num_frames("motion_blur", "imagenet") == 31
    assert all(num_frames(n, "imagenet") == 31 for n in ALL if n != "translate")
    with pytest.raises(RobustvitError, match="did you mean"):
        list_perturbations("tests")


@pytest.mark.parametrize("name", ALL)
def test_shape_range_determinism_and_blocks(name):
    x = torch.rand(2, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    s = perturbation_sequence(x, name, seed=3)
    assert s.shape == (2, num_frames(name, "cifar"), 3, 16, 16) and s.dtype == x.dtype
    assert torch.isfinite(s).all() and s.min() >= 0 and s.max() <= 1
    assert torch.equal(s, perturbation_sequence(x, name, seed=3))
    # any block size gives the same frames (random draws are made frame by frame)
    blocks = list(iter_perturbation_frames(x, name, seed=3, block_frames=4))
    assert [b for b, _ in blocks] == list(range(0, s.shape[1], 4))
    assert torch.allclose(torch.cat([f for _, f in blocks], 1), s, atol=1e-6)
    # frames change gradually, not all identical
    assert (s[:, 1:] - s[:, :-1]).abs().amax() > 0


@pytest.mark.parametrize("name,level", [("gaussian_noise", (0.02, 0.04, 0.06)), ("speckle_noise", (0.05, 0.07, 0.10))])
def test_noise_levels_by_difficulty(name, level):
    x = torch.full((4, 3, 32, 32), 0.5)
    for d in (1, 2, 3):
        s = perturbation_sequence(x, name, difficulty=d, seed=0)
        assert torch.equal(s[:, 0], x)                       # frame 0 is the clean image
        resid = s[:, 1:] - 0.5
        expected = level[d - 1] * (0.5 if name == "speckle_noise" else 1.0)
        assert resid.std().item() == pytest.approx(expected, rel=0.05)
        assert not torch.equal(s[:, 1], s[:, 2])             # independent draws per frame


def test_shot_noise_is_poisson_at_fixed_rate():
    x = torch.full((4, 3, 32, 32), 0.3)
    s = perturbation_sequence(x, "shot_noise", preset="imagenet", difficulty=2, seed=0)   # λ = 120
    assert torch.equal(s[:, 0], x)
    k = s[:, 1:] * 120
    assert torch.allclose(k, k.round(), atol=1e-4)          # values are counts / λ
    assert k.mean().item() == pytest.approx(36, rel=0.02) and k.var().item() == pytest.approx(36, rel=0.08)


@pytest.mark.parametrize("name,frame", [("rotate", 15), ("shear", 15), ("scale", 15), ("translate", 7),
                                        ("brightness", 15)])
def test_identity_frame_is_the_image(name, frame):
    x = _smooth()
    s = perturbation_sequence(x, name, preset="cifar")
    assert torch.allclose(s[:, frame], x, atol=1e-5)


def test_translate_moves_one_pixel_per_frame():
    x = torch.rand(2, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    s = perturbation_sequence(x, "translate", preset="cifar")          # shifts −7 … 8 px at 32 px, ×0.5 at 16 px
    s32 = perturbation_sequence(torch.nn.functional.interpolate(x, scale_factor=2), "translate", preset="cifar")
    assert s.shape[1] == s32.shape[1] == 16
    f = s32[:, 8]                                                         # +1 px at native size
    x32 = torch.nn.functional.interpolate(x, scale_factor=2)
    assert torch.allclose(f[..., 1:], x32[..., :-1], atol=1e-5) and f[..., 0].abs().max() < 1e-6
    f = s32[:, 0]                                                         # −7 px
    assert torch.allclose(f[..., :-7], x32[..., 7:], atol=1e-5) and f[..., -7:].abs().max() < 1e-6
    assert perturbation_params("translate", "cifar", size=16).values["shift0"] == -3.5


def test_rotation_is_clockwise_like_torchvision_affine():
    tvf = pytest.importorskip("torchvision.transforms.v2.functional")
    x = _smooth(1, 32, 32)
    s = perturbation_sequence(x, "rotate", preset="cifar")
    ref = tvf.affine(x, angle=10.0, translate=[0, 0], scale=1.0, shear=[0.0, 0.0],
                     interpolation=tvf.InterpolationMode.BILINEAR)
    assert (s[:, 25] - ref)[..., 4:-4, 4:-4].abs().max() < 1e-3           # frame 25: +10°
    assert (s[:, 5] - ref)[..., 4:-4, 4:-4].abs().mean() > 0.02


def test_scale_zooms_about_the_centre_with_black_border():
    x = torch.ones(1, 3, 16, 16)
    s = perturbation_sequence(x, "scale", preset="imagenet")              # frame 0: ×0.4
    f = s[0, 0, 0]
    assert f[8, 8] == 1 and f[0, 0] == 0 and f[8, 0] == 0
    assert 0.12 < f.mean().item() < 0.22                                  # ≈ 0.4² of the area


def _warp_perspective_oracle(img, mat):
    """Per-pixel inverse mapping with bilinear interpolation and a zero border (OpenCV's definition)."""
    h, w = img.shape[-2:]
    inv = np.linalg.inv(mat)
    out = np.zeros_like(img)
    for yq in range(h):
        for xq in range(w):
            sx, sy, sz = inv @ np.array([xq, yq, 1.0])
            sx, sy = sx / sz, sy / sz
            x0, y0 = math.floor(sx), math.floor(sy)
            for dy in (0, 1):
                for dx in (0, 1):
                    xi, yi = x0 + dx, y0 + dy
                    wgt = (1 - abs(sx - xi)) * (1 - abs(sy - yi))
                    if 0 <= xi < w and 0 <= yi < h and wgt > 0:
                        out[:, yq, xq] += wgt * img[:, yi, xi]
    return out


def test_tilt_matches_a_per_pixel_perspective_warp():
    x = torch.rand(1, 3, 12, 12, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    s = perturbation_sequence(x, "tilt", preset="imagenet")               # frame i: θ = φ = (i − 15)°
    for i in (0, 15, 27):
        ref = _warp_perspective_oracle(x[0].numpy(), tilt_homography(i - 15, 12, 12).numpy())
        assert np.abs(s[0, i].numpy() - ref).max() < 1e-6
    h0 = tilt_homography(0, 32, 32)
    f = math.sqrt(2) * 32
    assert torch.allclose(h0 / h0[2, 2], torch.tensor([[f / (1 + f), 0, 16 / (1 + f)], [0, f / (1 + f), 16 / (1 + f)],
                                                     [0, 0, 1]], dtype=torch.float64))


@pytest.mark.parametrize("name", ["zoom_blur", "motion_blur", "gaussian_blur"])
def test_blurs_keep_a_constant_image(name):
    x = torch.full((2, 3, 16, 16), 0.4)
    s = perturbation_sequence(x, name)
    assert torch.allclose(s, torch.full_like(s, 0.4), atol=1e-5)


def test_zoom_blur_is_a_running_average_of_zooms():
    x = _smooth(1, 16, 16)
    s = perturbation_sequence(x, "zoom_blur")
    assert torch.equal(s[:, 0], x)
    eye = torch.eye(2, dtype=torch.float64)
    zooms = _affine_frames(x, torch.stack([eye * (1 + 0.004 * j) for j in (1, 2, 3)]), torch.zeros(3, 2))
    assert torch.allclose(s[:, 3], (x + zooms.sum(1)) / 4, atol=1e-6)


def test_brightness_shifts_hsv_value():
    x = _smooth(1, 8, 8) * 0.5
    s = perturbation_sequence(x, "brightness", preset="imagenet")         # V += (i − 15)·0.02
    v = x.amax(1)
    assert torch.allclose(s[:, 20].amax(1), (v + 0.1).clamp(0, 1), atol=1e-6)
    assert torch.allclose(s[:, 10].amax(1), (v - 0.1).clamp(0, 1), atol=1e-6)


def test_snow_uses_one_layer_swept_by_angle():
    x = _smooth(2, 32, 32) * 0.3
    s = perturbation_sequence(x, "snow", seed=0)
    base = 0.85 * x + 0.15 * torch.maximum(x, (0.299 * x[:, 0] + 0.587 * x[:, 1] + 0.114 * x[:, 2]).unsqueeze(1) * 1.5 + 0.5)
    assert (s - base.unsqueeze(1)).min() > -1e-3                          # flakes only add light
    assert (s[:, 1:] - s[:, :-1]).abs().mean() < (s[:, 0] - base).abs().mean()


def test_crop_warps_the_full_image_then_crops():
    x = torch.rand(1, 3, 40, 40, generator=torch.Generator().manual_seed(4))
    s = perturbation_sequence(x, "rotate", crop=32, preset="cifar")
    assert s.shape == (1, 31, 3, 32, 32)
    assert torch.allclose(s[:, 15], x[..., 4:36, 4:36], atol=1e-5)
    # a 5° rotation of the 40-px image has no black corners inside the central 32 px (it would without context)
    assert s[:, 20].amin(dim=(1, 2, 3)).item() > 0 or x.amin() == 0
    n = perturbation_sequence(x, "gaussian_noise", crop=32, seed=0)
    assert torch.equal(n[:, 0], x[..., 4:36, 4:36])


def test_generator_on_cpu_and_seed_changes_draws():
    x = torch.rand(2, 3, 16, 16)
    a = perturbation_sequence(x, "gaussian_noise", generator=torch.Generator().manual_seed(5))
    b = perturbation_sequence(x, "gaussian_noise", seed=5)
    c = perturbation_sequence(x, "gaussian_noise", seed=6)
    assert torch.equal(a, b) and not torch.equal(b, c)


def test_errors_are_one_line():
    x = torch.rand(1, 3, 8, 8)
    with pytest.raises(RobustvitError, match="did you mean rotate"):
        perturbation_sequence(x, "rotat")
    with pytest.raises(RobustvitError, match="difficulty"):
        perturbation_sequence(x, "rotate", difficulty=4)
    with pytest.raises(RobustvitError, match=r"\(N, 3, H, W\)"):
        perturbation_sequence(torch.rand(3, 8, 8), "rotate")
    with pytest.raises(RobustvitError, match="crop"):
        perturbation_sequence(x, "rotate", crop=16)
