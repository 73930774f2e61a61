"""The 10 corruptions of ImageNet-C̄ (Mintun, Kirillov & Xie, "On Interaction Between Augmentations and
Corruptions in Natural Corruption Robustness", NeurIPS 2021, arXiv:2102.11273), group ``imagenet_c_bar``.

Each follows ``imagenet_c_bar/corrupt.py`` of facebookresearch/augmentation-corruption: its random parameters
(``sample_parameters``) and per-pixel formula (``transform``), for a whole batch on the device. The field
``level`` is the released severity value (``imagenet_c_bar.csv`` for preset ``imagenet``, ``cifar10_c_bar.csv``
for ``cifar``; CIFAR-10-C̄ shares five of these, the other five repeat the ImageNet-C̄ rows), made a strength by
``float_parameter(level, m) = level · m / 10``. Lengths in units of the reference's side ``S`` (224 or 32) use
the shorter side. Deviations (measured in ``docs/corruptions.md``): no rounding to uint8; random fields from
torch's generator, so where the reference seeds a NumPy ``RandomState`` per image (noise phases, ray lengths,
Perlin tables, checkerboard cells) they have its distribution, not its values.
"""

from __future__ import annotations

import math

import torch

from robustvit.corruptions.cbar_noise import (mirrored_phases, perlin_tables, perlin_turbulence, radial_distance,
                                              spectral_noise)
from robustvit.corruptions.filters import gaussian_filter
from robustvit.corruptions.sampling import rand, randn
from robustvit.corruptions.spec import PRESET_SIZES, CorruptionParams, Draw, _levels, corruption

GROUP = "imagenet_c_bar"
Size = tuple[int, int]
#: Most rays a sparkle has (``randint(50, 200)``).
MAX_RAYS = 199


def _uniform(shape: tuple[int, ...], lo: float, hi: float, g: torch.Generator, like: torch.Tensor) -> torch.Tensor:
    return rand(shape, g, like) * (hi - lo) + lo


def _grid(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Row (y) and column (x) pixel indices, (1, h, 1) and (1, 1, w)."""
    h, w = x.shape[-2:]
    ys = torch.arange(h, dtype=x.dtype, device=x.device).view(1, h, 1)
    xs = torch.arange(w, dtype=x.dtype, device=x.device).view(1, 1, w)
    return ys, xs


def _col(t: torch.Tensor) -> torch.Tensor:
    """A per-image value (N,) as (N, 1, 1)."""
    return t.view(-1, 1, 1)


def _bilinear(x: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """x (N, C, H, W) read at pixel coordinates rows, cols (N, h, w): bilinear, black outside (the reference's
    ``bilinear_interpolation``)."""
    h, w = x.shape[-2:]
    grid = torch.stack((cols * (2 / max(w - 1, 1)) - 1, rows * (2 / max(h - 1, 1)) - 1), dim=-1)
    return torch.nn.functional.grid_sample(x, grid.to(x.dtype), mode="bilinear", padding_mode="zeros",
                                           align_corners=True)


# ---------------------------------------------------------------- single_frequency_greyscale
def _sample_single_frequency(n: int, size: Size, p: CorruptionParams, g: torch.Generator, like: torch.Tensor) -> Draw:
    mag = _uniform((n,), -math.pi, math.pi, g, like)
    other = (rand((n,), g, like) * 2 - 1) * mag.abs()
    swap = rand((n,), g, like) < 0.5
    freq = torch.where(swap[:, None], torch.stack((other, mag), 1), torch.stack((mag, other), 1))
    return {"freq": freq, "phase": _uniform((n,), 0, 2 * math.pi, g, like)}


@corruption("single_frequency_greyscale", GROUP, ("level",), _levels((1.0, 1.5, 2.0, 4.5, 5.0)),
            sample=_sample_single_frequency)
def single_frequency_greyscale(x: torch.Tensor, p: CorruptionParams, d: Draw) -> torch.Tensor:
    """x + (19.6·level/255)·sin(fx·x + fy·y + φ), the same grey wave in every channel; frequencies in radians
    per pixel of a 224 (ImageNet) or 32 (CIFAR) image, scaled to the image side."""
    ys, xs = _grid(x)
    f = d["freq"] / _side_scale(x, p)
    wave = torch.sin(xs * _col(f[:, 0]) + ys * _col(f[:, 1]) + _col(d["phase"]))
    return x + (p.level * 196 / 10 / 255) * wave[:, None]


def _side_scale(x: torch.Tensor, p: CorruptionParams) -> float:
    """Image side / the reference's side (224 or 32)."""
    return min(x.shape[-2:]) / PRESET_SIZES[p.preset]


# ---------------------------------------------------------------- cocentric_sine_waves
def _sample_cocentric(n: int, size: Size, p: CorruptionParams, g: torch.Generator, like: torch.Tensor) -> Draw:
    return {"offset": rand((n, 2), g, like), "freq": _uniform((n,), 0, 10, g, like),
            "amplitude": _uniform((n,), 0, 0.1, g, like), "ring_width": _uniform((n,), 0, 0.1, g, like)}


@corruption("cocentric_sine_waves", GROUP, ("level",), _levels((3.0, 5.0, 8.0, 9.0, 10.0)),
            sample=_sample_cocentric)
def cocentric_sine_waves(x: torch.Tensor, p: CorruptionParams, d: Draw) -> torch.Tensor:
    """x + (12.8·level/255)·(((r + A·sin(f·atan2(dx, dy))) mod w) / w − ½): rings of width w around a random
    centre; ``offset`` (x, y) relative to the width and height, amplitude A and width w relative to the side."""
    h, w = x.shape[-2:]
    ys, xs = _grid(x)
    s = min(h, w)
    dx = xs - _col(d["offset"][:, 0] * w)
    dy = ys - _col(d["offset"][:, 1] * h)
    ring = _col(d["ring_width"] * s)
    dist = torch.sqrt(dx * dx + dy * dy) + torch.sin(torch.atan2(dx, dy) * _col(d["freq"])) * _col(d["amplitude"] * s)
    noise = torch.remainder(dist, ring) / ring - 0.5
    return x + (p.level * 128 / 10 / 255) * noise[:, None]


# ---------------------------------------------------------------- plasma_noise
def _sample_plasma(n: int, size: Size, p: CorruptionParams, g: torch.Generator, like: torch.Tensor) -> Draw:
    return {"time": _uniform((n,), 0, 6 * math.pi, g, like),
            "iterations": torch.floor(_uniform((n,), 4, 7, g, like)).clamp_(4, 6),
            "sharpness": _uniform((n,), 0.5, 1.0, g, like), "scale": _uniform((n,), 0.075, 0.2, g, like)}


@corruption("plasma_noise", GROUP, ("level",), _levels((4.75, 7.0, 8.5, 9.25, 10.0)), sample=_sample_plasma)
def plasma_noise(x: torch.Tensor, p: CorruptionParams, d: Draw) -> torch.Tensor:
    """(1 − a)·x + a·(r, g, b) with a = 6.4·level/255 and the reference's iterated sine "plasma" kernel
    (4–6 iterations, ``scale`` relative to the side)."""
    ys, xs = _grid(x)
    scale = _col(d["scale"] * min(x.shape[-2:]))
    t, sharp, iters = _col(d["time"]), _col(d["sharpness"]), _col(d["iterations"])
    px, py = xs / scale, ys / scale
    i0 = i1 = i2 = 1.0
    for s in range(6):
        active = iters > s
        r0 = torch.cos(py * i0 + t / i1) / i2
        r1 = torch.sin(px * i0 + t / i1) / i2
        px = torch.where(active, px + (r0 - 0.3 * r1), px)
        py = torch.where(active, py + (r1 + 0.3 * r0), py)
        i0, i1, i2 = i0 * 1.93, i1 * 1.15, i2 * (2.25 - sharp)     # i[3] stays 0: 0 · rand · i[1]
    rgb = torch.stack((torch.sin(px - t), torch.sin((px + py + torch.sin(t)) * 0.5), torch.sin(py + t)), 1)
    a = p.level * 64 / 10 / 255
    return (1 - a) * x + a * rgb


# ---------------------------------------------------------------- caustic_refraction
def _sample_caustic(n: int, size: Size, p: CorruptionParams, g: torch.Generator, like: torch.Tensor) -> Draw:
    return {"time": _uniform((n,), 0.5, 2.0, g, like), "size": _uniform((n,), 0.75, 1.25, g, like)}


def caustics(h: int, w: int, time: torch.Tensor, size: torch.Tensor) -> torch.Tensor:
    """The reference's caustic pattern (N, h, w) in [0, 1] for per-image ``time`` and ``size`` (pixels)."""
    ys, xs = _grid(torch.empty(0, 1, h, w, dtype=time.dtype, device=time.device))
    tau = 6.28318530718
    p0 = torch.remainder(ys / _col(size), 1) * tau - 250
    p1 = torch.remainder(xs / _col(size), 1) * tau - 250
    i0, i1 = p0, p1
    c: torch.Tensor | float = 1.0
    for n in range(5):
        t = _col(time * (1.0 - 3.5 / (n + 1)))
        i0, i1 = p0 + torch.cos(t - i0) + torch.sin(t + i1), p1 + torch.sin(t - i1) + torch.cos(t + i0)
        length = torch.sqrt((p0 / (torch.sin(i0 + t) / 0.005)) ** 2 + (p1 / (torch.cos(i1 + t) / 0.005)) ** 2)
        c = c + 1.0 / length
    c = 1.17 - (c / 5.0) ** 1.4
    return (c.abs() ** 8.0).clamp(0, 1)


@corruption("caustic_refraction", GROUP, ("level",), _levels((2.35, 3.2, 4.9, 6.6, 9.15)), sample=_sample_caustic)
def caustic_refraction(x: torch.Tensor, p: CorruptionParams, d: Draw) -> torch.Tensor:
    """Refraction through a caustic "water surface": the caustics (blurred, σ = 1 px at the reference size)
    are a height map whose luma gradient is the lens normal; each pixel samples the image bilinearly (zero
    outside) at its refraction (η = 4, lens scale 0.05·level·S) and is lit by 0.2·level times the gradient."""
    n, _, h, w = x.shape
    luma = gaussian_filter(caustics(h, w, d["time"].to(x.dtype), d["size"] * min(h, w)), _side_scale(x, p),
                           mode="reflect")
    padded = torch.nn.functional.pad(luma, (1, 1, 1, 1))
    north, south = padded[:, 1:-1, :-2], padded[:, 1:-1, 2:]      # (y, x∓1)
    west, east = padded[:, :-2, 1:-1], padded[:, 2:, 1:-1]        # (y∓1, x)
    n0, n1 = east - west, south - north
    norm = torch.sqrt(n0 * n0 + n1 * n1 + 1)
    n0, n1, n2 = n0 / norm, n1 / norm, 1 / norm
    r = torch.sqrt(n0 * n0 + n1 * n1)
    out_angle = torch.asin(r / 4.0)                                # sin(angle) = r; η = 4
    factor = (torch.cos(out_angle) - torch.sin(out_angle) * n2 / r.clamp_min(1e-12)) * (p.level * 0.5 * min(h, w) / 10)
    straight = n2.abs() >= 1.0 - 1e-3
    dy = torch.where(straight, 0.0, torch.round(n0 * factor, decimals=3))
    dx = torch.where(straight, 0.0, torch.round(n1 * factor, decimals=3))
    ys, xs = _grid(x)
    light = ((north - south) + (east - west)) * (p.level * 2.0 / 10)
    return _bilinear(x, ys + dy, xs + dx) + light[:, None]


# ---------------------------------------------------------------- sparkles / inverse_sparkles
def _ray_gain(dy: torch.Tensor, dx: torch.Tensor, lengths: torch.Tensor, rays: torch.Tensor,
              exponent: float) -> torch.Tensor:
    """The reference's sparkle kernel ``f`` (N, h, w) in [0, 1] around one centre: ray lengths (N, MAX_RAYS)
    of which the first ``rays`` (N,) are used, interpolated by angle, g = (length² / (d² + 10⁻⁴))^exponent."""
    dy, dx = torch.broadcast_tensors(dy, dx)
    n, h, w = dy.shape
    rays = rays.view(n, 1, 1)
    d = (torch.atan2(dx, dy) + math.pi) / (2 * math.pi) * rays
    i = torch.floor(d)
    f = d - i
    i = i.long().view(n, -1)
    r = rays.long().view(n, 1)
    l0 = torch.gather(lengths, 1, i % r).view(n, h, w)
    l1 = torch.gather(lengths, 1, (i + 1) % r).view(n, h, w)
    length = l0 + f * (l1 - l0)
    g = (length * length / (dy * dy + dx * dx + 1e-4)) ** exponent
    return ((1 - (f - 0.5) ** 2) * g).clamp(0, 1)


def _sample_sparkles(n: int, size: Size, p: CorruptionParams, g: torch.Generator, like: torch.Tensor) -> Draw:
    return {"centers": rand((n, 5, 2), g, like), "rays": torch.floor(_uniform((n, 5), 50, 200, g, like)).clamp_(50, 199),
            "lengths": randn((n, 5, MAX_RAYS), g, like)}


@corruption("sparkles", GROUP, ("level",), _levels((1.0, 2.0, 3.0, 5.0, 6.0), (0.7, 3.5, 5.6, 6.3, 7.0)),
            sample=_sample_sparkles)
def sparkles(x: torch.Tensor, p: CorruptionParams, d: Draw) -> torch.Tensor:
    """Five white star bursts, applied one after the other: radius 0.01·level·S, 50–199 rays of length
    max(1, r·(1 + 0.25·z)), z ~ N(0, 1); centres (y, x) relative to the height and width."""
    n, _, h, w = x.shape
    ys, xs = _grid(x)
    radius = p.level * 0.1 / 10 * min(h, w)
    out = x
    for j in range(5):
        c = d["centers"][:, j]
        lengths = (radius + 0.25 * radius * d["lengths"][:, j]).clamp_min(1)
        f = _ray_gain(ys - _col(c[:, 0] * h), xs - _col(c[:, 1] * w), lengths, d["rays"][:, j], 1.0)
        out = out + f[:, None] * (1 - out)
    return out


def _sample_inverse(n: int, size: Size, p: CorruptionParams, g: torch.Generator, like: torch.Tensor) -> Draw:
    return {"center": _uniform((n, 2), 0.25, 0.75, g, like),
            "rays": torch.floor(_uniform((n,), 50, 200, g, like)).clamp_(50, 199), "lengths": randn((n, MAX_RAYS), g, like)}


@corruption("inverse_sparkles", GROUP, ("level",), _levels((1.0, 2.0, 4.0, 9.0, 10.0), (1.0, 1.5, 2.5, 4.5, 5.0)),
            sample=_sample_inverse)
def inverse_sparkles(x: torch.Tensor, p: CorruptionParams, d: Draw) -> torch.Tensor:
    """White everywhere except one star burst that lets the image through: radius S/4, 50–199 rays of
    length r·(1 + 0.25·z), g raised to 6.5·level/50; centre (y, x) in [¼, ¾] of the height and width."""
    n, _, h, w = x.shape
    ys, xs = _grid(x)
    radius = 0.25 * min(h, w)
    c = d["center"]
    f = _ray_gain(ys - _col(c[:, 0] * h), xs - _col(c[:, 1] * w), radius + 0.25 * radius * d["lengths"],
                  d["rays"], p.level * 65 / 10 / 50)
    return 1 + f[:, None] * (x - 1)


# ---------------------------------------------------------------- perlin_noise
def _sample_perlin(n: int, size: Size, p: CorruptionParams, g: torch.Generator, like: torch.Tensor) -> Draw:
    perm, grad = perlin_tables(n, g, like)
    return {"perm": perm, "grad": grad}


@corruption("perlin_noise", GROUP, ("level",), _levels((4.6, 5.2, 5.8, 7.6, 8.8)), sample=_sample_perlin)
def perlin_noise(x: torch.Tensor, p: CorruptionParams, d: Draw) -> torch.Tensor:
    """(1 − α)·x + α·clip(½·T + ½, 0, 1), α = 0.05·level, T Perlin turbulence (16 octaves' limit) on a
    lattice of 32·S/224 pixels."""
    n, _, h, w = x.shape
    ys, xs = _grid(x)
    cell = 32 * min(h, w) / 224
    u = (ys / cell).expand(n, h, w)
    v = (xs / cell).expand(n, h, w)
    t = perlin_turbulence(u, v, d["perm"], d["grad"].to(x.dtype), 16.0)
    alpha = p.level * 0.5 / 10
    return (1 - alpha) * x + alpha * (0.5 * t + 0.5).clamp(0, 1)[:, None]


# ---------------------------------------------------------------- blue_noise_sample / brownish_noise
def _sample_phases(channels: int):
    def sample(n: int, size: Size, p: CorruptionParams, g: torch.Generator, like: torch.Tensor) -> Draw:
        return {"phases": mirrored_phases(n, channels, *size, g, like)}
    return sample


@corruption("blue_noise_sample", GROUP, ("level",), _levels((0.8, 1.6, 2.4, 4.0, 5.6), (0.7, 1.4, 2.1, 3.5, 4.2)),
            sample=_sample_phases(1))
def blue_noise_sample(x: torch.Tensor, p: CorruptionParams, d: Draw) -> torch.Tensor:
    """Keep the pixels where blue noise (amplitude ∝ frequency, unit std) exceeds 0.3·level − 2.5; black
    elsewhere."""
    h, w = x.shape[-2:]
    noise = spectral_noise(radial_distance(h, w, x), d["phases"])
    return x * (noise > p.level * 3.0 / 10 - 2.5)


@corruption("brownish_noise", GROUP, ("level",), _levels((1.0, 2.0, 3.0, 4.0, 5.0), (2.5, 4.0, 5.5, 6.5, 7.0)),
            sample=_sample_phases(3))
def brownish_noise(x: torch.Tensor, p: CorruptionParams, d: Draw) -> torch.Tensor:
    """x + (6.4·level/255)·noise, per channel, amplitude ∝ 1/(f² + 1) (unit std)."""
    h, w = x.shape[-2:]
    r = radial_distance(h, w, x)
    return x + (p.level * 64 / 10 / 255) * spectral_noise(1 / (r * r + 1), d["phases"])


# ---------------------------------------------------------------- checkerboard_cutout
def _cells(h: int, w: int) -> int:
    """Side of the cell table: more than the largest ⌊4S / max(0.1·S, 1)⌋ (float rounding included)."""
    s = min(h, w)
    return int(4 * s / max(0.1 * s, 1.0)) + 1


def _sample_checkerboard(n: int, size: Size, p: CorruptionParams, g: torch.Generator, like: torch.Tensor) -> Draw:
    c = _cells(*size)
    return {"angle": _uniform((n,), 0, 2 * math.pi, g, like), "scale": _uniform((n,), 0.1, 0.25, g, like),
            "cells": rand((n, c, c), g, like)}


@corruption("checkerboard_cutout", GROUP, ("level",), _levels((2.0, 3.0, 4.0, 5.0, 6.0), (1.0, 2.0, 3.0, 4.0, 5.0)),
            sample=_sample_checkerboard)
def checkerboard_cutout(x: torch.Tensor, p: CorruptionParams, d: Draw) -> torch.Tensor:
    """A rotated checkerboard (squares of max(scale·S, 1) pixels) whose cells of one colour are each greyed
    (128/255) with probability level/10; the cell table wraps as NumPy's negative indices do."""
    n, _, h, w = x.shape
    s = min(h, w)
    ys, xs = _grid(x)
    scale = _col((d["scale"] * s).clamp_min(1))
    a = _col(d["angle"])
    nx = (torch.cos(a) * ys + torch.sin(a) * xs) / scale
    ny = (-torch.sin(a) * ys + torch.cos(a) * xs) / scale
    parity = torch.floor(torch.remainder(nx, 2)) != torch.floor(torch.remainder(ny, 2))
    size = torch.floor(4 * s / scale).long().clamp_(1, d["cells"].shape[-1])   # the reference's int(4·S // scale)
    c = d["cells"].shape[-1]
    idx = torch.remainder(torch.trunc(nx).long(), size) * c + torch.remainder(torch.trunc(ny).long(), size)
    cut = torch.gather(d["cells"].reshape(n, -1), 1, idx.view(n, -1)).view(n, h, w) < p.level / 10
    keep = parity | ~cut
    return torch.where(keep[:, None], x, torch.full((), 128 / 255, dtype=x.dtype, device=x.device))
