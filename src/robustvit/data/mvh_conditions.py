"""model-vs-human's parametric image manipulations, generated on the fly on a batch (N, 3, H, W) in [0, 1].

Geirhos et al., "Generalisation in humans and deep neural networks", NeurIPS 2018 (arXiv:1808.08750), made
these data sets with ``code/image_manipulation.py`` of rgeirhos/generalisation-humans-DNNs; model-vs-human
(arXiv:2106.07411) ships the images at the conditions of :data:`GENERATED`. Each function follows that code:
greyscale is scikit-image's ``rgb2gray`` (0.2125 R + 0.7154 G + 0.0721 B); low-/high-pass filters are scipy's
``gaussian_filter`` with ``mode='constant', cval=0.4423`` (the images' mean grey); filter widths are in pixels
of the 224 px images and scale with the image side. Not generated (read from the released files only):
power equalisation (needs the set's mean amplitude spectrum), false colour (needs the experiment monitor's
gamma table) and the Eidolon sets (the Eidolon factory).

>>> x = torch.rand(2, 3, 32, 32)
>>> bool(torch.allclose(apply_condition(x, "contrast", "c100"), greyscale(x), atol=1e-6))
True
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from functools import lru_cache

import torch

from robustvit.corruptions.filters import gaussian_kernel1d
from robustvit.errors import RobustvitError, unknown_name

#: The mean grey of the 16-class ImageNet images (``bg_grey`` of the reference's filters).
BG_GREY = 0.4423
#: Contrast of the uniform-noise images before the noise is added.
NOISE_CONTRAST = 0.3
#: Side of the images the reference's filter widths refer to.
REFERENCE_SIDE = 224


def greyscale(x: torch.Tensor) -> torch.Tensor:
    """scikit-image's ``rgb2gray`` (ITU-R 709 luma) in all three channels."""
    w = torch.tensor([0.2125, 0.7154, 0.0721], device=x.device, dtype=x.dtype).view(1, 3, 1, 1)
    return (x * w).sum(1, keepdim=True).expand(-1, 3, -1, -1)


def contrast(x: torch.Tensor, level: float) -> torch.Tensor:
    """Greyscale, then (1 − c)/2 + c·x (``grayscale_contrast``)."""
    return (1 - level) / 2 + greyscale(x) * level


def uniform_noise(x: torch.Tensor, width: float, generator: torch.Generator) -> torch.Tensor:
    """Greyscale at 30 % contrast plus the same U(−w, w) noise in every channel, clipped to [0, 1]."""
    g = contrast(x, NOISE_CONTRAST)
    n, _, h, w = x.shape
    noise = torch.rand((n, 1, h, w), generator=generator, device=generator.device, dtype=x.dtype).to(x.device)
    return (g + (noise * 2 - 1) * width).clamp(0, 1)


@lru_cache(maxsize=64)
def _zero_padded_matrix(n: int, sigma: float) -> torch.Tensor:
    """(n, n) M with ``M @ v`` = scipy ``gaussian_filter1d(v, σ, mode='constant', cval=0)``."""
    k = gaussian_kernel1d(sigma)
    r = (k.numel() - 1) // 2
    offset = torch.arange(n).view(1, n) - torch.arange(n).view(n, 1) + r        # tap index of (out i, in j)
    inside = (offset >= 0) & (offset <= 2 * r)
    return torch.where(inside, k[offset.clamp(0, 2 * r)], torch.zeros((), dtype=k.dtype))


def _constant_filter(x: torch.Tensor, sigma: float) -> torch.Tensor:
    """scipy ``gaussian_filter(x, σ, mode='constant', cval=BG_GREY)`` over the last two dims."""
    h, w = x.shape[-2:]
    mh = _zero_padded_matrix(h, float(sigma)).to(device=x.device, dtype=x.dtype)
    mw = _zero_padded_matrix(w, float(sigma)).to(device=x.device, dtype=x.dtype)
    return mh @ (x - BG_GREY) @ mw.T + BG_GREY


def low_pass(x: torch.Tensor, std: float) -> torch.Tensor:
    """Greyscale, Gaussian low-pass of ``std`` pixels, clipped (``low_pass_filter``); std 0: greyscale."""
    g = greyscale(x)
    return g if std == 0 else _constant_filter(g, std).clamp(0, 1)


def high_pass(x: torch.Tensor, std: float) -> torch.Tensor:
    """Greyscale minus its Gaussian low-pass, shifted to mean 0.4423, clipped (``high_pass_filter``); std ∞:
    greyscale."""
    g = greyscale(x)
    if math.isinf(std):
        return g
    d = g - _constant_filter(g, std)
    return (d + (BG_GREY - d.mean(dim=(-2, -1), keepdim=True))).clamp(0, 1)


def phase_scrambling(x: torch.Tensor, width: float, generator: torch.Generator) -> torch.Tensor:
    """Greyscale; the centred spectrum's phases outside its first row and column shifted by U(−w°, w°): the
    first half (row-major) by +φ, the second half after the middle by −φ in the same order (``scramble_phases``;
    the result's real part, clipped)."""
    g = greyscale(x)[:, :1].double()
    n, _, h, w = g.shape
    length = (h - 1) * (w - 1)
    u = torch.rand((n, length // 2), generator=generator, device=generator.device, dtype=torch.float64).to(x.device)
    shifts = (u - 0.5) * 2 * width / 180 * math.pi
    f = torch.fft.fftshift(torch.fft.fft2(g), dim=(-2, -1))
    amp, phase = f.abs(), f.angle()
    inner = phase[..., 1:, 1:].reshape(n, -1).clone()
    inner[:, :length // 2] += shifts
    inner[:, length // 2 + 1:] -= shifts
    phase = phase.clone()
    phase[..., 1:, 1:] = inner.view(n, 1, h - 1, w - 1)
    out = torch.fft.ifft2(torch.fft.ifftshift(torch.polar(amp, phase), dim=(-2, -1))).real
    return out.clamp(0, 1).to(x.dtype).expand(-1, 3, -1, -1)


def rotation(x: torch.Tensor, degrees: int) -> torch.Tensor:
    """Greyscale, rotated counter-clockwise by 0, 90, 180 or 270 degrees (``rotate90`` etc.)."""
    return torch.rot90(greyscale(x), degrees // 90, dims=(-2, -1))


def colour(x: torch.Tensor, condition: str) -> torch.Tensor:
    """``cr``: the colour image; ``bw``: greyscale."""
    return x if condition == "cr" else greyscale(x)


def _scaled(std: float, x: torch.Tensor) -> float:
    return std * min(x.shape[-2:]) / REFERENCE_SIDE


Maker = Callable[[torch.Tensor, str, torch.Generator], torch.Tensor]

#: The data sets generated on the fly: name → (its conditions in model-vs-human's order, the manipulation).
GENERATED: Mapping[str, tuple[tuple[str, ...], Maker]] = {
    "colour": (("cr", "bw"), lambda x, c, g: colour(x, c)),
    "contrast": (("c100", "c50", "c30", "c15", "c10", "c05", "c03", "c01"),
                 lambda x, c, g: contrast(x, int(c[1:]) / 100)),
    "high-pass": (("inf", "3.0", "1.5", "1.0", "0.7", "0.55", "0.45", "0.4"),
                  lambda x, c, g: high_pass(x, _scaled(float(c), x))),
    "low-pass": (("0", "1", "3", "5", "7", "10", "15", "40"), lambda x, c, g: low_pass(x, _scaled(float(c), x))),
    "phase-scrambling": (("0", "30", "60", "90", "120", "150", "180"),
                         lambda x, c, g: phase_scrambling(x, float(c), g)),
    "rotation": (("0", "90", "180", "270"), lambda x, c, g: rotation(x, int(c))),
    "uniform-noise": (("0.0", "0.03", "0.05", "0.1", "0.2", "0.35", "0.6", "0.9"),
                      lambda x, c, g: uniform_noise(x, float(c), g)),
}


def apply_condition(x: torch.Tensor, dataset: str, condition: str,
                    generator: torch.Generator | None = None) -> torch.Tensor:
    """Images ``x`` (N, 3, H, W) in [0, 1] as in ``dataset`` at ``condition`` (e.g. ``contrast``, ``c05``)."""
    if dataset not in GENERATED:
        raise unknown_name("generated model-vs-human data set", dataset, GENERATED,
                           hint="power-equalisation, false-colour and the Eidolon sets are read from the released "
                                "files (root=DIR)")
    conditions, make = GENERATED[dataset]
    if condition not in conditions:
        raise RobustvitError(f"{dataset} has no condition {condition!r}; its conditions: {', '.join(conditions)}")
    g = generator if generator is not None else torch.Generator(device=x.device).manual_seed(0)
    return make(x, condition, g).contiguous()
