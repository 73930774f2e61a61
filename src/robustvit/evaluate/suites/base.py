"""The evaluation-suite interface and registry.

A suite turns a model and a data set into a JSON-able result. The runner (``robustvit.evaluate.runner``)
splits the work into *units* — (suite, part, chunk of images) — and stores each unit's statistics in
SQLite as soon as it finishes, so an interrupted run resumes where it stopped.

A suite therefore only writes three things:

* ``parts(ctx)``: the independent pieces of work per chunk (e.g. one per corruption × severity);
* ``run(ctx, part, batch)``: statistics for one chunk, as a nested dict of numbers or lists of numbers
  that are **additive** across chunks (counts, sums — not means);
* ``finalize(ctx, stats)``: turn the summed statistics of every part into the suite's JSON result.

Example::

    @register_suite
    class Clean(Suite):
        name = "clean"
        def run(self, ctx, part, batch):
            logits = ctx.model(batch.x)
            return {"n": len(batch.y), "correct": int((logits.argmax(1) == batch.y).sum())}
        def finalize(self, ctx, stats):
            s = stats["all"]
            return {"top1": s["correct"] / s["n"]}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn

from robustvit.data.subset import SUBSET_METHODS
from robustvit.errors import RobustvitError
from robustvit.registry import Registry, parse_spec


@dataclass
class Batch:
    """One chunk of evaluation data, already on the device."""

    x: torch.Tensor            # float (N, 3, H, W) in [0, 1]
    y: torch.Tensor            # long (N,)
    index: torch.Tensor        # long (N,): positions of these images among the suite's images (0 = its first)
    generator: torch.Generator  # seeded from (run seed, suite key, part, chunk): replayable
    data_index: torch.Tensor | None = None   # long (N,): their indices in the data set (None: equal to ``index``)

    @property
    def ids(self) -> torch.Tensor:
        """The images' indices in the data set (to read the same images from an aligned source)."""
        return self.index if self.data_index is None else self.data_index


@dataclass
class EvalContext:
    """What a suite may look at. ``model`` is the model under test (a ``Normalized`` wrapper with
    ``.spec``); ``models`` holds every model of the run by name (for transfer-style suites)."""

    model: nn.Module
    model_name: str
    models: dict[str, nn.Module]
    data_spec: str
    dataset: Any
    num_classes: int
    device: torch.device
    seed: int
    options: dict[str, Any] = field(default_factory=dict)   # global CLI options (--eps, --norm, --steps …)
    out_dir: Path | None = None
    subset: Any = None         # the run's images (``robustvit.data.subset.Subset``; None: all, in order)


class Suite:
    """Base class of evaluation suites. Subclasses set ``name`` and implement ``run``/``finalize``.

    Constructor keyword options come from the suite spec (``pgd:eps=1/255:steps=20``); unknown options
    are rejected. ``max_images`` (option ``limit``) caps the images this suite sees: the runner draws them from
    the run's images (option ``subset``: ``stratified`` — a seeded class-stratified sample, nested in the run's —
    or ``first``; default the run's ``--subset-method``), see ``robustvit.data.subset``.
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    option_names: ClassVar[tuple[str, ...]] = ()
    #: The suite's own data set (``dataset``), when as long as the run's, holds the run's images at the same
    #: positions (ImageNet-C next to ImageNet validation): it then takes the run's images (``--limit``, ``--subset``).
    data_aligned: ClassVar[bool] = False

    def __init__(self, limit: int | None = None, subset: str | None = None, **options: Any) -> None:
        unknown = set(options) - set(self.option_names)
        if unknown:
            raise RobustvitError(
                f"suite {self.name!r} has no option {sorted(unknown)[0]!r}"
                + (f"; options: {', '.join(self.option_names)}" if self.option_names else "; it takes no options"))
        try:
            self.max_images = None if limit is None else int(limit)
        except ValueError:
            raise RobustvitError(f"suite {self.name!r}: limit must be an integer, got {limit!r}") from None
        if subset is not None and subset not in SUBSET_METHODS:
            raise RobustvitError(f"suite {self.name!r}: subset must be {' or '.join(SUBSET_METHODS)}, got {subset!r}")
        self.subset_method: str | None = subset
        self.subset_info: dict[str, Any] | None = None   # set by the runner: the images evaluated (results.json)
        self.subset_note: str | None = None              # set by the runner: why they are not comparable
        self.options = options
        self.key = self.name   # the spec as written (set by ``create_suite``): the results.json key

    def option(self, ctx: EvalContext, key: str, default: Any = None) -> Any:
        """A suite option, else the run's global option of that name, else ``default``."""
        if key in self.options:
            return self.options[key]
        value = ctx.options.get(key)
        return default if value is None else value

    def parts(self, ctx: EvalContext) -> list[str]:
        return ["all"]

    def dataset(self, ctx: EvalContext) -> Any | None:
        """A data set of the suite's own (e.g. ImageNet-R) instead of the run's; None = the run's."""
        return None

    def run(self, ctx: EvalContext, part: str, batch: Batch) -> dict[str, Any]:
        raise NotImplementedError

    def finalize(self, ctx: EvalContext, stats: dict[str, dict[str, Any]]) -> dict[str, Any]:
        raise NotImplementedError


def _load_builtin_suites() -> None:
    import robustvit.evaluate.suites  # noqa: F401  (importing the package registers the built-in suites)


SUITES: Registry[type[Suite]] = Registry("suite", loader=_load_builtin_suites, hint="see `robustvit list suites`")
register_suite = SUITES.register


def list_suites(pattern: str | None = None) -> list[str]:
    """Registered suite names, optionally filtered by a shell-style pattern."""
    return SUITES.list(pattern)


def get_suite_class(name: str) -> type[Suite]:
    return SUITES.get(name)


def parse_suite_spec(spec: str) -> tuple[str, dict[str, str]]:
    """``"pgd:eps=1/255:steps=20"`` → ``("pgd", {"eps": "1/255", "steps": "20"})``."""
    return parse_spec(spec, "suite")


def create_suite(spec: str) -> Suite:
    """Build a suite from its spec string; the result key in results.json is the spec as written."""
    name, options = parse_suite_spec(spec)
    suite = SUITES.create(name, **options)
    suite.key = spec.strip()
    return suite
