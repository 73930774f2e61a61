"""Procedural frost textures (a documented deviation from the reference).

The reference frost corruption (Hendrycks & Dietterich 2019, arXiv:1903.12261) blends a random crop of one
of a handful of bundled frost *photographs* into the image: ``out = a·x + b·frost``. robustvit does not ship
those photos; it synthesises a frost-like texture per image instead, seeded from the generator:

- a cloudy base: a diamond-square plasma (decay 2), the ice sheet's uneven thickness;
- ice crystals: sparse seeds smeared into needles along three directions 120° apart (hexagonal ice, a
  random rotation per image) and lightly blurred — dendrite-like streaks (each seed stamps its taps: a
  scatter-add, not a full-size convolution);
- fine grain: smoothed white noise (rime).

The three are standardised and mixed, then given a per-image brightness level, a cold (blue-white) tint and a
contrast drawn so that the texture's statistics match those of 224-px crops of the reference photos
(measured by ``benchmarks/corruption_fidelity.py``): channel means ≈ (0.56, 0.65, 0.69), spread of crop means
across photos ≈ 0.13–0.19, within-crop standard deviation ≈ 0.09. ``scale`` sets the crystal size in pixels
(1 at 224 px; the CIFAR preset uses 0.2, like the reference's 0.2× resized photos).
"""

from __future__ import annotations

import torch

from robustvit.corruptions.filters import gaussian_blur, next_power_of_2
from robustvit.corruptions.fractal import plasma_fractal
from robustvit.corruptions.geometry import motion_kernel, motion_offsets


def _standardise(t: torch.Tensor) -> torch.Tensor:
    """Per-image zero mean, unit standard deviation (vectorised passes; ``Tensor.std`` is several times slower)."""
    c = t - t.mean(dim=(1, 2, 3), keepdim=True)
    std = torch.linalg.vector_norm(c, dim=(1, 2, 3), keepdim=True) / max(1, c[0].numel() - 1) ** 0.5
    return c.div_(std.clamp_min(1e-6))


def _rand(shape: tuple[int, ...], g: torch.Generator, device: torch.device) -> torch.Tensor:
    return torch.rand(shape, generator=g, device=g.device).to(device)


def _needles(n: int, height: int, width: int, radius: float, g: torch.Generator, device: torch.device,
             dtype: torch.dtype) -> torch.Tensor:
    """Sparse crystal seeds (2 % of the pixels per direction, values U(0, 1)) smeared by a one-sided motion
    kernel along three directions 120° apart (a random rotation per image), (n, 1, H, W).

    Each seed stamps the kernel's taps directly (a scatter-add of ``seeds × taps`` values), which is the
    motion blur of the sparse seed image without a full-size convolution; taps leaving the image are dropped.
    """
    seeds = max(1, round(0.02 * height * width))
    pos = (_rand((n, 3, seeds), g, device) * (height * width)).long().clamp_(max=height * width - 1)
    val = _rand((n, 3, seeds), g, device).to(dtype)
    base_angle = _rand((n, 1), g, device).cpu() * 360.0
    angles = (base_angle + torch.tensor([[0.0, 120.0, 240.0]])).reshape(-1)       # (n·3,)
    k = motion_kernel(radius, radius / 2)
    dy, dx = motion_offsets(k.numel(), angles)                                     # (n·3, taps)
    dy, dx = dy.view(n, 3, 1, -1).to(device), dx.view(n, 3, 1, -1).to(device)
    ys, xs = (pos // width).unsqueeze(-1) - dy, (pos % width).unsqueeze(-1) - dx    # (n, 3, seeds, taps)
    inside = (ys >= 0) & (ys < height) & (xs >= 0) & (xs < width)
    image = torch.arange(n, device=device).view(n, 1, 1, 1) * (height * width)
    flat = (image + ys.clamp(0, height - 1) * width + xs.clamp(0, width - 1)).view(-1)
    values = (val.unsqueeze(-1) * k.to(device=device, dtype=dtype) * inside).view(-1)
    out = torch.zeros(n * height * width, device=device, dtype=dtype).index_add_(0, flat, values)
    return out.view(n, 1, height, width)


def frost_texture(n: int, height: int, width: int, generator: torch.Generator, *, scale: float = 1.0,
                  device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``n`` frost textures (n, 3, H, W) in [0, 1]; crystal size proportional to ``scale``.

    >>> frost_texture(2, 32, 32, torch.Generator().manual_seed(0), scale=0.2).shape
    torch.Size([2, 3, 32, 32])
    """
    device = torch.device(device)
    g = generator
    size = next_power_of_2(max(height, width))
    cloud = plasma_fractal(n, size, 2.0, g, device=device, dtype=dtype)[:, None, :height, :width]

    needles = gaussian_blur(_needles(n, height, width, max(1.0, 8.0 * scale), g, device, dtype), 0.5 * max(scale, 0.2))

    grain = gaussian_blur(torch.randn((n, 1, height, width), generator=g, device=g.device,
                                      dtype=dtype).to(device), max(0.7 * scale, 0.3))

    z = _standardise(0.6 * _standardise(cloud) + 0.7 * _standardise(needles) + 0.4 * _standardise(grain))
    u = _rand((n, 3), g, device).to(dtype)
    level = 0.42 + 0.46 * u[:, 0]                      # green level, mean 0.65
    tint = 0.17 * u[:, 1]                              # cold tint: red lower, blue higher
    contrast = 0.06 + 0.07 * u[:, 2]                   # within-texture std, mean ≈ 0.095
    means = torch.stack((level - tint, level, level + 0.55 * tint), 1).view(n, 3, 1, 1)
    tex = means + contrast.view(n, 1, 1, 1) * z
    return tex.clamp(0, 1)
