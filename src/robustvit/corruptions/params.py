"""Corruption names, groups, presets and parameters at a severity, and the parsers of the CLI's lists.

Each corruption's table (presets ``imagenet`` and ``cifar``) is part of its registered spec (see
``functional.py``). The numbers are those of Hendrycks & Dietterich, "Benchmarking Neural Network Robustness to Common
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

from collections.abc import Mapping
from types import MappingProxyType

import robustvit.corruptions.functional  # noqa: F401  (registers the built-in corruptions)
import robustvit.corruptions.cbar  # noqa: F401  (registers the ImageNet-C̄ corruptions, after them)
from robustvit.corruptions.spec import CORRUPTIONS, PRESET_SIZES, CorruptionParams
from robustvit.errors import RobustvitError, unknown_name

__all__ = ["PRESET_SIZES", "CIFAR_MAX_SIDE", "CORRUPTION_GROUPS", "BENCHMARK_CORRUPTIONS", "EXTRA_CORRUPTIONS",
           "CorruptionParams", "check_name", "check_severity", "parse_corruptions", "parse_severities",
           "resolve_preset", "corruption_params"]

#: Images whose shorter side is at most this use the ``cifar`` preset unless one is given.
CIFAR_MAX_SIDE = 64
#: The groups of the ImageNet-C benchmark, in the order of its tables; other corruptions are in ``extra``.
BENCHMARK_GROUPS: tuple[str, ...] = ("noise", "blur", "weather", "digital")


def _built_in_groups() -> Mapping[str, tuple[str, ...]]:
    specs = [s for s in CORRUPTIONS.values() if s.variant_of is None]
    groups = {g: tuple(s.name for s in specs if s.group == g) for g in BENCHMARK_GROUPS + ("extra",)}
    groups["benchmark"] = tuple(n for g in BENCHMARK_GROUPS for n in groups[g])
    groups["all"] = groups["benchmark"] + groups["extra"]
    groups["imagenet_c_bar"] = tuple(s.name for s in specs if s.group == "imagenet_c_bar")
    return MappingProxyType(groups)


#: The built-in groups (noise, blur, weather, digital, extra, benchmark, all; imagenet_c_bar) of the registered
#: corruptions.
CORRUPTION_GROUPS: Mapping[str, tuple[str, ...]] = _built_in_groups()
#: The 15 corruptions of ImageNet-C / CIFAR-10-C (mCE averages over these).
BENCHMARK_CORRUPTIONS: tuple[str, ...] = CORRUPTION_GROUPS["benchmark"]
#: The 4 held-out corruptions (speckle_noise, gaussian_blur, spatter, saturate).
EXTRA_CORRUPTIONS: tuple[str, ...] = CORRUPTION_GROUPS["extra"]


def check_name(name: str) -> str:
    """Return ``name`` if it is a known corruption, else raise a one-line error with close matches."""
    if not isinstance(name, str) or name not in CORRUPTIONS:
        CORRUPTIONS.get(str(name))      # raises the one-line error with close matches
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
        if n not in CORRUPTIONS:
            raise unknown_name("corruption", n, CORRUPTIONS.list() + list(CORRUPTION_GROUPS),
                               hint="give a group (all, benchmark, noise, blur, weather, digital, extra, imagenet_c_bar) "
                                    "or names joined by +")
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
    check_severity(severity)
    if preset not in PRESET_SIZES:
        raise unknown_name("corruption preset", str(preset), PRESET_SIZES)
    return CORRUPTIONS.get(check_name(name)).params(severity, preset, size)
