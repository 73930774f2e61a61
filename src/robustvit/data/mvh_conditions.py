"""model-vs-human's parametric image manipulations, generated on the fly on a batch (N, 3, H, W) in [0, 1].

Geirhos et al., "Generalisation in humans and deep neural networks", NeurIPS 2018 (arXiv:1808.08750), made these
data sets with ``code/image_manipulation.py`` of rgeirhos/generalisation-humans-DNNs, which each function follows;
model-vs-human (arXiv:2106.07411) ships them at the conditions of :data:`GENERATED`. Greyscale is scikit-image's
``rgb2gray``; low-/high-pass filters are scipy's ``gaussian_filter(mode='constant', cval=0.4423)`` (the mean grey),
widths in pixels of 224 px images, scaled with the side. Power equalisation and false colour need the reference's
``code/mean_power_spectrum_grey.npy`` (mean amplitude spectrum of its 224 px grey images) and
``code/x_gamma_function.npy`` (the lab monitor's gamma, 256 values), not redistributed: :func:`load_tables` reads
the user's copy. Eidolon I–III: :func:`eidolon`, after the reference's ``eidolon_partially_coherent_disarray`` (its
``wrapper.py`` around the Eidolon toolbox of Koenderink et al., "Eidolons: Novel stimuli for vision research",
JoV 2017).

>>> x = torch.rand(2, 3, 32, 32)
>>> bool(torch.allclose(apply_condition(x, "contrast", "c100"), greyscale(x), atol=1e-6))
True
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from robustvit.corruptions.filters import gaussian_kernel1d
from robustvit.data.modelvshuman import DATASETS
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
    """Greyscale minus its Gaussian low-pass, shifted to mean 0.4423, clipped (``high_pass_filter``); ∞: grey."""
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


#: The reference's table files (rgeirhos/generalisation-humans-DNNs, ``code/``).
SPECTRUM_FILE, GAMMA_FILE = "mean_power_spectrum_grey.npy", "x_gamma_function.npy"


@dataclass(frozen=True)
class Tables:
    """The reference's mean amplitude spectrum (224, 224), centred, and monitor gamma table (256,), float64."""

    spectrum: torch.Tensor
    gamma: torch.Tensor


def load_tables(folder: str | Path) -> Tables:
    """The reference's two tables from ``folder`` (its ``code/``); one-line errors for a missing or malformed file."""
    folder = Path(folder).expanduser()
    arrays = []
    for name, ndim in ((SPECTRUM_FILE, 2), (GAMMA_FILE, 1)):
        f = folder / name
        if not f.is_file():
            raise RobustvitError(f"{f} is missing; give the code/ folder of rgeirhos/generalisation-humans-DNNs, "
                                 f"which holds {SPECTRUM_FILE} and {GAMMA_FILE}")
        try:
            a = np.asarray(np.load(f), dtype=np.float64)
        except (OSError, ValueError) as e:
            raise RobustvitError(f"cannot read {f} as a .npy array ({e})") from None
        a = a.reshape(-1) if ndim == 1 else a
        if a.ndim != ndim or (ndim == 1 and (len(a) != 256 or np.any(np.diff(a) <= 0))):
            raise RobustvitError(f"{f} holds {a.shape}; expected " + ("a 2-D amplitude spectrum" if ndim == 2 else
                                 "256 increasing monitor outputs"))
        arrays.append(torch.from_numpy(a.copy()))
    return Tables(*arrays)


def power_equalisation(x: torch.Tensor, spectrum: torch.Tensor) -> torch.Tensor:
    """Greyscale; the centred spectrum's amplitudes replaced by ``spectrum`` (H, W), its phases kept; the real
    part, clipped (``equalise_power_spectrum``)."""
    h, w = x.shape[-2:]
    if tuple(spectrum.shape) != (h, w):
        raise RobustvitError(f"power-equalisation: the mean spectrum is {tuple(spectrum.shape)} but the images are "
                             f"{h} × {w}; run at {spectrum.shape[-1]} px (the reference's images)")
    g = greyscale(x)[:, :1].double()
    phase = torch.fft.fftshift(torch.fft.fft2(g), dim=(-2, -1)).angle()
    f = torch.polar(spectrum.to(device=x.device, dtype=torch.float64).expand_as(phase), phase)
    out = torch.fft.ifft2(torch.fft.ifftshift(f, dim=(-2, -1))).real
    return out.clamp(0, 1).to(x.dtype).expand(-1, 3, -1, -1)


#: Cone sensitivities of the monitor's primaries (rows L, M, S; columns R, G, B), the cone activity of its white
#: point and the cone-contrast → DKL matrix (Brainard 1996), from the reference's ``get_opponent_colours``.
CONES = ((0.1619982647, 0.208049264, 0.0389347448), (0.0330275785, 0.2496504557, 0.0618343518),
         (0.0015524055, 0.0198861001, 0.1890224274))
CONES_WHITE = (0.20449114, 0.17225619, 0.10523047)
DKL = ((9.27590805, 9.27590805, 0.0), (7.86421647, -9.33587662, 0.0), (-3.39709047, -3.39709047, 12.16230246))


def opponent_colours(x: torch.Tensor) -> torch.Tensor:
    """Linear RGB (N, 3, H, W) → cone activities → DKL (luminance, L−M, S−(L+M)) around the white point; both
    chromatic axes negated; back to RGB (unclipped)."""
    m = torch.tensor(CONES, dtype=torch.float64, device=x.device)
    n = torch.tensor(DKL, dtype=torch.float64, device=x.device)
    flip = torch.diag(torch.tensor([1.0, -1.0, -1.0], dtype=torch.float64, device=x.device))
    white = torch.tensor(CONES_WHITE, dtype=torch.float64, device=x.device).view(1, 3, 1, 1)
    delta = torch.einsum("ij,njhw->nihw", m, x.double()) - white
    cones = torch.einsum("ij,njhw->nihw", torch.linalg.inv(n) @ flip @ n, delta) + white
    return torch.einsum("ij,njhw->nihw", torch.linalg.inv(m), cones)


def false_colour(x: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
    """Each value taken to 8 bits and through the monitor's gamma table, opponent colours
    (:func:`opponent_colours`), clipped, and back to the nearest of the 256 levels (``false_colour``)."""
    table = gamma.to(device=x.device, dtype=torch.float64)
    linear = table[(x.double() * 255).round().clamp(0, 255).long()]
    y = opponent_colours(linear).clamp(0, 1).contiguous()
    hi = torch.searchsorted(table, y).clamp(1, 255)       # table[hi−1] < y ≤ table[hi]
    lo = hi - 1
    nearest = torch.where((y - table[lo]) <= (table[hi] - y), lo, hi)   # ties: the lower level, as argmin
    return (nearest.double() / 255).to(x.dtype)


#: The reference's Eidolon picture side (``wrapper.SZ``): images are resized to it, as its ``Picture`` does.
EIDOLON_SIDE = 256


@lru_cache(maxsize=64)
def _flat_gaussian_fft(h: int, w: int, sigma: float, device: str, dtype: torch.dtype) -> torch.Tensor:
    """rfft of the toolbox's (h, w) Gaussian kernel (``Convolution.Kernel``, orders 0: wrapped offsets, each axis
    exp(−v²/2σ²)/(√(2π)σ)), flattened row-major."""
    def axis(n: int) -> torch.Tensor:
        v = torch.cat([torch.arange(n // 2 + 1), torch.arange(n // 2 - n + 1, 0)]).double()
        return torch.exp(-v ** 2 / (2 * sigma ** 2)) / (math.sqrt(2 * math.pi) * sigma)
    k = axis(h)[:, None] * axis(w)[None, :]
    return torch.fft.rfft(k.reshape(-1)).to(device=device, dtype=torch.complex128 if dtype == torch.float64
                                              else torch.complex64)


def _blur(p: torch.Tensor, sigma: float) -> torch.Tensor:
    """The toolbox's ``Convolution.Convolve``: a 1-D circular convolution of the row-major flattened planes (…, h, w)
    with the flattened kernel (on a 2-D image, offsets left of a pixel land one row lower: kept, as the toolbox)."""
    h, w = p.shape[-2:]
    k = _flat_gaussian_fft(h, w, float(sigma), str(p.device), p.dtype)
    return torch.fft.irfft(torch.fft.rfft(p.flatten(-2)) * k, n=h * w).view(p.shape)


def _noise_plane(z: torch.Tensor, sigma: float) -> torch.Tensor:
    """``BlurredRandomGaussianDataPlane`` from white noise z (…, h, w): scaled to max |z| = 127.5, clipped to ±127,
    blurred by σ, minus mean/std (the toolbox's ``c - m/v``, kept as written)."""
    z = (127.5 * z / z.abs().amax(dim=(-2, -1), keepdim=True)).clamp(-127, 127)
    c = _blur(z, sigma)
    return c - c.mean(dim=(-2, -1), keepdim=True) / c.std(dim=(-2, -1), correction=0, keepdim=True)


def _disarray(p: torch.Tensor, dx: torch.Tensor, dy: torch.Tensor, reach: float) -> torch.Tensor:
    """``DataPlaneDisarray``: each pixel of p (N, h, w) read at (row + reach·dx, col + reach·dy), clipped to the
    plane and truncated to whole pixels."""
    n, h, w = p.shape
    rows = torch.arange(h, device=p.device, dtype=p.dtype).view(1, h, 1)
    cols = torch.arange(w, device=p.device, dtype=p.dtype).view(1, 1, w)
    r = (dx * reach + rows).clamp(0, h - 1).long()
    c = (dy * reach + cols).clamp(0, w - 1).long()
    return p.flatten(1).gather(1, (r * w + c).flatten(1)).view(n, h, w)


def _pow2_ceil(n: float) -> int:
    return 1 if n < 1 else 2 ** math.ceil(math.log2(n))


Draw = Callable[[str, int], torch.Tensor]


def eidolon(x: torch.Tensor, reach: float, coherence: float, grain: float, generator: torch.Generator,
            side: int = EIDOLON_SIDE, draw: Draw | None = None) -> torch.Tensor:
    """Eidolon partially coherent disarray (Koenderink et al., JoV 2017) of images x (N, 3, H, W) in [0, 1], as
    rgeirhos/generalisation-humans-DNNs' ``eidolon_partially_coherent_disarray(grey, reach, coherence, grain)``
    made Eidolon I–III (coherence 1.0, 0.3, 0.0; grain 10; reach 2⁰…2⁷).

    The reference, step by step: the greyscale image taken to 8 bits (truncated), resized to ``side`` px on its
    longer side (here antialiased bicubic, the reference's PIL Lanczos; not resized at that side); mirrored into a
    power-of-two plane of 1.5× its size; a Gaussian scale space of σₖ = 2^(k/2)/√2, k < ⌈2 log₂(side/4)⌉, cut into
    difference-of-Gaussian slices (the last one the coarsest blur; their sum is the σ₀ blur); slice k displaced
    by reach × (coherence · incoherent field k + coherent field k) in rows and in columns, where an incoherent
    field is white noise blurred by ``grain`` and the coherent field k is the sum over levels j ≥ k of white noise
    blurred by σⱼ times σⱼ/(side/4); the displaced slices summed, cropped, clipped and truncated to 8 bits; back at
    H × W (bicubic) when resized. ``draw(kind, k)`` (kind ``coherent``/``incoherent``) may supply the white noise
    (N, 2, h, w) of level k; by default it comes from ``generator``. Output: greyscale in all three channels.
    """
    n, _, h0, w0 = x.shape
    dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    g = (greyscale(x.to(dtype))[:, :1] * 255).floor().clamp(0, 255)
    s = side / max(h0, w0)
    h, w = (h0, w0) if s == 1 else (int(round(h0 * s)), int(round(w0 * s)))
    if (h, w) != (h0, w0):
        g = F.interpolate(g, size=(h, w), mode="bicubic", align_corners=False, antialias=True).round().clamp(0, 255)
    hh, ww = _pow2_ceil(1.5 * h), _pow2_ceil(1.5 * w)
    dh, dw = (hh - h) // 2, (ww - w) // 2
    ri = torch.arange(-dh, hh - dh, device=x.device)
    ci = torch.arange(-dw, ww - dw, device=x.device)
    ri = torch.where(ri < 0, -ri - 1, torch.where(ri >= h, 2 * h - 1 - ri, ri))       # mirrored, edge repeated
    ci = torch.where(ci < 0, -ci - 1, torch.where(ci >= w, 2 * w - 1 - ci, ci))
    fat = g[:, 0][:, ri][:, :, ci]
    max_sigma = side / 4
    sigmas = [2 ** (k / 2) / math.sqrt(2) for k in range(math.ceil(2 * math.log2(max_sigma)))]
    if draw is None:
        def draw(kind: str, k: int) -> torch.Tensor:
            return torch.randn((n, 2, hh, ww), generator=generator, device=generator.device,
                               dtype=dtype).to(x.device)
    scales = [_blur(fat, sg) for sg in sigmas]
    out = torch.zeros_like(fat)
    coherent = torch.zeros((n, 2, hh, ww), device=x.device, dtype=dtype)
    for k in reversed(range(len(sigmas))):                          # coarsest first: the coherent sums grow
        coherent = coherent + _noise_plane(draw("coherent", k), sigmas[k]) * (sigmas[k] / max_sigma)
        d = coherent + coherence * _noise_plane(draw("incoherent", k), grain) if coherence else coherent
        dog = scales[k] - scales[k + 1] if k + 1 < len(sigmas) else scales[k]
        out = out + _disarray(dog, d[:, 0], d[:, 1], reach)
    y = out[:, None, dh:dh + h, dw:dw + w].clamp(0, 255).floor()
    if (h, w) != (h0, w0):
        y = F.interpolate(y, size=(h0, w0), mode="bicubic", align_corners=False, antialias=True).clamp(0, 255)
    return (y / 255).to(x.dtype).expand(-1, 3, -1, -1)


def _eidolon_condition(x: torch.Tensor, c: str, g: torch.Generator) -> torch.Tensor:
    """``reach-coherence×10-grain`` (model-vs-human's folder names, e.g. ``8-3-10``)."""
    reach, coh, grain = c.split("-")
    return eidolon(x, float(reach), int(coh) / 10, float(grain), g, side=EIDOLON_SIDE)


def _needs(tables: Tables | None, dataset: str) -> Tables:
    """``tables``, or a one-line error naming the files ``dataset`` needs."""
    if tables is None:
        raise RobustvitError(f"{dataset} needs the reference's tables ({SPECTRUM_FILE}, {GAMMA_FILE}): pass "
                             "tables=DIR (the code/ folder of rgeirhos/generalisation-humans-DNNs)")
    return tables


def _scaled(std: float, x: torch.Tensor) -> float:
    """A filter width of the reference's 224 px images at the size of ``x``."""
    return std * min(x.shape[-2:]) / REFERENCE_SIDE


Maker = Callable[[torch.Tensor, str, torch.Generator, "Tables | None"], torch.Tensor]
_MAKERS: dict[str, Maker] = {
    "colour": lambda x, c, g, t: colour(x, c),
    "contrast": lambda x, c, g, t: contrast(x, int(c[1:]) / 100),
    "high-pass": lambda x, c, g, t: high_pass(x, _scaled(float(c), x)),
    "low-pass": lambda x, c, g, t: low_pass(x, _scaled(float(c), x)),
    "phase-scrambling": lambda x, c, g, t: phase_scrambling(x, float(c), g),
    # "0": the greyscale original, as every greyscale set's control; "pow": equalised
    "power-equalisation": lambda x, c, g, t: (greyscale(x) if c == "0" else
                                              power_equalisation(x, _needs(t, "power-equalisation").spectrum)),
    # "True": the image; "False": opponent colours
    "false-colour": lambda x, c, g, t: x if c == "True" else false_colour(x, _needs(t, "false-colour").gamma),
    "rotation": lambda x, c, g, t: rotation(x, int(c)),
    "uniform-noise": lambda x, c, g, t: uniform_noise(x, float(c), g),
    **{f"eidolon{roman}": lambda x, c, g, t: _eidolon_condition(x, c, g) for roman in ("I", "II", "III")},
}
#: The data sets generated on the fly: name → (its conditions in model-vs-human's order, the manipulation).
GENERATED: Mapping[str, tuple[tuple[str, ...], Maker]] = {name: (DATASETS[name], make)
                                                          for name, make in _MAKERS.items()}
#: Generated sets that need the reference's :class:`Tables`.
NEEDS_TABLES = ("power-equalisation", "false-colour")


def apply_condition(x: torch.Tensor, dataset: str, condition: str, generator: torch.Generator | None = None,
                    tables: Tables | None = None) -> torch.Tensor:
    """Images ``x`` (N, 3, H, W) in [0, 1] as in ``dataset`` at ``condition`` (e.g. ``contrast``, ``c05``);
    ``tables`` (:func:`load_tables`) for power-equalisation and false-colour."""
    if dataset not in GENERATED:
        raise unknown_name("generated model-vs-human data set", dataset, GENERATED,
                           hint="sketch, stylized, edge, silhouette and cue-conflict are not generated: read the "
                                 "released files (root=DIR)")
    conditions, make = GENERATED[dataset]
    if condition not in conditions:
        raise RobustvitError(f"{dataset} has no condition {condition!r}; its conditions: {', '.join(conditions)}")
    g = generator if generator is not None else torch.Generator(device=x.device).manual_seed(0)
    return make(x, condition, g, tables).contiguous()
