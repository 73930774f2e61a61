"""A corruption is one registered :class:`Corruption`: its parameter table per preset and severity, its
group, whether it is random, and — as kornia's augmentations do — *sampling* its random parameters
(:meth:`Corruption.sample`) split from *applying* them (:meth:`Corruption.apply`), so that a draw can be
inspected, recorded and applied to another batch.

>>> spec = CORRUPTIONS.get("motion_blur")
>>> p = spec.params(3, "imagenet")
>>> draw = spec.sample(4, (224, 224), p, torch.Generator().manual_seed(0))
>>> sorted(draw), tuple(draw["angle"].shape)
(['angle'], (4,))
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import ClassVar

import torch

from robustvit.errors import RobustvitError
from robustvit.options import NoOptions
from robustvit.registry import Registry

#: Native image size (shorter side, pixels) of each preset.
PRESET_SIZES: Mapping[str, int] = MappingProxyType({"imagenet": 224, "cifar": 32})

#: The random parameters of one batch: name → tensor (first dimension N where it is per image).
Draw = dict[str, torch.Tensor]


@dataclass(frozen=True)
class CorruptionParams:
    """The parameters of one corruption at one severity, for one preset and image size, read as attributes
    (``p.radius``): ``values``, spatial ones scaled by ``scale`` (= shorter image side / preset size);
    ``table``, the unscaled row."""

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


def _levels(imagenet: Sequence[float], cifar: Sequence[float] | None = None) -> dict[str, list[tuple[float]]]:
    """The tables of a one-field corruption: its five values per preset (``cifar`` defaults to ``imagenet``'s)."""
    return {"imagenet": [(v,) for v in imagenet], "cifar": [(v,) for v in (cifar or imagenet)]}


#: (N, (H, W), parameters, generator, a tensor of the output's device and dtype) → the draw
SampleFn = Callable[[int, tuple[int, int], CorruptionParams, torch.Generator, torch.Tensor], Draw]
#: (images, parameters, draw) → corrupted images (clamped to [0, 1] by :meth:`Corruption.apply` unless
#: ``in_range``); must not modify the images or the draw
ApplyFn = Callable[[torch.Tensor, CorruptionParams, Draw], torch.Tensor]


@dataclass(frozen=True)
class Corruption:
    """One corruption.

    ``tables`` maps each preset (``imagenet``, ``cifar``) to five rows (severities 1–5) of the values of
    ``fields``; ``spatial`` fields are lengths in pixels, multiplied by k = image side / preset size;
    ``rescale`` (values, k) adjusts values that follow another rule. ``sample_fn`` is None for a deterministic
    corruption. ``in_range``: ``apply_fn``'s output is already in [0, 1] (no clamp). ``checks_range``:
    ``apply_fn`` rejects input outside [0, 1] itself, so :func:`~robustvit.corruptions.corrupt` skips its check.
    ``variant_of``: another implementation of that corruption (named ``base@variant``; not in the groups; the
    corruptions suite can use it in place of its base). ``aliases``: other spellings of ``name``. The only
    setting is the severity, so ``Options`` are :class:`~robustvit.options.NoOptions`.
    """

    name: str
    group: str
    fields: tuple[str, ...]
    tables: Mapping[str, Sequence[Sequence[float]]]
    apply_fn: ApplyFn
    sample_fn: SampleFn | None = None
    spatial: tuple[str, ...] = ()
    rescale: Callable[[dict[str, float], float], None] | None = None
    in_range: bool = False
    checks_range: bool = False
    variant_of: str | None = None
    aliases: tuple[str, ...] = ()
    Options: ClassVar[type] = NoOptions

    def __post_init__(self) -> None:
        for preset, rows in self.tables.items():
            if len(rows) != 5 or any(len(r) != len(self.fields) for r in rows):
                raise ValueError(f"{self.name}: the {preset} table needs 5 rows of {len(self.fields)} values")
        if not set(self.spatial) <= set(self.fields):
            raise ValueError(f"{self.name}: spatial fields {self.spatial} are not all in {self.fields}")

    @property
    def random(self) -> bool:
        """Whether the corruption draws random numbers (deterministic ones ignore the generator)."""
        return self.sample_fn is not None

    def params(self, severity: int, preset: str = "imagenet",
               size: int | tuple[int, int] | None = None) -> CorruptionParams:
        """The parameters at ``severity`` for ``preset``, spatial ones scaled to ``size`` (the shorter side,
        or (H, W); None: the preset's native size)."""
        if isinstance(severity, bool) or not isinstance(severity, int) or not 1 <= severity <= 5:
            raise RobustvitError(f"severity must be an integer from 1 to 5, got {severity!r}")
        if preset not in self.tables:
            raise RobustvitError(f"{self.name} has no {preset!r} parameters; presets: {', '.join(self.tables)}")
        table = dict(zip(self.fields, (float(v) for v in self.tables[preset][severity - 1])))
        side = PRESET_SIZES[preset] if size is None else (min(size) if isinstance(size, tuple) else int(size))
        k = side / PRESET_SIZES[preset]
        values = {key: v * k if key in self.spatial else v for key, v in table.items()}
        if self.rescale is not None:
            self.rescale(values, k)
        return CorruptionParams(self.name, severity, preset, k, MappingProxyType(values), MappingProxyType(table))

    def sample(self, n: int, size: tuple[int, int], params: CorruptionParams, generator: torch.Generator, *,
               device: torch.device | str | None = None, dtype: torch.dtype = torch.float32) -> Draw:
        """The random parameters for ``n`` images of ``size`` (H, W): drawn from ``generator`` (on its
        device), returned on ``device`` (default: the generator's). ``{}`` for a deterministic corruption."""
        if self.sample_fn is None:
            return {}
        like = torch.empty(0, device=generator.device if device is None else device, dtype=dtype)
        return self.sample_fn(int(n), (int(size[0]), int(size[1])), params, generator, like)

    def apply(self, x: torch.Tensor, params: CorruptionParams, draw: Draw | None = None) -> torch.Tensor:
        """Corrupt float images ``x`` (N, 3, H, W) in [0, 1] with ``params`` and a draw made by
        :meth:`sample` for the same N, H, W; returns new images in [0, 1] (``x`` and the draw are kept)."""
        if self.sample_fn is not None and not draw:
            raise RobustvitError(f"{self.name} is random: pass the draw made by .sample(...)")
        y = self.apply_fn(x, params, draw or {})
        if self.in_range:
            return y
        shares_input = y.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
        return y.clamp(0, 1) if shares_input else y.clamp_(0, 1)      # in place unless y is (a view of) x


#: Every corruption (filled by the decorators of ``corruptions/functional.py``, which the package imports);
#: :func:`~robustvit.corruptions.list_corruptions` orders them as the ImageNet-C tables.
CORRUPTIONS: Registry[Corruption] = Registry("corruption", package="robustvit.corruptions",
                                             hint="see robustvit.corruptions.list_corruptions()")


def corruption(name: str, group: str, fields: tuple[str, ...], tables: Mapping[str, Sequence[Sequence[float]]], *,
               sample: SampleFn | None = None, **flags: object) -> Callable[[ApplyFn], ApplyFn]:
    """Decorator: register the decorated apply function as corruption ``name`` (the other arguments and
    ``flags`` as :class:`Corruption`'s fields; ``sample`` is its ``sample_fn``).

    >>> @corruption("test_dim", "test_group", ("c",), {"cifar": [(0.1 * s,) for s in range(1, 6)]})
    ... def _dim(x, p, d):
    ...     return x * (1 - p.c)
    >>> CORRUPTIONS.get("test_dim").params(2, "cifar").c
    0.2
    >>> _ = CORRUPTIONS._items.pop("test_dim")
    """
    def deco(fn: ApplyFn) -> ApplyFn:
        spec = Corruption(name, group, tuple(fields), tables, fn, sample, **flags)  # type: ignore[arg-type]
        register_corruption(spec)
        return fn
    return deco


def register_corruption(spec: Corruption) -> Corruption:
    """Add a corruption; it is then available to ``corrupt``, the suites and ``robustvit corrupt``."""
    if not isinstance(spec, Corruption):
        raise RobustvitError(f"register_corruption takes a Corruption, got {type(spec).__name__}")
    CORRUPTIONS.add(spec.name, spec)
    return spec
