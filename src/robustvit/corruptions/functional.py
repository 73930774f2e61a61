"""The 19 common corruptions of Hendrycks & Dietterich 2019 (arXiv:1903.12261), batched.

Each function takes images ``x`` (N, 3, H, W) in [0, 1], the :class:`CorruptionParams` of one severity
(already scaled to the image size) and a ``torch.Generator``; it returns images of the same shape in [0, 1].
Random parameters are drawn for the whole batch from the generator first, then applied — so a call can be
replayed exactly with the same seed. Use :func:`robustvit.corruptions.corrupt`, which checks the inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

import torch

from robustvit.corruptions.color import rgb_to_gray
from robustvit.corruptions.filters import defocus, gaussian_blur, gaussian_filter, next_power_of_2
from robustvit.corruptions.fractal import plasma_fractal
from robustvit.corruptions.frost import frost_texture
from robustvit.corruptions.geometry import clipped_zoom, motion_blur, warp_bilinear
from robustvit.corruptions.glass import glass_shuffle
from robustvit.corruptions.jpeg import jpeg_roundtrip
from robustvit.corruptions.params import CorruptionParams, zoom_factors
from robustvit.corruptions.sampling import poisson, rand, randn
from robustvit.corruptions.spatter import mud_layer, water_layer

#: (images, parameters, generator) → corrupted images, *not yet clamped* to [0, 1] unless the name is in
#: :data:`IN_RANGE`: :func:`robustvit.corruptions.corrupt` clamps once, in place
CorruptionFn = Callable[[torch.Tensor, CorruptionParams, torch.Generator], torch.Tensor]


# ---------------------------------------------------------------- random draws (on the generator's device)
def _uniform_angles(n: int, lo: float, hi: float, g: torch.Generator) -> torch.Tensor:
    u = torch.rand((n,), generator=g, device=g.device, dtype=torch.float64).cpu()
    return lo + (hi - lo) * u


# ---------------------------------------------------------------- noise
def gaussian_noise(x: torch.Tensor, p: CorruptionParams, g: torch.Generator) -> torch.Tensor:
    """x + N(0, c²), independently per pixel and channel (in place on the draw: no other full-size tensor)."""
    return randn(tuple(x.shape), g, x).mul_(p.c).add_(x).clamp_(0, 1)


def shot_noise(x: torch.Tensor, p: CorruptionParams, g: torch.Generator) -> torch.Tensor:
    """Poisson(x·c)/c (photon noise)."""
    lam = (x * p.c).to(g.device)
    return poisson(lam, g).to(x.device, x.dtype).div_(p.c).clamp_(0, 1)


def impulse_noise(x: torch.Tensor, p: CorruptionParams, g: torch.Generator) -> torch.Tensor:
    """Salt and pepper: each value flipped with probability c, to 1 or 0 with probability ½ each."""
    u = rand((2, *x.shape), g, x)
    flipped = u[0] < p.c
    salt = u[1] < 0.5
    return torch.where(flipped, salt, x, out=torch.empty_like(x))


def speckle_noise(x: torch.Tensor, p: CorruptionParams, g: torch.Generator) -> torch.Tensor:
    """x + x·N(0, c²) (in place on the draw)."""
    return randn(tuple(x.shape), g, x).mul_(x).mul_(p.c).add_(x).clamp_(0, 1)


# ---------------------------------------------------------------- blur
def defocus_blur(x: torch.Tensor, p: CorruptionParams, g: torch.Generator) -> torch.Tensor:
    """Filter with an anti-aliased disk of the given radius (border reflect-101)."""
    return defocus(x, p.radius, p.alias)


def glass_blur(x: torch.Tensor, p: CorruptionParams, g: torch.Generator) -> torch.Tensor:
    """Gaussian blur → uint8 → local pixel walk (``iters`` passes, distance ``dist``) → Gaussian blur."""
    y = torch.floor(gaussian_blur(x, p.sigma) * 255 + 1e-4)
    y = glass_shuffle(y, max(1, int(round(p.dist))), int(p.iters), g)
    return gaussian_blur(y / 255, p.sigma)


def motion_blur_corruption(x: torch.Tensor, p: CorruptionParams, g: torch.Generator) -> torch.Tensor:
    """One-sided Gaussian motion blur along a random angle θ ~ U(−45°, 45°) per image."""
    angle = _uniform_angles(x.shape[0], -45.0, 45.0, g)
    return motion_blur(x, p.radius, p.sigma, angle)


def zoom_blur(x: torch.Tensor, p: CorruptionParams, g: torch.Generator) -> torch.Tensor:
    """Mean of x and its centre zooms by each factor of ``arange(start, stop, step)``."""
    factors = zoom_factors(p.start, p.stop, p.step)
    out = torch.empty_like(x).copy_(x)
    for z in factors:
        out += clipped_zoom(x, z)
    return out.div_(len(factors) + 1)


def gaussian_blur_corruption(x: torch.Tensor, p: CorruptionParams, g: torch.Generator) -> torch.Tensor:
    """Gaussian blur with σ pixels (mode nearest, truncate 4)."""
    return gaussian_blur(x, p.sigma)


# ---------------------------------------------------------------- weather
def snow_layer(n: int, height: int, width: int, p: CorruptionParams, g: torch.Generator,
               like: torch.Tensor) -> torch.Tensor:
    """The snow flakes (N, 1, H, W): N(mean, std) → zoom → threshold → motion blur at U(−135°, −45°) → 8 bit."""
    layer = randn((n, 1, height, width), g, like) * p.std + p.mean
    layer = clipped_zoom(layer, max(1.0, p.zoom))
    layer = torch.where(layer < p.threshold, torch.zeros_like(layer), layer).clamp(0, 1)
    angle = _uniform_angles(n, -135.0, -45.0, g)
    layer = motion_blur(layer, p.radius, p.sigma, angle)
    return torch.round(layer * 255) / 255


def snow(x: torch.Tensor, p: CorruptionParams, g: torch.Generator) -> torch.Tensor:
    """Snow: flakes plus their 180° rotation over a whitened (blend ``blend``) image."""
    n, _, h, w = x.shape
    layer = snow_layer(n, h, w, p, g, x)
    bright = torch.maximum(x, rgb_to_gray(x) * 1.5 + 0.5).mul_(1 - p.blend)
    y = torch.mul(x, p.blend, out=torch.empty_like(x)).add_(bright)     # in place: one full-size output
    return y.add_(layer).add_(layer.flip(-2, -1))


def frost(x: torch.Tensor, p: CorruptionParams, g: torch.Generator) -> torch.Tensor:
    """a·x + b·frost, with a procedural frost texture (see :mod:`robustvit.corruptions.frost`)."""
    n, _, h, w = x.shape
    tex = frost_texture(n, h, w, g, scale=p.crystal_size, device=x.device, dtype=x.dtype).mul_(p.frost_weight)
    return torch.mul(x, p.image_weight, out=torch.empty_like(x)).add_(tex)


def fog(x: torch.Tensor, p: CorruptionParams, g: torch.Generator) -> torch.Tensor:
    """x + c·plasma (same on all channels), rescaled by max(x)/(max(x) + c)."""
    n, _, h, w = x.shape
    size = next_power_of_2(max(h, w))
    plasma = plasma_fractal(n, size, p.decay, g, device=x.device, dtype=x.dtype)[:, None, :h, :w]
    peak = x.amax(dim=(1, 2, 3), keepdim=True)
    return (x + p.strength * plasma) * peak / (peak + p.strength)


def brightness(x: torch.Tensor, p: CorruptionParams, g: torch.Generator) -> torch.Tensor:
    """HSV value V ← clip(V + c), hue and saturation kept (scikit-image HSV conventions).

    With H and S fixed, RGB is proportional to V, so this is x·V'/V (and V' grey where V = 0).
    """
    v = x.amax(1, keepdim=True)
    v2 = (v + p.c).clamp(0, 1)
    ratio = v2 / torch.where(v > 0, v, torch.ones_like(v))
    return torch.where(v > 0, x * ratio, v2.expand_as(x))


# ---------------------------------------------------------------- digital
def contrast(x: torch.Tensor, p: CorruptionParams, g: torch.Generator) -> torch.Tensor:
    """(x − μ)·c + μ with μ the per-image, per-channel mean."""
    mean = x.mean(dim=(2, 3), keepdim=True)
    return torch.sub(x, mean, out=torch.empty_like(x)).mul_(p.c).add_(mean)


def _affine_grid(n: int, h: int, w: int, jitter: float, g: torch.Generator,
                 like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Source coordinates of a random affine map fixing three points up to U(−jitter, jitter) (OpenCV style)."""
    cy, cx = h // 2, w // 2
    s = min(h, w) // 3
    src = torch.tensor([[cx + s, cy + s], [cx + s, cy - s], [cx - s, cy - s]], dtype=torch.float64)
    u = torch.rand((n, 3, 2), generator=g, device=g.device, dtype=torch.float64).cpu()
    dst = src + (2 * u - 1) * jitter
    a = torch.cat((src, torch.ones(3, 1, dtype=torch.float64)), 1)            # (3, 3)
    m = torch.linalg.solve(a, dst).transpose(1, 2)                             # (n, 2, 3): dst = M·[src; 1]
    full = torch.cat((m, torch.tensor([0., 0., 1.], dtype=torch.float64).expand(n, 1, 3)), 1)
    inv = torch.linalg.inv(full)[:, :2].to(device=like.device, dtype=torch.float32)
    ys, xs = torch.meshgrid(torch.arange(h, device=like.device, dtype=torch.float32),
                            torch.arange(w, device=like.device, dtype=torch.float32), indexing="ij")
    sx = inv[:, 0, 0, None, None] * xs + inv[:, 0, 1, None, None] * ys + inv[:, 0, 2, None, None]
    sy = inv[:, 1, 0, None, None] * xs + inv[:, 1, 1, None, None] * ys + inv[:, 1, 2, None, None]
    return sy, sx


def elastic_transform(x: torch.Tensor, p: CorruptionParams, g: torch.Generator) -> torch.Tensor:
    """Random affine warp (reflect-101), then a smooth random displacement field (α, σ; scipy reflect)."""
    n, _, h, w = x.shape
    sy, sx = _affine_grid(n, h, w, p.affine, g, x)
    y = warp_bilinear(x, sy, sx, "mirror")
    field = torch.rand((n, 2, h, w), generator=g, device=g.device, dtype=torch.float64).to(x.device) * 2 - 1
    field = gaussian_filter(field, p.sigma, truncate=3.0, mode="reflect") * p.alpha
    field = field.to(torch.float32)
    ys, xs = torch.meshgrid(torch.arange(h, device=x.device, dtype=torch.float32),
                            torch.arange(w, device=x.device, dtype=torch.float32), indexing="ij")
    y = warp_bilinear(y, ys + field[:, 1], xs + field[:, 0], "reflect")
    return y.to(x.dtype)


@lru_cache(maxsize=64)
def _pil_box_members(n_in: int, n_out: int) -> torch.Tensor:
    """PIL ``resize(..., BOX)`` when downscaling, as a 0/1 matrix (n_out, n_in): output ``o`` averages the
    input pixels whose centres fall in its box. Computed with PIL's own double arithmetic (tie-breaking
    included), which matches PIL's weights exactly (checked over all sizes up to 80, and 224, 256, 299)."""
    scale = n_in / n_out
    support, ss = 0.5 * max(scale, 1.0), 1.0 / max(scale, 1.0)
    m = torch.zeros(n_out, n_in)
    for o in range(n_out):
        centre = (o + 0.5) * scale
        lo = max(int(centre - support + 0.5), 0)
        hi = min(int(centre + support + 0.5), n_in)
        for j in range(lo, hi):
            if -0.5 < (j - centre + 0.5) * ss <= 0.5:
                m[o, j] = 1.0
    return m


def pixelate(x: torch.Tensor, p: CorruptionParams, g: torch.Generator) -> torch.Tensor:
    """Downsample to ``int(side·c)`` with PIL's BOX filter, back up with nearest neighbour.

    Rows, then columns, are summed into their boxes (:func:`_box_sum`); the upsampling is one gather into
    a recycled output buffer. No full-size temporaries: this corruption is memory-bound.
    """
    n, c, h, w = x.shape
    sh, sw = max(1, int(h * p.c)), max(1, int(w * p.c))
    rows, cols = _pil_box_members(h, sh), _pil_box_members(w, sw)
    small = _box_sum(_box_sum(x, 2, rows), 3, cols)
    counts = rows.sum(1)[:, None] * cols.sum(1)[None, :]
    small.div_(counts.clamp_min(1).to(device=x.device, dtype=x.dtype)).clamp_(0, 1)     # the engine's clamp, small
    up = (_nearest_index(sh, h)[:, None] * sw + _nearest_index(sw, w)[None, :]).view(-1).to(x.device)
    out = torch.empty_like(x)
    torch.index_select(small.view(n * c, sh * sw), 1, up, out=out.view(n * c, h * w))   # one gather
    return out


def _box_sum(x: torch.Tensor, dim: int, members: torch.Tensor) -> torch.Tensor:
    """Sum ``x`` (…, H, W) along ``dim`` (2 or 3) into boxes given as a 0/1 matrix (n_out, n_in): an
    ``index_add_`` when each input belongs to one box (4× faster than the matrix product), else the product."""
    if bool((members.sum(0) == 1).all()):
        shape = list(x.shape)
        shape[dim] = members.shape[0]
        return x.new_zeros(shape).index_add_(dim, members.argmax(0).to(x.device), x)
    m = members.to(device=x.device, dtype=x.dtype)
    return torch.matmul(m, x) if dim == 2 else torch.matmul(x, m.T)


def _nearest_index(n_in: int, n_out: int) -> torch.Tensor:
    """PIL's BOX filter when upscaling = nearest neighbour at floor((o + ½)·n_in/n_out), in double precision
    (``F.interpolate(mode="nearest-exact")`` computes it in float32 and breaks some ties the other way)."""
    scale = n_in / n_out
    return torch.clamp(((torch.arange(n_out, dtype=torch.float64) + 0.5) * scale).floor().long(), max=n_in - 1)


def jpeg_compression(x: torch.Tensor, p: CorruptionParams, g: torch.Generator) -> torch.Tensor:
    """JPEG encode at ``quality`` and decode (uint8 round trip)."""
    return jpeg_roundtrip(x, int(p.quality))


# ---------------------------------------------------------------- extra
def spatter(x: torch.Tensor, p: CorruptionParams, g: torch.Generator) -> torch.Tensor:
    """Water drops (severities 1–3 in the table: ``mud`` = 0) or mud splashes (``mud`` = 1)."""
    n, _, h, w = x.shape
    liquid = randn((n, 1, h, w), g, x) * p.std + p.mean
    liquid = gaussian_blur(liquid, p.sigma)
    liquid = torch.where(liquid < p.threshold, torch.zeros_like(liquid), liquid)
    if p.mud:
        m = mud_layer(liquid, p.threshold, p.intensity)
        colour = torch.tensor([63, 42, 20], device=x.device, dtype=x.dtype).view(1, 3, 1, 1) / 255
        return x * (1 - m) + colour * m
    m = water_layer(liquid) * p.intensity
    colour = torch.tensor([175, 238, 238], device=x.device, dtype=x.dtype).view(1, 3, 1, 1) / 255
    return x + m * colour


def saturate(x: torch.Tensor, p: CorruptionParams, g: torch.Generator) -> torch.Tensor:
    """HSV saturation S ← clip(S·factor + shift), hue and value kept (scikit-image HSV conventions).

    Every channel is V·(1 − S·w) with w = (V − x)/(V − min x) fixed by the hue, so the new image is
    V − S'·V·w. Grey pixels have hue 0 (red) in scikit-image, i.e. w = (0, 1, 1).
    """
    v = x.amax(1, keepdim=True)
    delta = v - x.amin(1, keepdim=True)
    s = torch.where(v > 0, delta / torch.where(v > 0, v, torch.ones_like(v)), torch.zeros_like(v))
    s2 = (s * p.factor + p.shift).clamp(0, 1)
    grey_w = torch.tensor([0.0, 1.0, 1.0], device=x.device, dtype=x.dtype).view(1, 3, 1, 1)
    w = torch.where(delta > 0, (v - x) / torch.where(delta > 0, delta, torch.ones_like(delta)), grey_w)
    return v - s2 * v * w


#: name → (function, uses randomness)
FUNCTIONS: dict[str, tuple[CorruptionFn, bool]] = {
    "gaussian_noise": (gaussian_noise, True),
    "shot_noise": (shot_noise, True),
    "impulse_noise": (impulse_noise, True),
    "defocus_blur": (defocus_blur, False),
    "glass_blur": (glass_blur, True),
    "motion_blur": (motion_blur_corruption, True),
    "zoom_blur": (zoom_blur, False),
    "snow": (snow, True),
    "frost": (frost, True),
    "fog": (fog, True),
    "brightness": (brightness, False),
    "contrast": (contrast, False),
    "elastic_transform": (elastic_transform, True),
    "pixelate": (pixelate, False),
    "jpeg_compression": (jpeg_compression, False),
    "speckle_noise": (speckle_noise, True),
    "gaussian_blur": (gaussian_blur_corruption, False),
    "spatter": (spatter, True),
    "saturate": (saturate, False),
}

#: corruptions whose function returns values in [0, 1] (the engine skips its final clamp for them)
IN_RANGE = frozenset({"gaussian_noise", "shot_noise", "speckle_noise", "pixelate", "jpeg_compression"})

