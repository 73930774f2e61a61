"""Corruption names, groups, presets and parameters at a severity, and the parsers of the CLI's lists.

Each corruption's table is part of its registered spec (``functional.py``), with the numbers of Hendrycks &
Dietterich, ICLR 2019 (arXiv:1903.12261): ``make_imagenet_c.py`` (224 px, preset ``imagenet``) and
``make_cifar_c.py`` (32 px, preset ``cifar``).

Size scaling: for an image of shorter side ``s`` and a preset of native size S0, ``k = s / S0``. Every
*spatial* parameter (a length in pixels: blur radii and σ, glass-blur distance (rounded, ≥ 1), snow flake zoom
and streak length, elastic σ and affine jitter, spatter smoothing, frost crystal size) is multiplied by ``k``;
elastic α by ``k²`` (the displacement ∝ α/σ then grows ∝ ``k``); the others (noise levels, zoom-blur factors,
pixelate ratio, JPEG quality, colour factors) are size-free. Fog's plasma map is the next power of two
≥ max(H, W), so it scales by construction.

Example::

    >>> corruption_params("motion_blur", 3, "imagenet").radius
    15.0
    >>> corruption_params("motion_blur", 3, "imagenet", size=448).radius
    30.0
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from robustvit.corruptions.spec import CORRUPTIONS, PRESET_SIZES, CorruptionParams
from robustvit.errors import RobustvitError, unknown_name

__all__ = ["PRESET_SIZES", "CIFAR_MAX_SIDE", "CORRUPTION_GROUPS", "BENCHMARK_CORRUPTIONS", "EXTRA_CORRUPTIONS",
           "CorruptionParams", "check_name", "corruption_groups", "check_severity", "parse_corruptions",
           "parse_severities", "resolve_preset", "corruption_params"]

#: Images whose shorter side is at most this use the ``cifar`` preset unless one is given.
CIFAR_MAX_SIDE = 64
#: The groups of the ImageNet-C benchmark, in the order of its tables; other corruptions are in ``extra``.
BENCHMARK_GROUPS: tuple[str, ...] = ("noise", "blur", "weather", "digital")
#: The 15 corruptions of ImageNet-C / CIFAR-10-C in the order of its tables (mCE averages over these).
BENCHMARK_CORRUPTIONS: tuple[str, ...] = (
    "gaussian_noise", "shot_noise", "impulse_noise", "defocus_blur", "glass_blur", "motion_blur", "zoom_blur", "snow",
    "frost", "fog", "brightness", "contrast", "elastic_transform", "pixelate", "jpeg_compression")
#: The 4 held-out corruptions of the paper (its validation set).
EXTRA_CORRUPTIONS: tuple[str, ...] = ("speckle_noise", "gaussian_blur", "spatter", "saturate")
#: Groups that are benchmarks of their own (ImageNet-C̄, CIFAR-10-C̄, Mintun et al. 2021): listed by their group,
#: not in ``all``.
SEPARATE_BENCHMARKS: tuple[str, ...] = ("imagenet_c_bar", "cifar10_c_bar")
#: CIFAR-10-C̄'s corruptions (its ``cifar10_c_bar.csv`` order); five are ImageNet-C̄'s (their group is that one).
CIFAR10_C_BAR: tuple[str, ...] = (
    "blue_noise_sample", "checkerboard_cutout", "inverse_sparkles", "pinch_and_twirl", "ripple", "brownish_noise",
    "circular_motion_blur", "lines", "sparkles", "transverse_chromatic_abberation")


def corruption_groups() -> dict[str, tuple[str, ...]]:
    """Group → names of the corruptions registered now (variants left out): noise, blur, weather, digital,
    extra, any other group a corruption names, ``benchmark`` (the 15 of ImageNet-C) and ``all`` (all but the
    separate benchmarks' such as ImageNet-C̄: the benchmark first, then in registration order).

    >>> corruption_groups()["noise"]
    ('gaussian_noise', 'shot_noise', 'impulse_noise')
    """
    specs = [s for s in CORRUPTIONS.values() if s.variant_of is None]
    names = dict.fromkeys((*BENCHMARK_GROUPS, "extra", *(s.group for s in specs)))
    groups = {g: tuple(s.name for s in specs if s.group == g) for g in names}
    order = {n: i for i, n in enumerate(BENCHMARK_CORRUPTIONS)}
    if groups.get("cifar10_c_bar"):               # the registered ones of CIFAR-10-C̄, shared ones included
        registered = {s.name for s in specs}
        groups["cifar10_c_bar"] = tuple(n for n in CIFAR10_C_BAR if n in registered)
    groups["benchmark"] = BENCHMARK_CORRUPTIONS
    groups["all"] = tuple(sorted((s.name for s in specs if s.group not in SEPARATE_BENCHMARKS),
                                 key=lambda n: order.get(n, len(order))))
    return groups


class _Groups(Mapping[str, tuple[str, ...]]):
    """A read-only view of :func:`corruption_groups`, computed at each access (so it sees later registrations)."""

    def __getitem__(self, group: str) -> tuple[str, ...]:
        return corruption_groups()[group]

    def __iter__(self) -> Iterator[str]:
        return iter(corruption_groups())

    def __len__(self) -> int:
        return len(corruption_groups())

    def __repr__(self) -> str:
        return f"CORRUPTION_GROUPS({corruption_groups()!r})"


#: The groups of the registered corruptions (noise, blur, weather, digital, extra, benchmark, all, …).
CORRUPTION_GROUPS: Mapping[str, tuple[str, ...]] = _Groups()


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
    groups = corruption_groups()
    if spec in groups:
        return list(groups[spec])
    names: list[str] = []
    for n in (t.strip() for t in spec.replace(",", "+").split("+") if t.strip()):
        if n not in CORRUPTIONS:
            raise unknown_name("corruption", n, CORRUPTIONS.list() + list(groups),
                               hint="give a group (all, benchmark, noise, blur, weather, digital, extra, "
                                    "imagenet_c_bar, cifar10_c_bar) or names joined by +")
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
    """The parameters ``corrupt`` uses for ``name`` at ``severity``; spatial ones scaled by
    ``size / PRESET_SIZES[preset]`` (``size``: the shorter side, or ``(H, W)``; None: the native size)."""
    check_severity(severity)
    if preset not in PRESET_SIZES:
        raise unknown_name("corruption preset", str(preset), PRESET_SIZES)
    return CORRUPTIONS.get(check_name(name)).params(severity, preset, size)
