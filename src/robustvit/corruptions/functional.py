"""The 19 common corruptions of Hendrycks & Dietterich 2019 (arXiv:1903.12261), batched, each registered by
the :func:`~robustvit.corruptions.spec.corruption` decorator on its apply function: its parameter table
(presets ``imagenet``, from ``make_imagenet_c.py`` at 224 px, and ``cifar``, from ``make_cifar_c.py`` at 32 px;
spatial fields scaled by k = image side / preset size, see ``params.py``), its group and its ``sample`` /
``apply`` pair. Use :func:`robustvit.corruptions.corrupt`, which checks the inputs.
"""

from __future__ import annotations

from functools import lru_cache

import torch

from robustvit.corruptions.color import rgb_to_gray
from robustvit.corruptions.filters import defocus, gaussian_blur, gaussian_filter, next_power_of_2
from robustvit.corruptions.fractal import plasma_fractal
from robustvit.corruptions.frost import frost_photo_dir, frost_texture, photo_frost
from robustvit.corruptions.geometry import clipped_zoom, motion_blur, warp_bilinear, zoom_factors
from robustvit.corruptions.glass import glass_offsets, shuffle_with_offsets
from robustvit.corruptions.jpeg import jpeg_roundtrip
from robustvit.corruptions.sampling import poisson, rand, randn
from robustvit.corruptions.spatter import mud_layer, water_layer
from robustvit.corruptions._parallel import empty_output
from robustvit.corruptions.spec import CorruptionParams, Draw, _levels, corruption

Size = tuple[int, int]


def _elastic_rescale(values: dict[str, float], k: float) -> None:
    values["alpha"] *= k      # α ∝ k² (spatial, times k once more): the displacement ∝ α/σ then grows ∝ k


def _spatter_rescale(values: dict[str, float], k: float) -> None:
    if values["mud"]:         # the mud mask's smoothing σ is "intensity" (spatial); the water intensity is not
        values["intensity"] *= k


def _angles(n: int, lo: float, hi: float, g: torch.Generator, like: torch.Tensor) -> torch.Tensor:
    """U(lo, hi) degrees per image, float64 (drawn on the generator's device)."""
    u = torch.rand((n,), generator=g, device=g.device, dtype=torch.float64)
    return (lo + (hi - lo) * u).to(like.device)


def _sample_noise(n: int, size: Size, p: CorruptionParams, g: torch.Generator, like: torch.Tensor) -> Draw:
    """One full-size standard-normal field (N, 3, H, W)."""
    return {"noise": randn((n, 3, *size), g, like)}


# ---------------------------------------------------------------- noise
@corruption("gaussian_noise", "noise", ("c",), _levels((.08, .12, .18, .26, .38), (.04, .06, .08, .09, .10)),
            sample=_sample_noise, in_range=True)
def gaussian_noise(x: torch.Tensor, p: CorruptionParams, d: Draw) -> torch.Tensor:
    """x + N(0, c²), independently per pixel and channel."""
    return torch.mul(d["noise"], p.c).add_(x).clamp_(0, 1)


def _sample_shot(n: int, size: Size, p: CorruptionParams, g: torch.Generator, like: torch.Tensor) -> Draw:
    # Poisson counts depend on the image, so the draw is the seed of the Poisson sampler
    return {"seed": torch.randint(0, 2**62, (1,), generator=g, device=g.device)}


@corruption("shot_noise", "noise", ("c",), _levels((60, 25, 12, 5, 3), (500, 250, 100, 75, 50)),
            sample=_sample_shot, in_range=True)
def shot_noise(x: torch.Tensor, p: CorruptionParams, d: Draw) -> torch.Tensor:
    """Poisson(x·c)/c (photon noise); the counts come from a sampler seeded with the draw's ``seed``."""
    g = torch.Generator(device=x.device).manual_seed(int(d["seed"].item()))
    return poisson(x * p.c, g).to(x.dtype).div_(p.c).clamp_(0, 1)


def _sample_impulse(n: int, size: Size, p: CorruptionParams, g: torch.Generator, like: torch.Tensor) -> Draw:
    return {"uniform": rand((2, n, 3, *size), g, like)}


@corruption("impulse_noise", "noise", ("c",), _levels((.03, .06, .09, .17, .27), (.01, .02, .03, .05, .07)),
            sample=_sample_impulse)
def impulse_noise(x: torch.Tensor, p: CorruptionParams, d: Draw) -> torch.Tensor:
    """Salt and pepper: each value flipped with probability c (``uniform[0]`` < c), to 1 or 0 with
    probability ½ each (``uniform[1]`` < ½)."""
    return torch.where(d["uniform"][0] < p.c, d["uniform"][1] < 0.5, x, out=torch.empty_like(x))


@corruption("speckle_noise", "extra", ("c",), _levels((.15, .2, .35, .45, .6), (.06, .1, .12, .16, .2)),
            sample=_sample_noise, in_range=True)
def speckle_noise(x: torch.Tensor, p: CorruptionParams, d: Draw) -> torch.Tensor:
    """x + x·N(0, c²)."""
    return torch.mul(d["noise"], x).mul_(p.c).add_(x).clamp_(0, 1)


# ---------------------------------------------------------------- blur
@corruption("defocus_blur", "blur", ("radius", "alias"), {
    "imagenet": [(3, .1), (4, .5), (6, .5), (8, .5), (10, .5)],
    "cifar": [(.3, .4), (.4, .5), (.5, .6), (1, .2), (1.5, .1)]},
    spatial=("radius", "alias"))
def defocus_blur(x: torch.Tensor, p: CorruptionParams, d: Draw) -> torch.Tensor:
    """Filter with an anti-aliased disk of the given radius (border reflect-101)."""
    return defocus(x, p.radius, p.alias)


def _sample_glass(n: int, size: Size, p: CorruptionParams, g: torch.Generator, like: torch.Tensor) -> Draw:
    return {"offsets": glass_offsets(n, *size, max(1, int(round(p.dist))), int(p.iters), g, like.device)}


@corruption("glass_blur", "blur", ("sigma", "dist", "iters"), {
    "imagenet": [(.7, 1, 2), (.9, 2, 1), (1, 2, 3), (1.1, 3, 2), (1.5, 4, 2)],
    "cifar": [(.05, 1, 1), (.25, 1, 1), (.4, 1, 1), (.25, 1, 2), (.4, 1, 2)]},
    sample=_sample_glass, spatial=("sigma", "dist"))
def glass_blur(x: torch.Tensor, p: CorruptionParams, d: Draw) -> torch.Tensor:
    """Gaussian blur → uint8 → local pixel walk (``iters`` passes of ``offsets``, ``dist``) → Gaussian blur."""
    y = torch.floor(gaussian_blur(x, p.sigma) * 255 + 1e-4)
    y = shuffle_with_offsets(y, max(1, int(round(p.dist))), d["offsets"])
    return gaussian_blur(y / 255, p.sigma)


def _sample_motion(n: int, size: Size, p: CorruptionParams, g: torch.Generator, like: torch.Tensor) -> Draw:
    return {"angle": _angles(n, -45.0, 45.0, g, like)}


@corruption("motion_blur", "blur", ("radius", "sigma"), {
    "imagenet": [(10, 3), (15, 5), (15, 8), (15, 12), (20, 15)],
    "cifar": [(6, 1), (6, 1.5), (6, 2), (8, 2), (9, 2.5)]},
    sample=_sample_motion, spatial=("radius", "sigma"))
def motion_blur_corruption(x: torch.Tensor, p: CorruptionParams, d: Draw) -> torch.Tensor:
    """One-sided Gaussian motion blur along a random angle θ ~ U(−45°, 45°) per image."""
    return motion_blur(x, p.radius, p.sigma, d["angle"])


# zoom factors: numpy.arange(start, stop, step) (stop exclusive)
@corruption("zoom_blur", "blur", ("start", "stop", "step"), {
    "imagenet": [(1, 1.11, .01), (1, 1.16, .01), (1, 1.21, .02), (1, 1.26, .02), (1, 1.31, .03)],
    "cifar": [(1, 1.06, .01), (1, 1.11, .01), (1, 1.16, .01), (1, 1.21, .01), (1, 1.26, .01)]})
def zoom_blur(x: torch.Tensor, p: CorruptionParams, d: Draw) -> torch.Tensor:
    """Mean of x and its centre zooms by each factor of ``arange(start, stop, step)``."""
    factors = zoom_factors(p.start, p.stop, p.step)
    out = torch.empty_like(x).copy_(x)
    for z in factors:
        out += clipped_zoom(x, z)
    return out.div_(len(factors) + 1)


@corruption("gaussian_blur", "extra", ("sigma",), _levels((1, 2, 3, 4, 6), (.4, .6, .7, .8, 1)), spatial=("sigma",))
def gaussian_blur_corruption(x: torch.Tensor, p: CorruptionParams, d: Draw) -> torch.Tensor:
    """Gaussian blur with σ pixels (mode nearest, truncate 4)."""
    return gaussian_blur(x, p.sigma)


# ---------------------------------------------------------------- weather
def _sample_snow(n: int, size: Size, p: CorruptionParams, g: torch.Generator, like: torch.Tensor) -> Draw:
    flakes = randn((n, 1, *size), g, like)      # drawn before the angles
    return {"flakes": flakes, "angle": _angles(n, -135.0, -45.0, g, like)}


def snow_flakes(p: CorruptionParams, d: Draw) -> torch.Tensor:
    """The snow layer (N, 1, H, W) of a draw: N(mean, std) → zoom → threshold → motion blur at the drawn
    angle (U(−135°, −45°)) → 8 bit."""
    layer = d["flakes"] * p.std + p.mean
    layer = clipped_zoom(layer, max(1.0, p.zoom))
    layer = torch.where(layer < p.threshold, torch.zeros_like(layer), layer).clamp(0, 1)
    layer = motion_blur(layer, p.radius, p.sigma, d["angle"])
    return torch.round(layer * 255) / 255


def snow_layer(n: int, height: int, width: int, p: CorruptionParams, g: torch.Generator,
               like: torch.Tensor) -> torch.Tensor:
    """``n`` snow layers (N, 1, H, W) drawn from ``g`` (see :func:`snow_flakes`)."""
    return snow_flakes(p, _sample_snow(n, (height, width), p, g, like))


@corruption("snow", "weather", ("mean", "std", "zoom", "threshold", "radius", "sigma", "blend"), {
    "imagenet": [(.1, .3, 3, .5, 10, 4, .8), (.2, .3, 2, .5, 12, 4, .7), (.55, .3, 4, .9, 12, 8, .7),
    (.55, .3, 4.5, .85, 12, 8, .65), (.55, .3, 2.5, .85, 12, 12, .55)],
    "cifar": [(.1, .2, 1, .6, 8, 3, .95), (.1, .2, 1, .5, 10, 4, .9), (.15, .3, 1.75, .55, 10, 4, .9),
    (.25, .3, 2.25, .6, 12, 6, .85), (.3, .3, 1.25, .65, 14, 12, .8)]},
    sample=_sample_snow, spatial=("zoom", "radius", "sigma"))
def snow(x: torch.Tensor, p: CorruptionParams, d: Draw) -> torch.Tensor:
    """Snow: flakes plus their 180° rotation over a whitened (blend ``blend``) image."""
    layer = snow_flakes(p, d)
    bright = torch.maximum(x, rgb_to_gray(x) * 1.5 + 0.5).mul_(1 - p.blend)
    y = torch.mul(x, p.blend, out=torch.empty_like(x)).add_(bright)
    return y.add_(layer).add_(layer.flip(-2, -1))


def _sample_frost(n: int, size: Size, p: CorruptionParams, g: torch.Generator, like: torch.Tensor) -> Draw:
    folder = frost_photo_dir()
    if folder is None:
        return {"texture": frost_texture(n, *size, g, scale=p.crystal_size, device=like.device, dtype=like.dtype)}
    draw = photo_frost(n, *size, g, folder, scale=p.crystal_size, zoom=p.photo_zoom)
    return {k: v.to(like.device, like.dtype if k == "texture" else v.dtype) for k, v in draw.items()}


# frost: image weight, texture weight, photo scale / crystal size (the CIFAR script shrinks the photos by 0.2),
# photo zoom (imagecorruptions enlarges every photo by 1.1 after the scale; make_cifar_c.py does not)
@corruption("frost", "weather", ("image_weight", "frost_weight", "crystal_size", "photo_zoom"), {
    "imagenet": [(1, .4, 1, 1.1), (.8, .6, 1, 1.1), (.7, .7, 1, 1.1), (.65, .7, 1, 1.1), (.6, .75, 1, 1.1)],
    "cifar": [(1, .2, .2, 1), (1, .3, .2, 1), (.9, .4, .2, 1), (.85, .4, .2, 1), (.75, .45, .2, 1)]},
    sample=_sample_frost, spatial=("crystal_size",))
def frost(x: torch.Tensor, p: CorruptionParams, d: Draw) -> torch.Tensor:
    """a·x + b·frost: a crop of an ImageNet-C frost photograph, or the procedural texture (see
    :mod:`robustvit.corruptions.frost`)."""
    return torch.mul(x, p.image_weight).add_(d["texture"] * p.frost_weight)


def _sample_fog(n: int, size: Size, p: CorruptionParams, g: torch.Generator, like: torch.Tensor) -> Draw:
    plasma = plasma_fractal(n, next_power_of_2(max(size)), p.decay, g, device=like.device, dtype=like.dtype)
    return {"plasma": plasma[:, None, :size[0], :size[1]]}


@corruption("fog", "weather", ("strength", "decay"), {
    "imagenet": [(1.5, 2), (2., 2), (2.5, 1.7), (2.5, 1.5), (3., 1.4)],
    "cifar": [(.2, 3), (.5, 3), (.75, 2.5), (1, 2), (1.5, 1.75)]},
    sample=_sample_fog)
def fog(x: torch.Tensor, p: CorruptionParams, d: Draw) -> torch.Tensor:
    """x + c·plasma (same on all channels), rescaled by max(x)/(max(x) + c)."""
    peak = x.amax(dim=(1, 2, 3), keepdim=True)
    return (x + p.strength * d["plasma"]) * peak / (peak + p.strength)


@corruption("brightness", "weather", ("c",), _levels((.1, .2, .3, .4, .5), (.05, .1, .15, .2, .3)))
def brightness(x: torch.Tensor, p: CorruptionParams, d: Draw) -> torch.Tensor:
    """HSV value V ← clip(V + c), hue and saturation kept (scikit-image HSV conventions): with H and S fixed,
    RGB ∝ V, so this is x·V'/V (and V' grey where V = 0)."""
    v = x.amax(1, keepdim=True)
    v2 = (v + p.c).clamp(0, 1)
    ratio = v2 / torch.where(v > 0, v, torch.ones_like(v))
    return torch.where(v > 0, x * ratio, v2.expand_as(x))


# ---------------------------------------------------------------- digital
@corruption("contrast", "digital", ("c",), _levels((.4, .3, .2, .1, .05), (.75, .5, .4, .3, .15)))
def contrast(x: torch.Tensor, p: CorruptionParams, d: Draw) -> torch.Tensor:
    """(x − μ)·c + μ with μ the per-image, per-channel mean."""
    mean = x.mean(dim=(2, 3), keepdim=True)
    return torch.sub(x, mean, out=torch.empty_like(x)).mul_(p.c).add_(mean)


def _coords(x: torch.Tensor) -> torch.dtype:
    """float64 sampling coordinates for float64 images, else float32 (float32 coordinates round differently on
    CUDA and on the CPU: a float64 result is then the same on every device)."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _pixel_grid(h: int, w: int, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Row and column coordinates (H, W) of every pixel, in :func:`_coords` dtype on ``x``'s device."""
    return torch.meshgrid(*(torch.arange(k, device=x.device, dtype=_coords(x)) for k in (h, w)), indexing="ij")


def _affine_grid(h: int, w: int, jitter: float, u: torch.Tensor,
                 like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Source coordinates of the affine map moving three fixed points by (2u − 1)·jitter, u (N, 3, 2) in
    [0, 1) (OpenCV ``getAffineTransform`` + ``warpAffine``)."""
    cy, cx = h // 2, w // 2
    s = min(h, w) // 3
    src = torch.tensor([[cx + s, cy + s], [cx + s, cy - s], [cx - s, cy - s]], dtype=torch.float64)
    dst = src + (2 * u.cpu() - 1) * jitter
    a = torch.cat((src, torch.ones(3, 1, dtype=torch.float64)), 1)            # (3, 3)
    m = torch.linalg.solve(a, dst).transpose(1, 2)                             # (n, 2, 3): dst = M·[src; 1]
    full = torch.cat((m, torch.tensor([0., 0., 1.], dtype=torch.float64).expand(len(u), 1, 3)), 1)
    inv = torch.linalg.inv(full)[:, :2].to(device=like.device, dtype=_coords(like))
    ys, xs = _pixel_grid(h, w, like)
    sx = inv[:, 0, 0, None, None] * xs + inv[:, 0, 1, None, None] * ys + inv[:, 0, 2, None, None]
    sy = inv[:, 1, 0, None, None] * xs + inv[:, 1, 1, None, None] * ys + inv[:, 1, 2, None, None]
    return sy, sx


def _sample_elastic(n: int, size: Size, p: CorruptionParams, g: torch.Generator, like: torch.Tensor) -> Draw:
    affine = torch.rand((n, 3, 2), generator=g, device=g.device, dtype=torch.float64)
    field = torch.rand((n, 2, *size), generator=g, device=g.device, dtype=torch.float64)
    return {"affine": affine.to(like.device), "field": field.to(like.device)}


@corruption("elastic_transform", "digital", ("alpha", "sigma", "affine"), {
    "imagenet": [(244 * 2, 244 * .7, 244 * .1), (244 * 2, 244 * .08, 244 * .2),
    (244 * .05, 244 * .01, 244 * .02), (244 * .07, 244 * .01, 244 * .02),
    (244 * .12, 244 * .01, 244 * .02)],
    "cifar": [(32 * 0, 32 * 0, 32 * .08), (32 * .05, 32 * .2, 32 * .07), (32 * .08, 32 * .06, 32 * .06),
    (32 * .1, 32 * .04, 32 * .05), (32 * .1, 32 * .03, 32 * .03)]},
    sample=_sample_elastic, spatial=("alpha", "sigma", "affine"), rescale=_elastic_rescale)
def elastic_transform(x: torch.Tensor, p: CorruptionParams, d: Draw) -> torch.Tensor:
    """Random affine warp (reflect-101), then a smooth random displacement field (α, σ; scipy reflect)."""
    sy, sx = _affine_grid(*x.shape[-2:], p.affine, d["affine"], x)
    return _displace(warp_bilinear(x, sy, sx, "mirror"), d["field"].to(x.device) * 2 - 1, p, x)


def _displace(y: torch.Tensor, field: torch.Tensor, p: CorruptionParams, x: torch.Tensor) -> torch.Tensor:
    """``y`` warped by ``field`` (N, 2, H, W) smoothed (σ, truncate 3, reflect) and scaled by α; bilinear, scipy
    reflect; in ``x``'s dtype."""
    field = (gaussian_filter(field, p.sigma, truncate=3.0, mode="reflect") * p.alpha).to(_coords(x))
    ys, xs = _pixel_grid(*x.shape[-2:], x)
    return warp_bilinear(y, ys + field[:, 1], xs + field[:, 0], "reflect").to(x.dtype)


def _sample_elastic_ic(n: int, size: Size, p: CorruptionParams, g: torch.Generator, like: torch.Tensor) -> Draw:
    return {"field": torch.rand((n, 2, *size), generator=g, device=g.device, dtype=torch.float64).to(like.device)}


# imagecorruptions 1.1.2's elastic transform, size-relative (σ = 1 %, max shift = ½ % of the side)
@corruption("elastic_transform@imagecorruptions", "digital", ("alpha", "sigma", "max_shift"), {
    "imagenet": [(250 * a, .01 * 224, .005 * 224) for a in (.05, .065, .085, .1, .12)],
    "cifar": [(250 * a, .01 * 32, .005 * 32) for a in (.05, .065, .085, .1, .12)]},
    sample=_sample_elastic_ic, spatial=("sigma", "max_shift"), variant_of="elastic_transform")
def elastic_transform_ic(x: torch.Tensor, p: CorruptionParams, d: Draw) -> torch.Tensor:
    """``imagecorruptions``' elastic transform: no affine step; a displacement field U(−m, m) per pixel
    (m = ``max_shift``) as :func:`_displace`. (It uses σ = 1 % of each side and m = ½ % of the height; here both
    follow the shorter side, the same for square images.)"""
    return _displace(x, (d["field"].to(x.device) * 2 - 1) * p.max_shift, p, x)


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


@corruption("pixelate", "digital", ("c",), _levels((.6, .5, .4, .3, .25), (.95, .9, .85, .75, .65)), in_range=True)
def pixelate(x: torch.Tensor, p: CorruptionParams, d: Draw) -> torch.Tensor:
    """Downsample to ``int(side·c)`` with PIL's BOX filter (rows, then columns summed into their boxes), back up
    with nearest neighbour (one gather into the output). No full-size temporaries: this is memory-bound."""
    n, c, h, w = x.shape
    sh, sw = max(1, int(h * p.c)), max(1, int(w * p.c))
    rows, cols = _pil_box_members(h, sh), _pil_box_members(w, sw)
    small = _box_sum(_box_sum(x, 2, rows), 3, cols)
    counts = rows.sum(1)[:, None] * cols.sum(1)[None, :]
    small.div_(counts.clamp_min(1).to(device=x.device, dtype=x.dtype)).clamp_(0, 1)     # the engine's clamp, small
    up = (_nearest_index(sh, h)[:, None] * sw + _nearest_index(sw, w)[None, :]).view(-1).to(x.device)
    out = empty_output((n, c, h, w), x.dtype, x.device)
    torch.index_select(small.reshape(n * c, sh * sw), 1, up, out=out.view(n * c, h * w))   # one gather
    return out


def _box_sum(x: torch.Tensor, dim: int, members: torch.Tensor, *, ordered: bool | None = None) -> torch.Tensor:
    """Sum ``x`` (…, H, W) along ``dim`` (2 or 3) into boxes given as a 0/1 matrix (n_out, n_in): an
    ``index_add_`` when each input belongs to one box (4× faster than the matrix product), else the product.
    ``ordered`` (default: off the CPU) adds the r-th member of every box in round r, so that no output takes two
    adds in one ``index_add_``: CUDA's atomic adds then keep the CPU's order (and bits)."""
    if bool((members.sum(0) == 1).all()):
        shape = list(x.shape)
        shape[dim] = members.shape[0]
        box = members.argmax(0)
        out = x.new_zeros(shape)
        if not (ordered if ordered is not None else x.device.type != "cpu"):
            return out.index_add_(dim, box.to(x.device), x)
        rank = (members.cumsum(1) * members).sum(0).long() - 1        # earlier members of each input's box
        for r in range(int(rank.max()) + 1):
            src = (rank == r).nonzero().view(-1)
            out.index_add_(dim, box[src].to(x.device), x.index_select(dim, src.to(x.device)))
        return out
    m = members.to(device=x.device, dtype=x.dtype)
    return torch.matmul(m, x) if dim == 2 else torch.matmul(x, m.T)


def _nearest_index(n_in: int, n_out: int) -> torch.Tensor:
    """PIL's BOX filter when upscaling = nearest neighbour at floor((o + ½)·n_in/n_out), in double precision
    (``F.interpolate(mode="nearest-exact")`` computes it in float32 and breaks some ties the other way)."""
    scale = n_in / n_out
    return torch.clamp(((torch.arange(n_out, dtype=torch.float64) + 0.5) * scale).floor().long(), max=n_in - 1)


@corruption("jpeg_compression", "digital", ("quality",), _levels((25, 18, 15, 10, 7), (80, 65, 58, 50, 40)),
            in_range=True, checks_range=True)
def jpeg_compression(x: torch.Tensor, p: CorruptionParams, d: Draw) -> torch.Tensor:
    """JPEG encode at ``quality`` and decode (uint8 round trip)."""
    return jpeg_roundtrip(x, int(p.quality))


# ---------------------------------------------------------------- extra
def _sample_spatter(n: int, size: Size, p: CorruptionParams, g: torch.Generator, like: torch.Tensor) -> Draw:
    return {"liquid": randn((n, 1, *size), g, like)}


@corruption("spatter", "extra", ("mean", "std", "sigma", "threshold", "intensity", "mud"), {
    "imagenet": [(.65, .3, 4, .69, .6, 0), (.65, .3, 3, .68, .6, 0), (.65, .3, 2, .68, .5, 0),
    (.65, .3, 1, .65, 1.5, 1), (.67, .4, 1, .65, 1.5, 1)],
    "cifar": [(.62, .1, .7, .7, .5, 0), (.65, .1, .8, .7, .5, 0), (.65, .3, 1, .69, .5, 0),
    (.65, .1, .7, .69, .6, 1), (.65, .1, .5, .68, .6, 1)]},
    sample=_sample_spatter, spatial=("sigma",), rescale=_spatter_rescale)
def spatter(x: torch.Tensor, p: CorruptionParams, d: Draw) -> torch.Tensor:
    """Water drops (severities 1–3 in the table: ``mud`` = 0) or mud splashes (``mud`` = 1)."""
    liquid = gaussian_blur(d["liquid"] * p.std + p.mean, p.sigma)
    liquid = torch.where(liquid < p.threshold, torch.zeros_like(liquid), liquid)
    if p.mud:
        m = mud_layer(liquid, p.threshold, p.intensity)
        colour = torch.tensor([63, 42, 20], device=x.device, dtype=x.dtype).view(1, 3, 1, 1) / 255
        return x * (1 - m) + colour * m
    m = water_layer(liquid) * p.intensity
    colour = torch.tensor([175, 238, 238], device=x.device, dtype=x.dtype).view(1, 3, 1, 1) / 255
    return x + m * colour


@corruption("saturate", "extra", ("factor", "shift"), {
    "imagenet": [(.3, 0), (.1, 0), (2, 0), (5, .1), (20, .2)],
    "cifar": [(.3, 0), (.1, 0), (1.5, 0), (2, .1), (2.5, .2)]})
def saturate(x: torch.Tensor, p: CorruptionParams, d: Draw) -> torch.Tensor:
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
