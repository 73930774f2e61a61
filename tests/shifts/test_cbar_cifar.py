"""CIFAR-10-C̄'s own corruptions against scipy (the resampling the reference uses) on the same draws, and the
``cifar10_c_bar`` group."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.ndimage import map_coordinates, rotate, zoom

from robustvit.corruptions import CORRUPTION_GROUPS, CORRUPTIONS, corrupt


def _apply(name: str, x: torch.Tensor, severity: int, draw: dict) -> torch.Tensor:
    spec = CORRUPTIONS.get(name)
    return spec.apply_fn(x, spec.params(severity, "cifar"), draw)


def _image(n: int = 2, side: int = 32) -> torch.Tensor:
    return torch.rand(n, 3, side, side, generator=torch.Generator().manual_seed(0), dtype=torch.float64)


def _bilinear_black(img: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """Bilinear reads, black beyond the edges (scipy's grid-constant), per channel of (3, H, W)."""
    return np.stack([map_coordinates(c, [rows, cols], order=1, mode="grid-constant", cval=0.0) for c in img])


def test_group_holds_cifar10_c_bar_in_its_order_outside_all():
    assert CORRUPTION_GROUPS["cifar10_c_bar"] == (
        "blue_noise_sample", "checkerboard_cutout", "inverse_sparkles", "pinch_and_twirl", "ripple", "brownish_noise",
        "circular_motion_blur", "lines", "sparkles", "transverse_chromatic_abberation")
    assert "ripple" not in CORRUPTION_GROUPS["all"] and CORRUPTIONS.get("ripple").params(5, "cifar").level == 8.0


def test_ripple_is_the_sine_warp_with_black_outside():
    x = _image()
    lam, ph = torch.tensor([[0.15, 0.25], [0.3, 0.1]], dtype=torch.float64), torch.tensor([[0.5, 2.0], [4.0, 1.0]])
    y = _apply("ripple", x, 5, {"wavelengths": lam, "phases": ph.double()})
    a = 8.0 * 0.025 / 10 * 32
    r, c = np.meshgrid(np.arange(32.0), np.arange(32.0), indexing="ij")
    for i in range(2):
        rows = r + a * np.sin(2 * np.pi * r / (lam[i, 0].item() * 32) + ph[i, 0].item())
        cols = c + a * np.sin(2 * np.pi * c / (lam[i, 1].item() * 32) + ph[i, 1].item())
        assert np.allclose(y[i].numpy(), _bilinear_black(x[i].numpy(), rows, cols), atol=1e-12)


def test_pinch_and_twirl_warps_cell_after_cell():
    x = _image(1)
    signs = torch.tensor([[[1.0, -1.0, 1.0], [-1.0, -1.0, 1.0], [1.0, 1.0, -1.0]]], dtype=torch.float64)
    y = _apply("pinch_and_twirl", x, 4, {"signs": signs})
    level = 8.5
    amount, grid = level * 0.4 / 10 + 0.1, 32 // 3
    radius = grid / 2
    out = x[0].numpy().copy()
    for i in range(3):
        for j in range(3):
            u, l = j * grid, i * grid
            rows, cols = np.zeros((grid, grid)), np.zeros((grid, grid))
            for a in range(grid):
                for b in range(grid):
                    p = np.array([u + a, l + b], float)
                    centre = np.array([u + radius, l + radius])
                    dy, dx = p - centre
                    dist = math.hypot(dy, dx)
                    if dist > radius or round(dist, 3) == 0:
                        rows[a, b], cols[a, b] = p
                        continue
                    t = math.sin(math.pi / 2 * dist / radius) ** (-amount)
                    ang = signs[0, i, j].item() * level * math.pi / 20 * (1 - dist / radius) ** 2
                    rows[a, b] = centre[0] + t * (dy * math.cos(ang) - dx * math.sin(ang))
                    cols[a, b] = centre[1] + t * (dy * math.sin(ang) + dx * math.cos(ang))
            out[:, u:u + grid, l:l + grid] = _bilinear_black(out, rows, cols)
    assert np.allclose(y[0].numpy(), out, atol=1e-12)
    assert not np.allclose(out, x[0].numpy())


def test_transverse_chromatic_aberration_is_scipys_unfiltered_zoom():
    x = _image()
    order = torch.tensor([[2, 0, 1], [1, 2, 0]])
    y = _apply("transverse_chromatic_abberation", x, 5, {"order": order})
    s = 10 * 0.5 / 10
    scales = (1.0, 1 + s / 2, 1 + s)
    for i in range(2):
        for c in range(3):
            z = zoom(x[i, c].numpy(), scales[order[i, c]], prefilter=False)
            e = (z.shape[0] - 32) // 2
            assert np.allclose(y[i, c].numpy(), z[e:e + 32, e:e + 32], atol=1e-12), (i, c)


@pytest.mark.parametrize("dense", [True, False])
def test_circular_motion_blur_is_the_weighted_mean_of_scipy_rotations(monkeypatch, dense):
    """Both ways (one matrix for small images, 21 gathers of spline taps for large ones) are scipy's."""
    import robustvit.corruptions.cbar_cifar as cbar

    monkeypatch.setattr(cbar, "_DENSE_PIXELS", 4096 if dense else 0)
    x = _image(1, 20)
    y = _apply("circular_motion_blur", x, 3, {})
    img = x[0].permute(1, 2, 0).numpy()
    amount = 4.4 * 15 / 10
    ts = [2 * i / 20 - 1 for i in range(21)]
    acc = sum(math.exp(-2 * t * t) * rotate(img, t * amount, reshape=False) for t in ts)
    want = acc / sum(math.exp(-2 * t * t) for t in ts)
    assert np.allclose(y[0].permute(1, 2, 0).numpy(), want, atol=1e-9)


@pytest.mark.parametrize("name", ["ripple", "pinch_and_twirl", "transverse_chromatic_abberation",
                                  "circular_motion_blur", "lines"])
def test_seeded_batched_and_in_range(name):
    x = _image(3, 16).float()
    a, b = corrupt(x, name, 3, seed=1), corrupt(x, name, 3, seed=1)
    assert torch.equal(a, b) and a.shape == x.shape and 0 <= float(a.min()) and float(a.max()) <= 1
    assert not torch.equal(a, x)


def _skimage_line_aa(y1: int, x1: int, y2: int, x2: int) -> list[tuple[int, int, float]]:
    """scikit-image 0.16.2's ``line_aa`` loop (Zingl), written out: (row, column, value) in emission order."""
    out = []
    dx, dy = abs(x1 - x2), abs(y1 - y2)
    err = dx - dy
    sx, sy = (1 if x1 < x2 else -1), (1 if y1 < y2 else -1)
    ed = 1 if dx + dy == 0 else float(np.float32(math.sqrt(dx * dx + dy * dy)))
    x, y = x1, y1
    while True:
        out.append((y, x, abs(err - dx + dy) / ed))
        e, x0 = err, x
        if 2 * e >= -dx:
            if x == x2:
                break
            if e + dy < ed:
                out.append((y + sy, x, abs(e + dy) / ed))
            err -= dy
            x += sx
        if 2 * e <= dy:
            if y == y2:
                break
            if dx - e < ed:
                out.append((y, x0 + sx, abs(dx - e) / ed))
            err += dx
            y += sy
    return [(r, c, 1 - v) for r, c, v in out]


def test_lines_rasterise_as_skimage_and_blend_line_after_line():
    x = _image(2)
    g = torch.Generator().manual_seed(3)
    draw = {"angle": torch.rand(2, generator=g, dtype=torch.float64) * 2 * math.pi,
            "variation": torch.rand(2, generator=g, dtype=torch.float64) * 0.9 + 0.1,
            "lines": torch.rand(2, 6, 3, generator=g, dtype=torch.float64)}
    y = _apply("lines", x, 4, draw)                      # level 2.0: int(0.2 · 32) = 6 lines
    for i in range(2):
        out = x[i].numpy().copy()
        for u in draw["lines"][i].tolist():
            a = draw["angle"][i].item() + 2 * math.pi * draw["variation"][i].item() * (u[2] - 0.5)
            px, py = 32 * u[0], 32 * u[1]
            s, c = math.sin(a) * 32, math.cos(a) * 32
            last = {}
            for r, col, v in _skimage_line_aa(int(px - c), int(py - s), int(px + c), int(py + s)):
                if 0 <= r < 32 and 0 <= col < 32:
                    last[(r, col)] = v                  # numpy's repeated-index assignment: the last wins
            for (r, col), v in last.items():
                out[:, r, col] = (1 - v) * out[:, r, col] + v * 128 / 255
        assert np.allclose(y[i].numpy(), out, atol=1e-12), i
        assert (y[i] != x[i]).any()
