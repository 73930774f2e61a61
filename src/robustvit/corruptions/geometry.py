"""Batched geometric building blocks on (N, C, H, W) floats: clipped zoom, motion blur with per-image angles,
warps; as the reference corruptions of Hendrycks & Dietterich 2019 (arXiv:1903.12261), public for ImageNet-P."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from robustvit.corruptions.filters import fft_chunks, pad


def clipped_zoom(x: torch.Tensor, factor: float) -> torch.Tensor:
    """Zoom into the centre of every image by ``factor`` ≥ 1 and crop back to the input size (the reference's
    ``clipped_zoom``): the central ``ceil(H/factor)`` × ``ceil(W/factor)`` crop resized linearly to
    ``round(crop·factor)`` (scipy ``zoom(order=1)`` coordinates, corners aligned), its centre H × W kept.

    >>> clipped_zoom(torch.rand(1, 3, 32, 32), 1.2).shape
    torch.Size([1, 3, 32, 32])
    """
    factor = float(factor)
    if factor < 1:
        raise ValueError(f"clipped_zoom needs factor >= 1, got {factor}")
    h, w = x.shape[-2:]
    ch, cw = math.ceil(h / factor), math.ceil(w / factor)
    top, left = (h - ch) // 2, (w - cw) // 2
    oh, ow = int(round(ch * factor)), int(round(cw * factor))
    crop = x[..., top:top + ch, left:left + cw]
    crop = crop.reshape(-1, 1, ch, cw) if crop.ndim != 4 else crop
    if (oh, ow) != (ch, cw):
        crop = F.interpolate(crop, size=(oh, ow), mode="bilinear", align_corners=True)
    tt, tl = (oh - h) // 2, (ow - w) // 2
    return crop[..., tt:tt + h, tl:tl + w].reshape(*x.shape[:-2], h, w)


def zoom_factors(start: float, stop: float, step: float) -> list[float]:
    """``numpy.arange(start, stop, step)`` for floats: ``ceil((stop - start) / step)`` values."""
    return [start + i * step for i in range(math.ceil((stop - start) / step))]


def motion_kernel(radius: float, sigma: float) -> torch.Tensor:
    """One-sided motion kernel: width 2⌈r⌉+1, weights ∝ exp(−i²/2σ²), i = 0…width−1, sum 1 (float64)."""
    width = 2 * math.ceil(float(radius)) + 1
    i = torch.arange(width, dtype=torch.float64)
    k = torch.exp(-(i ** 2) / (2 * float(sigma) ** 2))
    return k / k.sum()


def motion_offsets(width: int, angle_deg: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Integer tap offsets (dy, dx), each (N, width): (⌈i·sinθ − ½⌉, ⌈i·cosθ − ½⌉), computed in float64."""
    theta = torch.deg2rad(angle_deg.to(torch.float64)).unsqueeze(1)
    i = torch.arange(width, dtype=torch.float64, device=theta.device).unsqueeze(0)
    dy = torch.ceil(i * torch.sin(theta) - 0.5)
    dx = torch.ceil(i * torch.cos(theta) - 0.5)
    return dy.to(torch.int64), dx.to(torch.int64)


def _fft_size(n: int) -> int:
    """Smallest m ≥ n whose only prime factors are 2, 3 and 5 (fast FFT lengths)."""
    m = n
    while True:
        r = m
        for p in (2, 3, 5):
            while r % p == 0:
                r //= p
        if r == 1:
            return m
        m += 1


def motion_blur(x: torch.Tensor, radius: float, sigma: float, angle_deg: float | torch.Tensor) -> torch.Tensor:
    """Motion blur of every image along ``angle_deg`` (a float, or a tensor with one angle per image).

    The ImageMagick-style one-sided kernel of :func:`motion_kernel`: output pixel (h, w) is
    Σ_i k_i · x[h + dy_i, w + dx_i], edges replicated; taps that would leave the image stop the sum (weight
    dropped, as the reference). Each image's sparse kernel is applied to the whole batch at once in the Fourier
    domain of the edge-padded images (no per-image loop; the cost does not grow with the radius).

    >>> motion_blur(torch.rand(2, 3, 32, 32), 5, 2, torch.tensor([0.0, 30.0])).shape
    torch.Size([2, 3, 32, 32])
    """
    n, c, h, w = x.shape
    k = motion_kernel(radius, sigma)
    angle = torch.as_tensor(angle_deg, dtype=torch.float64).reshape(-1).cpu()
    if angle.numel() == 1:
        angle = angle.expand(n)
    if angle.numel() != n:
        raise ValueError(f"motion_blur needs one angle or one per image ({n}), got {angle.numel()}")
    dy, dx = motion_offsets(k.numel(), angle)                 # (N, width), on CPU
    inside = (dy.abs() < h) & (dx.abs() < w)
    valid = torch.cumprod(inside.to(torch.int64), dim=1).bool()
    weights = k.unsqueeze(0) * valid                          # (N, width) float64
    used_y, used_x = dy[valid], dx[valid]                     # pad only as far as the taps reach
    top, bottom = max(0, -int(used_y.min())), max(0, int(used_y.max()))
    left, right = max(0, -int(used_x.min())), max(0, int(used_x.max()))
    hp, wp = _fft_size(h + top + bottom), _fft_size(w + left + right)
    real = torch.float64 if x.dtype == torch.float64 else torch.float32
    pos = torch.remainder(-dy, hp) * wp + torch.remainder(-dx, wp)
    weights = merge_taps(pos, weights.to(real)).to(x.device)
    pos = pos.to(x.device)
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    for part in fft_chunks(n, (c + 1) * hp * wp, x.device):
        xp = pad(x[part].to(real), top, hp - h - top, left, wp - w - left, "nearest")
        kern = torch.zeros(len(weights[part]), hp * wp, dtype=real, device=x.device)
        kern.scatter_add_(1, pos[part], weights[part])      # one nonzero weight per position: order-free
        spec = torch.fft.rfft2(xp).mul_(torch.fft.rfft2(kern.view(-1, 1, hp, wp)))
        out[part] = torch.fft.irfft2(spec, s=(hp, wp))[..., top:top + h, left:left + w]
    return out


def merge_taps(pos: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Taps (N, width) at kernel positions ``pos`` with ``weights`` (CPU) → each position's total (summed in tap
    order, as a CPU ``scatter_add_``) on its first tap, 0 on the others: a ``scatter_add_`` of the result adds
    one nonzero value per position, so it is deterministic on CUDA too (atomic, unordered adds)."""
    same = pos.unsqueeze(2) == pos.unsqueeze(1)                         # (N, width, width)
    first = same.to(torch.uint8).argmax(2)                              # the first tap at each tap's position
    return torch.zeros_like(weights).scatter_add_(1, first, weights)


def warp_bilinear(x: torch.Tensor, ys: torch.Tensor, xs: torch.Tensor, mode: str) -> torch.Tensor:
    """Sample ``x`` (N, C, H, W) bilinearly at pixel coordinates (ys, xs), each (N, H', W'); ``mode``
    ``"mirror"`` reflects about the edge pixels (OpenCV reflect-101), ``"reflect"`` about the image's edges
    (scipy ``reflect``)."""
    h, w = x.shape[-2:]
    if mode == "mirror":
        grid = torch.stack((2 * xs / max(w - 1, 1) - 1, 2 * ys / max(h - 1, 1) - 1), -1)
    elif mode == "reflect":
        grid = torch.stack(((2 * xs + 1) / w - 1, (2 * ys + 1) / h - 1), -1)
    else:
        raise ValueError(f"unknown warp mode {mode!r}")
    return F.grid_sample(x, grid.to(x.dtype), mode="bilinear", padding_mode="reflection",
                         align_corners=mode == "mirror")
