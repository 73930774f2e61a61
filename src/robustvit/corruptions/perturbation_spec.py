"""An ImageNet-P perturbation (Hendrycks & Dietterich, ICLR 2019, arXiv:1903.12261, section 4) is one
registered :class:`Perturbation`: its parameter table and frame count per preset, its flags, and — as the
corruptions do — the random draws made before the first frame (:meth:`Perturbation.sample`) split from making
the frames of one block (:meth:`Perturbation.apply`). ``robustvit.corruptions.sequences`` registers the
fourteen built-in ones (loaded on the first lookup).

>>> spec = PERTURBATIONS.get("rotate")
>>> spec.frames("imagenet"), spec.split, spec.family, spec.warps_full
(31, 'test', 'geometric', True)
>>> p = spec.params("cifar", size=32)
>>> spec.apply(torch.rand(2, 3, 32, 32), p.at(1), [0, 1, 2], {}, torch.Generator()).shape
torch.Size([2, 3, 3, 32, 32])
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar

import torch

from robustvit.corruptions.spec import PRESET_SIZES
from robustvit.errors import RobustvitError, unknown_name
from robustvit.options import option
from robustvit.registry import Registry

#: What a sequence draws before its first frame and carries from block to block (zoom_blur's running sum,
#: spatter's dripping liquid); apply functions of ``sequential`` perturbations update it in place.
State = dict[str, torch.Tensor]
#: (images, values, generator) → the state before the first frame
SampleFn = Callable[[torch.Tensor, Mapping[str, Any], torch.Generator], State]
#: (images, values, frame indices of the block, state, generator) → frames (N, t, C, H, W)
ApplyFn = Callable[[torch.Tensor, Mapping[str, Any], list[int], State, torch.Generator], torch.Tensor]


@dataclass(frozen=True)
class PerturbationOptions:
    """The options of every perturbation (``rotate:difficulty=2``)."""

    difficulty: int = option(1, min=1, max=3, help="noise level of the noise sequences (the _2/_3 folders); "
                                                     "for the others the metric's frame stride")


@dataclass(frozen=True)
class PerturbationParams:
    """The parameters of one sequence after size scaling (``values``; those in ``levels`` are tuples, one per
    difficulty, :meth:`at` picks one) and the frame count."""

    name: str
    preset: str
    frames: int
    scale: float
    values: dict[str, Any]
    levels: tuple[str, ...] = ()

    def at(self, difficulty: int = 1) -> dict[str, Any]:
        """The values at ``difficulty`` (1–3): each per-difficulty tuple replaced by its entry."""
        if isinstance(difficulty, bool) or not isinstance(difficulty, int) or not 1 <= difficulty <= 3:
            raise RobustvitError(f"difficulty must be 1, 2 or 3, got {difficulty!r}")
        return {k: (v[difficulty - 1] if k in self.levels else v) for k, v in self.values.items()}


@dataclass(frozen=True)
class Perturbation:
    """One perturbation sequence.

    ``tables`` maps each preset (``imagenet``, ``cifar``) to its row: ``frames`` (T) and the parameters; keys in
    ``lengths`` are lengths in pixels (× k = image side / preset size), keys in ``levels`` hold one value per
    difficulty. ``split``: ``test`` (the 10 of mFR / mT5D) or ``validation``. ``family``: noise (frames compared
    with frame 0, the reference's ``'noise' in name``), blur, weather, digital or geometric. ``warps_full``: it
    warps the uncropped image, centre-cropped afterwards (ImageNet-P warps the Resize(256) image before
    CenterCrop(224)). ``random``: it draws from the generator, in frame order. ``sequential``: blocks must be
    made in frame order (``apply`` carries state or draws frame by frame).
    """

    name: str
    split: str
    family: str
    tables: Mapping[str, Mapping[str, Any]]
    apply_fn: ApplyFn
    sample_fn: SampleFn | None = None
    lengths: tuple[str, ...] = ()
    levels: tuple[str, ...] = ()
    warps_full: bool = False
    random: bool = False
    sequential: bool = False
    aliases: tuple[str, ...] = ()
    Options: ClassVar[type] = PerturbationOptions

    def __post_init__(self) -> None:
        for preset, row in self.tables.items():
            if preset not in PRESET_SIZES:
                raise ValueError(f"{self.name}: unknown preset {preset!r}; presets: {', '.join(PRESET_SIZES)}")
            if not isinstance(row.get("frames"), int) or row["frames"] < 2:
                raise ValueError(f"{self.name}: the {preset} row needs an integer 'frames' >= 2")
            missing = (set(self.lengths) | set(self.levels)) - set(row)
            if missing:
                raise ValueError(f"{self.name}: the {preset} row has no {', '.join(sorted(missing))}")
            if any(len(row[k]) != 3 for k in self.levels):
                raise ValueError(f"{self.name}: per-difficulty values need 3 entries")

    @property
    def noise(self) -> bool:
        """Whether frames are compared with frame 0 (noise) rather than with the previous frame."""
        return self.family == "noise"

    def _row(self, preset: str) -> Mapping[str, Any]:
        if preset not in self.tables:
            raise unknown_name("preset", str(preset), self.tables)
        return self.tables[preset]

    def frames(self, preset: str = "imagenet") -> int:
        """The number of frames T of a sequence for ``preset``."""
        return int(self._row(preset)["frames"])

    def params(self, preset: str = "imagenet", size: int | None = None) -> PerturbationParams:
        """The parameters for ``preset``, lengths scaled by k = ``size`` / native size (None: k = 1)."""
        table = dict(self._row(preset))
        k = 1.0 if size is None else float(size) / PRESET_SIZES[preset]
        frames = int(table.pop("frames"))
        values = {key: (v * k if key in self.lengths else v) for key, v in table.items()}
        return PerturbationParams(self.name, preset, frames, k, values, self.levels)

    def sample(self, x: torch.Tensor, values: Mapping[str, Any], generator: torch.Generator) -> State:
        """The draws made before the first frame and the state carried between blocks (``{}`` if none)."""
        return {} if self.sample_fn is None else self.sample_fn(x, values, generator)

    def apply(self, x: torch.Tensor, values: Mapping[str, Any], idx: list[int], state: State,
              generator: torch.Generator) -> torch.Tensor:
        """Frames ``idx`` of every image of ``x`` (N, 3, H, W) in [0, 1]: (N, t, 3, H, W) in [0, 1]. ``values``:
        :meth:`PerturbationParams.at`; ``state``: from :meth:`sample` (updated in place if ``sequential``)."""
        return self.apply_fn(x, values, list(idx), state, generator)

    def blocks(self, x: torch.Tensor, values: Mapping[str, Any], blocks: list[list[int]],
               generator: torch.Generator) -> Iterator[torch.Tensor]:
        """:meth:`sample`, then :meth:`apply` for each block of frame indices, in order."""
        state = self.sample(x, values, generator)
        for idx in blocks:
            yield self.apply(x, values, idx, state, generator)


#: Every perturbation, in the order of ImageNet-P's tables (the 10 test ones, then the 4 validation ones).
PERTURBATIONS: Registry[Perturbation] = Registry(
    "perturbation", package="robustvit.corruptions", hint="see robustvit.corruptions.list_perturbations()")


def register_perturbation(spec: Perturbation) -> Perturbation:
    """Add a perturbation; it is then available to ``perturbation_sequence`` and the listings."""
    if not isinstance(spec, Perturbation):
        raise RobustvitError(f"register_perturbation takes a Perturbation, got {type(spec).__name__}")
    PERTURBATIONS.add(spec.name, spec)
    return spec


def perturbation(name: str, split: str, family: str, tables: Mapping[str, Mapping[str, Any]], *,
                 sample: SampleFn | None = None, **flags: Any) -> Callable[[ApplyFn], ApplyFn]:
    """Decorator: register the decorated apply function as perturbation ``name`` (flags as
    :class:`Perturbation`'s fields).

    >>> @perturbation("test_fade", "validation", "digital", {"cifar": {"frames": 5, "step": 0.1}})
    ... def _fade(x, p, idx, state, g):
    ...     return torch.stack([x * (1 - p["step"] * i) for i in idx], 1)
    >>> PERTURBATIONS.get("test_fade").frames("cifar")
    5
    >>> _ = PERTURBATIONS._items.pop("test_fade")
    """
    def deco(fn: ApplyFn) -> ApplyFn:
        register_perturbation(Perturbation(name, split, family, MappingProxyType(dict(tables)), fn, sample, **flags))
        return fn
    return deco


__all__ = ["PERTURBATIONS", "Perturbation", "PerturbationOptions", "PerturbationParams", "State",
           "perturbation", "register_perturbation"]
