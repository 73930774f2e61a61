"""Batched linear filters of the corruptions (padding, Gaussian, box, disk, 2-D kernels) on (N, C, H, W) floats.

Boundary modes follow the libraries of the reference corruptions (Hendrycks & Dietterich 2019, arXiv:1903.12261):
``"nearest"`` repeats the edge value (scipy ``nearest``, OpenCV ``BORDER_REPLICATE``); ``"reflect"`` is
half-sample symmetric ``d c b a | a b c d`` (scipy ``reflect``); ``"mirror"`` whole-sample symmetric
``d c b | a b c d`` (scipy ``mirror``, OpenCV ``BORDER_REFLECT_101``, torch ``reflect``). Padding and Gaussian
filtering are exact for any kernel size, even one larger than the image.
"""

from __future__ import annotations

import math
from functools import lru_cache

import torch
import torch.nn.functional as F

_MODES = ("nearest", "reflect", "mirror")
#: On the CPU, FFT filtering transforms a few images at a time, about this many padded values per chunk:
#: the chunk's spectra stay in the cache (at 224 px this halves the time of a 64-image batch, measured in
#: docs/benchmarks.md). On a GPU the whole batch is one chunk.
FFT_CHUNK_VALUES = 1 << 20


def fft_chunks(n: int, values_per_image: int, device: torch.device) -> list[slice]:
    """Slices of a batch of ``n`` images for FFT filtering (see :data:`FFT_CHUNK_VALUES`)."""
    size = n if device.type != "cpu" else max(1, FFT_CHUNK_VALUES // max(1, values_per_image))
    return [slice(i, min(n, i + size)) for i in range(0, n, size)]


def boundary_index(idx: torch.Tensor, n: int, mode: str) -> torch.Tensor:
    """Map integer positions (any range) into ``0..n-1`` under a boundary ``mode``."""
    if mode == "nearest" or n == 1:
        return idx.clamp(0, n - 1)
    if mode == "reflect":
        m = idx.remainder(2 * n)
        return torch.where(m >= n, 2 * n - 1 - m, m)
    if mode == "mirror":
        m = idx.remainder(2 * n - 2)
        return torch.where(m >= n, 2 * n - 2 - m, m)
    raise ValueError(f"unknown boundary mode {mode!r}; use one of {_MODES}")


def pad(x: torch.Tensor, top: int, bottom: int, left: int, right: int, mode: str = "mirror") -> torch.Tensor:
    """Pad the last two dims of ``x`` by any amounts (even larger than the image) with a boundary mode."""
    h, w = x.shape[-2:]
    torch_mode = {"nearest": "replicate", "mirror": "reflect"}.get(mode)
    if (torch_mode is not None and x.is_floating_point() and min(top, bottom, left, right) >= 0
            and (torch_mode == "replicate" or max(top, bottom) < h and max(left, right) < w)):
        flat = x.reshape(-1, 1, h, w) if x.ndim not in (3, 4) else x      # ~8x faster than two gathers
        return F.pad(flat, (left, right, top, bottom), mode=torch_mode).reshape(*x.shape[:-2], h + top + bottom,
                                                                               w + left + right)
    rows = boundary_index(torch.arange(-top, h + bottom, device=x.device), h, mode)
    cols = boundary_index(torch.arange(-left, w + right, device=x.device), w, mode)
    return x.index_select(-2, rows).index_select(-1, cols)


def gaussian_kernel1d(sigma: float, truncate: float = 4.0, radius: int | None = None) -> torch.Tensor:
    """scipy's Gaussian taps: radius ``int(truncate·σ + 0.5)``, weights ∝ exp(−i²/2σ²), sum 1 (float64)."""
    if radius is None:
        radius = int(truncate * float(sigma) + 0.5)
    i = torch.arange(-radius, radius + 1, dtype=torch.float64)
    k = torch.exp(-0.5 * (i / float(sigma)) ** 2)
    return k / k.sum()


@lru_cache(maxsize=256)
def _filter_matrix_cpu(n: int, sigma: float, truncate: float, mode: str) -> torch.Tensor:
    k = gaussian_kernel1d(sigma, truncate)
    r = (k.numel() - 1) // 2
    out = torch.arange(n).unsqueeze(1)                      # (n, 1)
    src = boundary_index(out + torch.arange(-r, r + 1).unsqueeze(0), n, mode)   # (n, 2r+1)
    return torch.zeros(n, n, dtype=torch.float64).scatter_add_(1, src, k.expand(n, -1).contiguous())


def gaussian_matrix(n: int, sigma: float, *, truncate: float = 4.0, mode: str = "nearest",
                    device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The (n, n) matrix M with ``M @ v`` = scipy ``gaussian_filter1d(v, σ, mode, truncate)``."""
    return _filter_matrix_cpu(int(n), float(sigma), float(truncate), mode).to(device=device, dtype=dtype)


def gaussian_filter(x: torch.Tensor, sigma: float | tuple[float, float], *, truncate: float = 4.0,
                    mode: str = "nearest") -> torch.Tensor:
    """Separable Gaussian filter over the last two dims, identical to scipy ``gaussian_filter`` (σ = 0 leaves
    that axis unchanged): two small matrix products, exact for any boundary mode and radius."""
    sy, sx = (sigma, sigma) if not isinstance(sigma, tuple) else sigma
    h, w = x.shape[-2:]
    y = x
    if sy > 1e-15:
        y = torch.matmul(gaussian_matrix(h, sy, truncate=truncate, mode=mode, device=x.device, dtype=x.dtype), y)
    if sx > 1e-15:
        y = torch.matmul(y, gaussian_matrix(w, sx, truncate=truncate, mode=mode, device=x.device, dtype=x.dtype).T)
    return y


def gaussian_blur(x: torch.Tensor, sigma: float) -> torch.Tensor:
    """Gaussian blur of images (N, C, H, W) with standard deviation ``sigma`` pixels.

    Same as scikit-image ``gaussian(x, sigma)`` (mode ``nearest``, truncate 4), the filter used by the
    ``gaussian_blur`` and ``glass_blur`` corruptions of Hendrycks & Dietterich 2019 (arXiv:1903.12261).

    >>> gaussian_blur(torch.rand(2, 3, 32, 32), 1.5).shape
    torch.Size([2, 3, 32, 32])
    """
    return gaussian_filter(x, float(sigma), truncate=4.0, mode="nearest")


def filter2d(x: torch.Tensor, kernel: torch.Tensor, mode: str = "mirror") -> torch.Tensor:
    """Correlate every channel of ``x`` (N, C, H, W) with one 2-D ``kernel`` (kh, kw), centre anchor, like
    OpenCV ``filter2D`` (default border ``BORDER_REFLECT_101`` = ``"mirror"``). Kernels of up to 5×5 taps are
    weighted sums of shifted views (single-channel convolutions are slow on CPUs), larger ones a convolution."""
    n, c, h, w = x.shape
    kh, kw = kernel.shape
    xp = pad(x, kh // 2, (kh - 1) // 2, kw // 2, (kw - 1) // 2, mode)
    if kh * kw <= 25:
        out = torch.zeros_like(x)
        for i, row in enumerate(kernel.tolist()):
            for j, weight in enumerate(row):
                if weight != 0:
                    out.add_(xp[..., i:i + h, j:j + w], alpha=weight)
        return out
    k = kernel.to(device=x.device, dtype=x.dtype).reshape(1, 1, kh, kw)
    return F.conv2d(xp.reshape(n * c, 1, h + kh - 1, w + kw - 1), k).reshape(n, c, h, w)


def box_blur3(x: torch.Tensor) -> torch.Tensor:
    """OpenCV ``blur(x, (3, 3))``: 3×3 mean, border ``BORDER_REFLECT_101`` (separable sums of shifted views).
    The sum is divided by a tensor 9 on ``x``'s device: CUDA divides by a Python number by multiplying by its
    rounded reciprocal, one unit in the last place off the CPU's quotient, which spatter's ``floor`` magnifies."""
    xp = pad(x, 1, 1, 1, 1, "mirror")
    rows = xp[..., :-2, :] + xp[..., 1:-1, :] + xp[..., 2:, :]
    nine = torch.full((), 9, dtype=x.dtype, device=x.device)
    return (rows[..., :-2] + rows[..., 1:-1] + rows[..., 2:]).div_(nine)


def dilate3(mask: torch.Tensor) -> torch.Tensor:
    """Binary 3×3 dilation of a boolean (…, H, W) mask (outside the image counts as False)."""
    p = F.pad(mask, (1, 1, 1, 1))
    rows = p[..., :-2, :] | p[..., 1:-1, :] | p[..., 2:, :]
    return rows[..., :-2] | rows[..., 1:-1] | rows[..., 2:]


def _cv_gaussian_kernel(ksize: int, sigma: float) -> torch.Tensor:
    i = torch.arange(ksize, dtype=torch.float64) - (ksize - 1) / 2
    k = torch.exp(-(i ** 2) / (2 * sigma * sigma))
    return k / k.sum()


def disk_kernel(radius: float, alias_blur: float) -> torch.Tensor:
    """Defocus kernel (float64 (k, k)): a disk of ``radius`` (sum 1), smoothed by a small Gaussian of σ
    ``alias_blur``. Grid −8…8 when radius ≤ 8 (3×3 smoothing), else −r…r (5×5 smoothing); the smoothing uses
    OpenCV's ``GaussianBlur`` border (reflect-101), as in Hendrycks & Dietterich 2019 (arXiv:1903.12261)."""
    radius = float(radius)
    small = radius <= 8
    grid = torch.arange(-8, 9, dtype=torch.float64) if small else torch.arange(-radius, radius + 1, 1.0,
                                                                                dtype=torch.float64)
    yy, xx = torch.meshgrid(grid, grid, indexing="ij")
    disk = (xx ** 2 + yy ** 2 <= radius ** 2).to(torch.float64)
    disk = disk / disk.sum().clamp_min(1e-12)
    if alias_blur <= 0:
        return disk
    ksize = 3 if small else 5
    g = _cv_gaussian_kernel(ksize, float(alias_blur))
    d = pad(disk[None, None], ksize // 2, ksize // 2, ksize // 2, ksize // 2, "mirror")
    return F.conv2d(F.conv2d(d, g.view(1, 1, -1, 1)), g.view(1, 1, 1, -1))[0, 0]


def defocus(x: torch.Tensor, radius: float, alias_blur: float) -> torch.Tensor:
    """Defocus blur: every channel filtered by :func:`disk_kernel` (border reflect-101)."""
    k = disk_kernel(radius, alias_blur)
    if k.shape[0] >= 15 and min(x.shape[-2:]) >= 32:
        return _filter2d_fft(x, k)
    return filter2d(x, k)


def _filter2d_fft(x: torch.Tensor, kernel: torch.Tensor) -> torch.Tensor:
    """:func:`filter2d` through the FFT (cheaper for large kernels; same up to float error), in :func:`fft_chunks`."""
    n, c, h, w = x.shape
    kh, kw = kernel.shape
    ph, pw = kh // 2, kw // 2
    hp, wp = h + kh - 1, w + kw - 1
    real = x.dtype if x.dtype in (torch.float32, torch.float64) else torch.float32
    k = torch.zeros(hp, wp, dtype=real, device=x.device)
    k[:kh, :kw] = kernel.flip(0, 1).to(device=x.device, dtype=real)
    spectrum = torch.fft.rfft2(k)
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    for part in fft_chunks(n, c * hp * wp, x.device):
        xp = pad(x[part], ph, kh - 1 - ph, pw, kw - 1 - pw, "mirror").to(real)
        y = torch.fft.irfft2(torch.fft.rfft2(xp).mul_(spectrum), s=(hp, wp))
        out[part] = y[..., kh - 1:kh - 1 + h, kw - 1:kw - 1 + w]
    return out


def next_power_of_2(n: int) -> int:
    """Smallest power of two ≥ n."""
    return 1 << max(0, math.ceil(math.log2(max(1, n))))
