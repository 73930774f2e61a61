"""Noise fields of the ImageNet-C̄ corruptions (Mintun, Kirillov & Xie 2021, arXiv:2102.11273), batched: the
constructions of ``imagenet_c_bar/corrupt.py`` and ``utils/perlin_noise.py`` of
facebookresearch/augmentation-corruption:

- :func:`spectral_noise`: ``real(ifft2(power · e^{iφ}))`` with the released code's phase layout (the left half
  of the spectrum drawn, the right half its point mirror, rolled by half the size), scaled to unit std;
- :func:`perlin_turbulence`: Perlin's 2-D gradient noise summed over octaves 1, 2, 4, …, ``octaves``.
"""

from __future__ import annotations

import math

import torch

from robustvit.corruptions.sampling import rand

#: Side of Perlin's lattice tables (``B`` of the reference); larger lookups wrap around it.
PERLIN_B = 256          # a power of two: indices wrap with & (B − 1)
_PERLIN_N = 16 * PERLIN_B


def mirrored_phases(n: int, c: int, h: int, w: int, g: torch.Generator, like: torch.Tensor) -> torch.Tensor:
    """Phases (n, c, h, w) in [0, 2π): the left ``w // 2`` columns drawn, the right ones the point mirror of
    the left; for odd ``w`` a middle column whose lower half mirrors its upper half (as the reference)."""
    left = rand((n, c, h, w // 2), g, like) * (2 * math.pi)
    parts = [left]
    if w % 2:
        top = rand((n, c, h // 2, 1), g, like) * (2 * math.pi)
        mid = torch.zeros((n, c, h - 2 * (h // 2), 1), dtype=like.dtype, device=like.device)
        parts.append(torch.cat((top, mid, top.flip(-2)), dim=-2))
    parts.append(left.flip((-2, -1)))
    return torch.cat(parts, dim=-1)


def radial_distance(h: int, w: int, like: torch.Tensor) -> torch.Tensor:
    """(h, w) distance of each pixel (y, x) from the centre (h/2, w/2) (``norm([x, y] - center)``)."""
    ys = torch.arange(h, dtype=like.dtype, device=like.device).sub_(h / 2).view(h, 1)
    xs = torch.arange(w, dtype=like.dtype, device=like.device).sub_(w / 2).view(1, w)
    return torch.sqrt(ys * ys + xs * xs)


def spectral_noise(power: torch.Tensor, phases: torch.Tensor) -> torch.Tensor:
    """Noise fields with amplitude spectrum ``power`` (h, w; centred) and ``phases`` (…, h, w), each field
    scaled to unit standard deviation (numpy's population std)."""
    h, w = phases.shape[-2:]
    spectrum = torch.polar(power.to(phases.dtype).expand_as(phases), phases)
    spectrum = torch.roll(spectrum, (h // 2, w // 2), dims=(-2, -1))
    noise = torch.fft.ifft2(spectrum).real
    return noise / noise.std(dim=(-2, -1), correction=0, keepdim=True)


def perlin_tables(n: int, g: torch.Generator, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per image a permutation of 0..255 (n, 256) and unit gradients (n, 256, 2) with components drawn
    uniformly from {−1, −255/256, …, 255/256} before normalising (the reference's ``randint % 512 − 256``).

    The permutation is the reference's shuffle: for i = 255 … 0 swap places i and j, j uniform over all 256
    places (not Fisher–Yates: its permutations are not uniform, and the noise's statistics follow them)."""
    grad = (torch.floor(rand((n, PERLIN_B, 2), g, like) * 2 * PERLIN_B) - PERLIN_B) / PERLIN_B
    partner = torch.floor(rand((n, PERLIN_B), g, like) * PERLIN_B).long().clamp_(0, PERLIN_B - 1)
    perm = torch.arange(PERLIN_B, device=like.device).repeat(n, 1)
    rows = torch.arange(n, device=like.device)
    for i in range(PERLIN_B - 1, -1, -1):          # 256 swaps, each on the whole batch
        j = partner[:, i]
        here, there = perm[:, i].clone(), perm[rows, j]
        perm[:, i], perm[rows, j] = there, here
    grad = grad / grad.norm(dim=-1, keepdim=True).clamp_min(1 / PERLIN_B)
    return perm, grad


def _perlin(x: torch.Tensor, y: torch.Tensor, perm: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """Perlin noise at points x, y (n, h, w) with per-image tables; the reference's ``noise(x, y)``."""
    n = perm.shape[0]
    t = x + _PERLIN_N
    bx0 = t.floor().long() & (PERLIN_B - 1)
    rx0 = t - t.floor()
    t = y + _PERLIN_N
    by0 = t.floor().long() & (PERLIN_B - 1)
    ry0 = t - t.floor()
    bx1, by1 = (bx0 + 1) & (PERLIN_B - 1), (by0 + 1) & (PERLIN_B - 1)
    flat = perm.reshape(n, 1, -1)

    def p(idx: torch.Tensor) -> torch.Tensor:
        return torch.gather(flat, 2, idx & (PERLIN_B - 1))

    i, j = p(bx0), p(bx1)
    gx, gy = grad[..., 0].reshape(n, 1, -1), grad[..., 1].reshape(n, 1, -1)

    def dot(b: torch.Tensor, rx: torch.Tensor, ry: torch.Tensor) -> torch.Tensor:
        e = (n, b.shape[1], -1)
        return rx * torch.gather(gx.expand(*e), 2, b) + ry * torch.gather(gy.expand(*e), 2, b)

    sx, sy = rx0 * rx0 * (3 - 2 * rx0), ry0 * ry0 * (3 - 2 * ry0)
    u, v = dot(p(i + by0), rx0, ry0), dot(p(j + by0), rx0 - 1, ry0)
    a = u + sx * (v - u)
    u, v = dot(p(i + by1), rx0, ry0 - 1), dot(p(j + by1), rx0 - 1, ry0 - 1)
    b = u + sx * (v - u)
    return 1.5 * (a + sy * (b - a))


def perlin_turbulence(x: torch.Tensor, y: torch.Tensor, perm: torch.Tensor, grad: torch.Tensor,
                      octaves: float) -> torch.Tensor:
    """Σ_f |noise(f·x, f·y)| / f over f = 1, 2, 4, … ≤ ``octaves``; x, y are (n, h, w) lattice coordinates."""
    n, h, w = x.shape
    xf, yf = x.reshape(n, 1, h * w), y.reshape(n, 1, h * w)
    total = torch.zeros_like(xf)
    f = 1.0
    while f <= octaves:
        total += _perlin(f * xf, f * yf, perm, grad).abs() / f
        f *= 2
    return total.view(n, h, w)
