"""What every analysis shares: the run context (data chunks, seeds, the unit store), the ``Analysis`` base
class, the ``ANALYSES`` registry and ``@register_analysis``. Model families (``FAMILIES``, ``family_of``) come
from the one taxonomy in ``robustvit.models.families``."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import math
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import torch
from torch import nn

from robustvit.errors import RobustvitError
from robustvit.models.families import FAMILIES, family_of  # noqa: F401  (re-exported)
from robustvit.models.probe import BlockProbe, ViTProbe, make_probe
from robustvit.options import NoOptions, option_names, options_dict, parse_options
from robustvit.registry import Registry
from robustvit.progress import progress_bar
from robustvit.runs import MemoryStore, UnitStore, collect, run_units
from robustvit.utils import derive_seed, eval_mode, resolve_device


UnitFn = Callable[[torch.Tensor, torch.Tensor, list[str], int], Iterator[tuple[str, Any]]]


@dataclass
class Context:
    """One analysis run: the model, its data and the settings every analysis uses."""

    model: nn.Module
    dataset: Any = None
    limit: int | None = None
    batch_size: int = 64
    seed: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    store: UnitStore = field(default_factory=MemoryStore)
    progress: bool = False
    name: str = ""                # the analysis (the store's key)
    _probe: ViTProbe | BlockProbe | None = None

    @property
    def probe(self) -> ViTProbe | BlockProbe:
        if self._probe is None:
            self._probe = make_probe(self.model)
        return self._probe

    @property
    def num_images(self) -> int:
        if self.dataset is None:
            return 0
        n = len(self.dataset)
        return n if self.limit is None else min(n, self.limit)

    def generator(self, *keys: object) -> torch.Generator:
        g = torch.Generator(device=self.device)
        g.manual_seed(derive_seed(self.seed, self.name, *keys))
        return g

    def batch(self, start: int, stop: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Images [start, stop) of the data set on the device."""
        ids = torch.arange(start, min(stop, self.num_images))
        x, y = self.dataset.get_batch(ids)
        return x.to(self.device).float(), torch.as_tensor(y).to(self.device)

    def units(self, parts: list[str], fn: UnitFn, *, max_images: int | None = None) -> dict[str, Any]:
        """Run ``fn(x, y, pending parts, chunk)`` on every chunk of ``batch_size`` images that has parts not
        yet in the store (the run engine's scheduler, task = this analysis); ``fn`` yields ``(part, stats)`` and
        each is stored as it comes. Returns the stats summed over chunks per part."""
        n = self.num_images if max_images is None else min(self.num_images, max_images)
        if n < 1:
            raise RobustvitError(f"analysis {self.name} needs images; the data set is empty")
        bs, nchunks = self.batch_size, math.ceil(n / self.batch_size)

        def load(chunks: list[int]) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
            return (self.batch(c * bs, min(n, (c + 1) * bs)) for c in chunks)

        def work(data: tuple[torch.Tensor, torch.Tensor], c: int, pending: list[tuple[str, str]]
                 ) -> Iterator[tuple[tuple[str, str], Any]]:
            for part, stats in fn(data[0], data[1], [p for _, p in pending], c):
                yield (self.name, part), stats

        with torch.no_grad():
            run_units(self.store, nchunks, lambda c: [(self.name, p) for p in parts], work, load=load,
                      device=self.device, progress=lambda k: progress_bar(self.progress, self.name, k))
        return collect(self.store, self.name, parts, nchunks)


def model_device(model: nn.Module) -> torch.device:
    """The device of ``model``'s first parameter (else its first buffer); the CPU for a model with neither."""
    for t in model.parameters():
        return t.device
    for t in model.buffers():
        return t.device
    return torch.device("cpu")


def _same_device(a: torch.device, b: torch.device) -> bool:
    def norm(d: torch.device) -> torch.device:
        return torch.device("cuda", torch.cuda.current_device()) if d.type == "cuda" and d.index is None else d
    return norm(a) == norm(b)


def model_on(model: nn.Module, device: str | torch.device | None = None) -> tuple[nn.Module, torch.device]:
    """``(model, device)`` for running ``model`` on ``device`` without moving the caller's model.

    ``None`` or the model's own device: the model itself. Another device (``"auto"``: CUDA when available): a
    copy there, its weights copied straight to the target (no second copy on the source device). Move the model
    yourself (``model.to(device)``) to avoid the copy."""
    own = model_device(model)
    if device is None:
        return model, own
    dev = resolve_device(device)
    if _same_device(own, dev):
        return model, own
    memo: dict[int, Any] = {}
    for m in model.modules():
        for p in m._parameters.values():
            if p is not None and id(p) not in memo:
                memo[id(p)] = nn.Parameter(p.detach().to(dev), requires_grad=p.requires_grad)
        for b in m._buffers.values():
            if b is not None and id(b) not in memo:
                memo[id(b)] = b.detach().to(dev)
    return copy.deepcopy(model, memo).to(dev), dev


def make_context(model: nn.Module, dataset: Any = None, *, limit: int | None = None, batch_size: int = 64,
                 seed: int = 0, device: str | torch.device | None = None, store: UnitStore | None = None,
                 progress: bool = False, name: str = "") -> Context:
    """The run context of an analysis, the model in eval mode on ``device`` (:func:`model_on`: the caller's model
    is never moved)."""
    if batch_size < 1:
        raise RobustvitError(f"batch size must be >= 1, got {batch_size}")
    if limit is not None and limit < 1:
        raise RobustvitError(f"--limit must be >= 1, got {limit}")
    model, dev = model_on(model, device)
    return Context(model=model.eval(), dataset=dataset, limit=limit, batch_size=batch_size, seed=seed,
                   device=dev, store=store if store is not None else MemoryStore(), progress=progress, name=name)


#: The keywords of the plain functions (``lesion(model, data, limit=256)``) that set up the run, not the analysis.
RUN_KEYWORDS = ("limit", "batch_size", "seed", "device", "store", "progress")


class Analysis:
    """A registered analysis (``@register_analysis`` on the class). Subclasses set ``name``, ``families``
    (the model families it applies to, :data:`FAMILIES`), ``description``, ``Options`` (a dataclass: each
    option's type, default and bounds, stated once; the CLI accepts ``name:key=value``), and implement
    ``run(ctx, options)`` (→ plain data; keys starting with ``_`` carry figure data and are not written to
    JSON) and ``plot(result, out)`` (→ PNG file names)."""

    name: str = ""
    aliases: tuple[str, ...] = ()
    families: tuple[str, ...] = FAMILIES
    description: str = ""
    Options: type = NoOptions
    needs_data: bool = True
    #: Options of a tiny, fast run (capabilities and the contract tests).
    smoke: ClassVar[dict[str, Any]] = {}
    #: Whether it looks inside the model (the probe: tokens, attention); False when it only calls the model.
    requires_probe: ClassVar[bool] = False
    #: The paper's number of images (recorded with each result; robustvit.protocols labels fewer); None: none.
    paper_images: ClassVar[int | None] = None
    #: The model families ``robustvit demo`` runs it on (``"vit"``, ``"cnn"``).
    demo: ClassVar[tuple[str, ...]] = ()

    @staticmethod
    def check(result: dict[str, Any]) -> str | None:
        """A broken invariant of a result (one line) for capabilities and the contract tests; None when it holds.
        Finite numbers and accuracies in [0, 1] are checked for every analysis; a subclass adds its own."""
        return None

    @property
    def options(self) -> dict[str, Any]:
        """The default options as plain data."""
        return options_dict(self.Options())

    def parse(self, raw: Mapping[str, Any] | None = None) -> Any:
        """``raw`` (spec strings or typed values) as an ``Options`` instance; one-line errors naming the key,
        the value and what is valid."""
        return parse_options(self.Options, raw, what=f"analysis {self.name!r}")

    def parse_options(self, raw: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """``raw`` checked and typed, as the plain dict results record (``options_dict`` of :meth:`parse`)."""
        return options_dict(self.parse(raw))

    def compute(self, ctx: Context, **options: Any) -> dict[str, Any]:
        """Run on ``ctx`` with ``options`` parsed; the result records them."""
        opts = self.parse(options)
        return {**self.run(ctx, opts), "options": options_dict(opts)}

    def run(self, ctx: Context, options: Any) -> dict[str, Any]:
        raise NotImplementedError

    def plot(self, result: dict[str, Any], out: Path) -> list[str]:
        return []

    def apply(self, model: nn.Module, dataset: Any = None, **kwargs: Any) -> dict[str, Any]:
        """The analysis as a plain function: the ``Options`` fields and the run's keywords
        (:data:`RUN_KEYWORDS`: limit, batch_size, seed, device, store, progress) as keyword arguments."""
        fields_ = set(option_names(self.Options))
        bad = sorted(k for k in kwargs if k not in fields_ and k not in RUN_KEYWORDS)
        if bad:
            raise RobustvitError(f"{self.name}() takes no keyword {', '.join(map(repr, bad))}; its options: "
                                 f"{', '.join(sorted(fields_)) or 'none'}; run keywords: {', '.join(RUN_KEYWORDS)}")
        run = {k: kwargs.pop(k) for k in RUN_KEYWORDS if k in kwargs}
        with eval_mode(model):       # the caller's model keeps its own train/eval flags
            return self.compute(make_context(model, dataset, name=self.name, **run), **kwargs)

    @classmethod
    def function(cls, doc: str) -> Callable[..., dict[str, Any]]:
        """The analysis as a plain function ``f(model, dataset=None, **keywords)`` (:meth:`apply`) with ``doc``
        as docstring and a signature listing the ``Options`` fields with their defaults, then the run keywords."""
        analysis = cls()

        def fn(model: nn.Module, dataset: Any = None, **kwargs: Any) -> dict[str, Any]:
            return analysis.apply(model, dataset, **kwargs)

        hints = typing.get_type_hints(cls.Options)
        params = list(inspect.signature(fn).parameters.values())[:2]
        for f in dataclasses.fields(cls.Options):
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
            params.append(inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                            annotation=hints.get(f.name, Any)))
        params.append(inspect.Parameter("run", inspect.Parameter.VAR_KEYWORD))
        fn.__signature__ = inspect.signature(fn).replace(parameters=params)  # type: ignore[attr-defined]
        fn.__name__ = fn.__qualname__ = cls.name
        fn.__module__, fn.__doc__ = cls.__module__, doc
        return fn


ANALYSES: Registry[Analysis] = Registry("analysis", package="robustvit.analysis", hint="see `robustvit list analyses`")
A = TypeVar("A", bound=type)


def register_analysis(cls: A) -> A:
    """Class decorator: register an instance of an :class:`Analysis` subclass in :data:`ANALYSES`."""
    ANALYSES.register(cls())
    return cls


def list_analyses(pattern: str | None = None) -> list[str]:
    """Registered analysis names, optionally filtered by a shell-style pattern."""
    return ANALYSES.list(pattern)


def get_analysis(name: str) -> Analysis:
    return ANALYSES.get(name)


def analyses_for(family: str) -> list[str]:
    """The analyses that apply to a model family (vit, deit, xcit, swin, fan, cnn)."""
    return [n for n, a in ANALYSES.items() if family in a.families]


def check_family(name: str, family: str, model_name: str = "") -> None:
    """A one-line error when analysis ``name`` does not apply to ``family``."""
    a = get_analysis(name)
    if family not in a.families:
        which = f" ({model_name})" if model_name else ""
        raise RobustvitError(f"analysis {name} does not apply to {family} models{which}; it applies to "
                             f"{', '.join(a.families)}; for {family} use: {', '.join(analyses_for(family)) or 'none'}")


def accuracy_stats(logits: torch.Tensor, y: torch.Tensor) -> dict[str, int]:
    return {"correct": int((logits.argmax(1) == y).sum()), "n": int(len(y))}


def accuracy(stats: dict[str, int]) -> float:
    return stats["correct"] / max(1, stats["n"])


def tolist(t: torch.Tensor, digits: int = 6) -> Any:
    """A tensor as nested lists of rounded floats (JSON-friendly)."""
    return torch.round(t.detach().double().cpu(), decimals=digits).tolist()


def grid_coords(grid: tuple[int, int]) -> torch.Tensor:
    """(P, 2) (row, column) of each patch of a ``(gh, gw)`` grid, row-major."""
    r, c = torch.meshgrid(torch.arange(grid[0]), torch.arange(grid[1]), indexing="ij")
    return torch.stack([r.flatten(), c.flatten()], 1)
