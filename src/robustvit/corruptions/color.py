"""Colour-space helpers (batched): RGB ↔ HSV exactly as scikit-image computes them, and luma.

Used by ``brightness`` and ``saturate`` (Hendrycks & Dietterich 2019, arXiv:1903.12261).
"""

from __future__ import annotations

import torch


def rgb_to_hsv(x: torch.Tensor) -> torch.Tensor:
    """(N, 3, H, W) RGB in [0, 1] → HSV in [0, 1] (scikit-image ``rgb2hsv`` conventions, ties → B > G > R)."""
    r, g, b = x.unbind(1)
    v = x.amax(1)
    delta = v - x.amin(1)
    safe = torch.where(delta > 0, delta, torch.ones_like(delta))
    s = torch.where(delta > 0, delta / torch.where(v > 0, v, torch.ones_like(v)), torch.zeros_like(v))
    h = (g - b) / safe
    h = torch.where(g == v, 2.0 + (b - r) / safe, h)
    h = torch.where(b == v, 4.0 + (r - g) / safe, h)
    h = torch.remainder(h / 6.0, 1.0)
    h = torch.where(delta > 0, h, torch.zeros_like(h))
    return torch.stack((h, s, v), 1)


def hsv_to_rgb(hsv: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`rgb_to_hsv` (scikit-image ``hsv2rgb``)."""
    h, s, v = hsv.unbind(1)
    h6 = h * 6.0
    hi = torch.floor(h6)
    f = h6 - hi
    hi = torch.remainder(hi, 6).to(torch.int64)
    p = v * (1 - s)
    q = v * (1 - f * s)
    t = v * (1 - (1 - f) * s)
    # rows: hi = 0..5 → (r, g, b)
    r = torch.stack((v, q, p, p, t, v), 0)
    g = torch.stack((t, v, v, q, p, p), 0)
    b = torch.stack((p, p, t, v, v, q), 0)
    idx = hi.unsqueeze(0)
    return torch.stack([c.gather(0, idx).squeeze(0) for c in (r, g, b)], 1)


def rgb_to_gray(x: torch.Tensor) -> torch.Tensor:
    """Luma 0.299 R + 0.587 G + 0.114 B (OpenCV ``COLOR_RGB2GRAY``), shape (N, 1, H, W)."""
    w = torch.tensor([0.299, 0.587, 0.114], device=x.device, dtype=x.dtype).view(1, 3, 1, 1)
    return (x * w).sum(1, keepdim=True)
