"""Per-corruption, per-severity parameter tables (presets ``imagenet`` and ``cifar``) and size scaling.

The numbers are those of Hendrycks & Dietterich, "Benchmarking Neural Network Robustness to Common
Corruptions and Perturbations", ICLR 2019 (arXiv:1903.12261): ``make_imagenet_c.py`` (224 px, preset
``imagenet``) and ``make_cifar_c.py`` (32 px, preset ``cifar``).

Size scaling. A preset has a native size S0 (224 or 32). For an image of shorter side ``s`` the factor is
``k = s / S0``; every *spatial* parameter (a length in pixels: blur radii and σ, glass-blur distance (rounded, ≥ 1), snow
flake zoom and streak length, elastic σ and affine jitter, spatter smoothing, frost crystal size) is
multiplied by ``k``; elastic α by ``k²`` (the displacement is ∝ α/σ, so it then grows ∝ ``k``); all other
parameters (noise levels, zoom-blur factors, pixelate ratio, JPEG quality, colour factors) are size-free.
Fog's plasma map is always the next power of two ≥ max(H, W), so it scales by construction.

Example::

    >>> corruption_params("motion_blur", 3, "imagenet").radius
    15.0
    >>> corruption_params("motion_blur", 3, "imagenet", size=448).radius
    30.0
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from robustvit.errors import RobustvitError, unknown_name

#: Native image size (shorter side, pixels) of each preset.
PRESET_SIZES: Mapping[str, int] = MappingProxyType({"imagenet": 224, "cifar": 32})
#: Images whose shorter side is at most this use the ``cifar`` preset unless one is given.
CIFAR_MAX_SIDE = 64

BENCHMARK_CORRUPTIONS: tuple[str, ...] = (
    "gaussian_noise", "shot_noise", "impulse_noise",
    "defocus_blur", "glass_blur", "motion_blur", "zoom_blur",
    "snow", "frost", "fog", "brightness",
    "contrast", "elastic_transform", "pixelate", "jpeg_compression",
)
EXTRA_CORRUPTIONS: tuple[str, ...] = ("speckle_noise", "gaussian_blur", "spatter", "saturate")
CORRUPTION_GROUPS: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "noise": BENCHMARK_CORRUPTIONS[0:3],
    "blur": BENCHMARK_CORRUPTIONS[3:7],
    "weather": BENCHMARK_CORRUPTIONS[7:11],
    "digital": BENCHMARK_CORRUPTIONS[11:15],
    "extra": EXTRA_CORRUPTIONS,
    "benchmark": BENCHMARK_CORRUPTIONS,
    "all": BENCHMARK_CORRUPTIONS + EXTRA_CORRUPTIONS,
})

# name -> (field names, spatial fields, {preset: five rows})
_Row = tuple[Any, ...]
_TABLES: dict[str, tuple[tuple[str, ...], tuple[str, ...], dict[str, list[_Row]]]] = {
    "gaussian_noise": (("c",), (), {
        "imagenet": [(.08,), (.12,), (.18,), (.26,), (.38,)],
        "cifar": [(.04,), (.06,), (.08,), (.09,), (.10,)]}),
    "shot_noise": (("c",), (), {
        "imagenet": [(60,), (25,), (12,), (5,), (3,)],
        "cifar": [(500,), (250,), (100,), (75,), (50,)]}),
    "impulse_noise": (("c",), (), {
        "imagenet": [(.03,), (.06,), (.09,), (.17,), (.27,)],
        "cifar": [(.01,), (.02,), (.03,), (.05,), (.07,)]}),
    "speckle_noise": (("c",), (), {
        "imagenet": [(.15,), (.2,), (.35,), (.45,), (.6,)],
        "cifar": [(.06,), (.1,), (.12,), (.16,), (.2,)]}),
    "defocus_blur": (("radius", "alias"), ("radius", "alias"), {
        "imagenet": [(3, .1), (4, .5), (6, .5), (8, .5), (10, .5)],
        "cifar": [(.3, .4), (.4, .5), (.5, .6), (1, .2), (1.5, .1)]}),
    "glass_blur": (("sigma", "dist", "iters"), ("sigma", "dist"), {
        "imagenet": [(.7, 1, 2), (.9, 2, 1), (1, 2, 3), (1.1, 3, 2), (1.5, 4, 2)],
        "cifar": [(.05, 1, 1), (.25, 1, 1), (.4, 1, 1), (.25, 1, 2), (.4, 1, 2)]}),
    "motion_blur": (("radius", "sigma"), ("radius", "sigma"), {
        "imagenet": [(10, 3), (15, 5), (15, 8), (15, 12), (20, 15)],
        "cifar": [(6, 1), (6, 1.5), (6, 2), (8, 2), (9, 2.5)]}),
    # zoom factors: numpy.arange(start, stop, step) (stop exclusive)
    "zoom_blur": (("start", "stop", "step"), (), {
        "imagenet": [(1, 1.11, .01), (1, 1.16, .01), (1, 1.21, .02), (1, 1.26, .02), (1, 1.31, .03)],
        "cifar": [(1, 1.06, .01), (1, 1.11, .01), (1, 1.16, .01), (1, 1.21, .01), (1, 1.26, .01)]}),
    "snow": (("mean", "std", "zoom", "threshold", "radius", "sigma", "blend"), ("zoom", "radius", "sigma"), {
        "imagenet": [(.1, .3, 3, .5, 10, 4, .8), (.2, .3, 2, .5, 12, 4, .7), (.55, .3, 4, .9, 12, 8, .7),
                     (.55, .3, 4.5, .85, 12, 8, .65), (.55, .3, 2.5, .85, 12, 12, .55)],
        "cifar": [(.1, .2, 1, .6, 8, 3, .95), (.1, .2, 1, .5, 10, 4, .9), (.15, .3, 1.75, .55, 10, 4, .9),
                  (.25, .3, 2.25, .6, 12, 6, .85), (.3, .3, 1.25, .65, 14, 12, .8)]}),
    # frost: image weight, texture weight, crystal size (relative; procedural texture, see frost.py)
    "frost": (("image_weight", "frost_weight", "crystal_size"), ("crystal_size",), {
        "imagenet": [(1, .4, 1), (.8, .6, 1), (.7, .7, 1), (.65, .7, 1), (.6, .75, 1)],
        "cifar": [(1, .2, .2), (1, .3, .2), (.9, .4, .2), (.85, .4, .2), (.75, .45, .2)]}),
    "fog": (("strength", "decay"), (), {
        "imagenet": [(1.5, 2), (2., 2), (2.5, 1.7), (2.5, 1.5), (3., 1.4)],
        "cifar": [(.2, 3), (.5, 3), (.75, 2.5), (1, 2), (1.5, 1.75)]}),
    "brightness": (("c",), (), {
        "imagenet": [(.1,), (.2,), (.3,), (.4,), (.5,)],
        "cifar": [(.05,), (.1,), (.15,), (.2,), (.3,)]}),
    "contrast": (("c",), (), {
        "imagenet": [(.4,), (.3,), (.2,), (.1,), (.05,)],
        "cifar": [(.75,), (.5,), (.4,), (.3,), (.15,)]}),
    "elastic_transform": (("alpha", "sigma", "affine"), ("alpha", "sigma", "affine"), {
        "imagenet": [(244 * 2, 244 * .7, 244 * .1), (244 * 2, 244 * .08, 244 * .2),
                     (244 * .05, 244 * .01, 244 * .02), (244 * .07, 244 * .01, 244 * .02),
                     (244 * .12, 244 * .01, 244 * .02)],
        "cifar": [(32 * 0, 32 * 0, 32 * .08), (32 * .05, 32 * .2, 32 * .07), (32 * .08, 32 * .06, 32 * .06),
                  (32 * .1, 32 * .04, 32 * .05), (32 * .1, 32 * .03, 32 * .03)]}),
    "pixelate": (("c",), (), {
        "imagenet": [(.6,), (.5,), (.4,), (.3,), (.25,)],
        "cifar": [(.95,), (.9,), (.85,), (.75,), (.65,)]}),
    "jpeg_compression": (("quality",), (), {
        "imagenet": [(25,), (18,), (15,), (10,), (7,)],
        "cifar": [(80,), (65,), (58,), (50,), (40,)]}),
    "gaussian_blur": (("sigma",), ("sigma",), {
        "imagenet": [(1,), (2,), (3,), (4,), (6,)],
        "cifar": [(.4,), (.6,), (.7,), (.8,), (1,)]}),
    "spatter": (("mean", "std", "sigma", "threshold", "intensity", "mud"), ("sigma",), {
        "imagenet": [(.65, .3, 4, .69, .6, 0), (.65, .3, 3, .68, .6, 0), (.65, .3, 2, .68, .5, 0),
                     (.65, .3, 1, .65, 1.5, 1), (.67, .4, 1, .65, 1.5, 1)],
        "cifar": [(.62, .1, .7, .7, .5, 0), (.65, .1, .8, .7, .5, 0), (.65, .3, 1, .69, .5, 0),
                  (.65, .1, .7, .69, .6, 1), (.65, .1, .5, .68, .6, 1)]}),
    "saturate": (("factor", "shift"), (), {
        "imagenet": [(.3, 0), (.1, 0), (2, 0), (5, .1), (20, .2)],
        "cifar": [(.3, 0), (.1, 0), (1.5, 0), (2, .1), (2.5, .2)]}),
}


@dataclass(frozen=True)
class CorruptionParams:
    """The parameters of one corruption at one severity, for one preset and image size.

    Fields are read as attributes (``p.radius``); ``values`` holds them all, already scaled by ``scale``
    (= shorter image side / preset size) where they are spatial. ``table`` holds the unscaled row.
    """

    name: str
    severity: int
    preset: str
    scale: float
    values: Mapping[str, float] = field(repr=True)
    table: Mapping[str, float] = field(repr=False)

    def __getattr__(self, key: str) -> float:
        values = object.__getattribute__(self, "values")
        if key in values:
            return values[key]
        raise AttributeError(f"{self.name} has no parameter {key!r}; it has {', '.join(values)}")


def check_name(name: str) -> str:
    """Return ``name`` if it is a known corruption, else raise a one-line error with close matches."""
    if not isinstance(name, str) or name not in _TABLES:
        raise unknown_name("corruption", str(name), _TABLES, hint="see robustvit.corruptions.list_corruptions()")
    return name


def check_severity(severity: int) -> int:
    """Return ``severity`` if it is an int in 1..5, else raise a one-line error."""
    if isinstance(severity, bool) or not isinstance(severity, int) or not 1 <= severity <= 5:
        raise RobustvitError(f"severity must be an integer from 1 to 5, got {severity!r}")
    return severity


def parse_corruptions(spec: str) -> list[str]:
    """A group name (all, benchmark, noise, blur, weather, digital, extra) or names joined by ``+`` or ``,``
    → the checked corruption names, duplicates removed, in the order given."""
    spec = str(spec).strip()
    if spec in CORRUPTION_GROUPS:
        return list(CORRUPTION_GROUPS[spec])
    names: list[str] = []
    for n in (t.strip() for t in spec.replace(",", "+").split("+") if t.strip()):
        if n not in _TABLES:
            raise unknown_name("corruption", n, list(_TABLES) + list(CORRUPTION_GROUPS),
                               hint="give a group (all, benchmark, noise, blur, weather, digital, extra) or names joined by +")
        if n not in names:
            names.append(n)
    if not names:
        raise RobustvitError("give at least one corruption: a group such as all, or names joined by +")
    return names


def parse_severities(spec: str | int) -> list[int]:
    """``"1-5"`` / ``"2-4"`` / ``"3"`` / ``"1+3+5"`` / ``"1,3,5"`` → the sorted severities, each in 1-5."""
    text = str(spec).strip()
    try:
        if "-" in text:
            a, b = (int(t) for t in text.split("-", 1))
            sev = list(range(a, b + 1))
        else:
            sev = [int(t) for t in text.replace(",", "+").split("+") if t.strip()]
    except ValueError:
        raise RobustvitError(f"severities must look like 1-5, 3 or 1+3+5, got {text!r}") from None
    if not sev or any(not 1 <= s <= 5 for s in sev):
        raise RobustvitError(f"severities must lie in 1-5, got {text!r}")
    return sorted(set(sev))


def resolve_preset(preset: str | None, height: int, width: int) -> str:
    """The preset to use: ``preset`` if given (checked), else ``cifar`` when min(H, W) ≤ 64, else ``imagenet``."""
    if preset is None:
        return "cifar" if min(height, width) <= CIFAR_MAX_SIDE else "imagenet"
    if preset not in PRESET_SIZES:
        raise unknown_name("corruption preset", str(preset), PRESET_SIZES)
    return preset


def corruption_params(name: str, severity: int, preset: str = "imagenet",
                      size: int | tuple[int, int] | None = None) -> CorruptionParams:
    """The parameters ``corrupt`` uses for ``name`` at ``severity``.

    ``size`` is the image's shorter side (or ``(H, W)``); spatial parameters are scaled by
    ``size / PRESET_SIZES[preset]``. Without ``size`` the preset's native size is assumed (no scaling).
    """
    check_name(name)
    check_severity(severity)
    if preset not in PRESET_SIZES:
        raise unknown_name("corruption preset", str(preset), PRESET_SIZES)
    fields, spatial, tables = _TABLES[name]
    row = tables[preset][severity - 1]
    table = dict(zip(fields, (float(v) for v in row)))
    if size is None:
        side = PRESET_SIZES[preset]
    else:
        side = min(size) if isinstance(size, tuple) else int(size)
    k = side / PRESET_SIZES[preset]
    values = {key: v * k if key in spatial else v for key, v in table.items()}
    if name == "elastic_transform":  # displacement ∝ α/σ: with σ ∝ size, α ∝ size² keeps it ∝ size
        values["alpha"] = table["alpha"] * k * k
    if name == "spatter":  # the mud mask's smoothing σ is "intensity" (spatial); the water intensity is not
        values["intensity"] = table["intensity"] * (k if table["mud"] else 1.0)
    return CorruptionParams(name, severity, preset, k, MappingProxyType(values), MappingProxyType(table))


def zoom_factors(start: float, stop: float, step: float) -> list[float]:
    """``numpy.arange(start, stop, step)`` for floats: ``ceil((stop - start) / step)`` values."""
    n = math.ceil((stop - start) / step)
    return [start + i * step for i in range(n)]


