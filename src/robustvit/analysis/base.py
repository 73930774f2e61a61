"""What every analysis shares: model families, the run context (data chunks, seeds, the unit store)
and the ``Analysis`` base class that the registry holds."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from robustvit.errors import RobustvitError
from robustvit.models.probe import BlockProbe, ViTProbe, make_probe
from robustvit.progress import progress_bar
from robustvit.runs import MemoryStore, UnitStore, collect, run_units
from robustvit.utils import derive_seed, resolve_device

#: Model families the registry speaks of.
FAMILIES = ("vit", "deit", "xcit", "swin", "fan", "cnn")
#: The paper's number of images for studies over a data set (Bhojanapalli et al.: 4096; ViT: 128).
PAPER_IMAGES = {"correlation": 4096, "attention_distance": 128}

UnitFn = Callable[[torch.Tensor, torch.Tensor, list[str], int], Iterator[tuple[str, Any]]]


def family_of(model: nn.Module) -> str:
    """The analysis family of a model: vit, deit, xcit, swin, fan, cnn, or other."""
    fam = getattr(getattr(model, "spec", None), "family", None)
    if fam in ("vit", "deit", "xcit", "swin", "fan"):
        return fam
    if fam in ("resnet", "convnext"):
        return "cnn"
    try:
        probe = make_probe(model)
    except RobustvitError:
        return "other"
    return probe.family if isinstance(probe, BlockProbe) else "vit"


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


def make_context(model: nn.Module, dataset: Any = None, *, limit: int | None = None, batch_size: int = 64,
                 seed: int = 0, device: str | torch.device | None = "cpu", store: UnitStore | None = None,
                 progress: bool = False, name: str = "") -> Context:
    if batch_size < 1:
        raise RobustvitError(f"batch size must be >= 1, got {batch_size}")
    if limit is not None and limit < 1:
        raise RobustvitError(f"--limit must be >= 1, got {limit}")
    dev = resolve_device(device)
    return Context(model=model.to(dev).eval(), dataset=dataset, limit=limit, batch_size=batch_size, seed=seed,
                   device=dev, store=store if store is not None else MemoryStore(), progress=progress, name=name)


class Analysis:
    """A registered analysis. Subclasses set ``name``, ``families``, ``description``, ``options``
    (defaults; the CLI accepts ``name:key=value``), and implement ``compute`` (→ plain data; keys starting
    with ``_`` carry figure data and are not written to JSON) and ``plot`` (→ PNG file names)."""

    name: str = ""
    families: tuple[str, ...] = FAMILIES
    description: str = ""
    options: dict[str, Any] = {}
    needs_data: bool = True

    def compute(self, ctx: Context, **options: Any) -> dict[str, Any]:
        raise NotImplementedError

    def plot(self, result: dict[str, Any], out: Path) -> list[str]:
        return []

    def parse_options(self, raw: dict[str, Any]) -> dict[str, Any]:
        """Defaults updated by ``raw`` (strings from the CLI are cast to the default's type)."""
        opts = dict(self.options)
        for k, v in raw.items():
            if k not in opts:
                raise RobustvitError(f"analysis {self.name} takes no option {k!r}; its options: "
                                     f"{', '.join(sorted(opts)) or 'none'}")
            default = opts[k]
            if isinstance(v, str) and default is not None and not isinstance(default, str):
                try:
                    if isinstance(default, bool):
                        v = v.lower() in ("1", "true", "yes", "on")
                    elif isinstance(default, (list, tuple)):
                        v = [type(default[0])(t) for t in v.replace("+", " ").split()] if default else v.split("+")
                    else:
                        v = type(default)(v)
                except ValueError:
                    raise RobustvitError(f"analysis {self.name}: option {k}={v!r} is not a "
                                         f"{type(default).__name__}") from None
            opts[k] = v
        return opts


def accuracy_stats(logits: torch.Tensor, y: torch.Tensor) -> dict[str, int]:
    return {"correct": int((logits.argmax(1) == y).sum()), "n": int(len(y))}


def accuracy(stats: dict[str, int]) -> float:
    return stats["correct"] / max(1, stats["n"])


def tolist(t: torch.Tensor, digits: int = 6) -> Any:
    """A tensor as nested lists of rounded floats (JSON-friendly)."""
    return torch.round(t.detach().double().cpu(), decimals=digits).tolist()
