"""Batched diamond-square plasma fractal (the fog layer of Hendrycks & Dietterich 2019, arXiv:1903.12261)."""

from __future__ import annotations

import torch


def plasma_fractal(n: int, size: int = 256, decay: float = 3.0, generator: torch.Generator | None = None,
                   *, device: torch.device | str | None = None,
                   dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``n`` independent diamond-square height maps, shape (n, size, size), each min-max scaled to [0, 1].

    ``size`` must be a power of two. The random "wibble" starts at 100 and is divided by ``decay`` at each
    level; a midpoint is the mean of its four neighbours (wrapping around) plus wibble·U(−wibble, wibble),
    as in the reference. Random numbers come from ``generator`` (on its device) and are moved to ``device``.

    >>> plasma_fractal(2, 32, 2.0, torch.Generator().manual_seed(0)).shape
    torch.Size([2, 32, 32])
    """
    if size < 1 or size & (size - 1):
        raise ValueError(f"plasma_fractal size must be a power of two, got {size}")
    gen_device = generator.device if generator is not None else torch.device("cpu")
    device = torch.device(device) if device is not None else gen_device
    m = torch.zeros(n, size, size, dtype=torch.float64, device=device)
    step = size
    wibble = 100.0

    def wibbled_mean(total: torch.Tensor) -> torch.Tensor:
        u = torch.rand(total.shape, generator=generator, device=gen_device, dtype=torch.float64).to(device)
        return total / 4 + wibble * (u * 2 * wibble - wibble)

    while step >= 2:
        half = step // 2
        corners = m[:, 0::step, 0::step]
        squares = corners + corners.roll(-1, 1)
        squares = squares + squares.roll(-1, 2)
        m[:, half::step, half::step] = wibbled_mean(squares)
        centres = m[:, half::step, half::step]
        corners = m[:, 0::step, 0::step]
        left = centres + centres.roll(1, 1) + corners + corners.roll(-1, 2)
        m[:, 0::step, half::step] = wibbled_mean(left)
        top = centres + centres.roll(1, 2) + corners + corners.roll(-1, 1)
        m[:, half::step, 0::step] = wibbled_mean(top)
        step = half
        wibble /= decay
    m = m - m.amin(dim=(1, 2), keepdim=True)
    m = m / m.amax(dim=(1, 2), keepdim=True).clamp_min(1e-12)
    return m.to(dtype)
