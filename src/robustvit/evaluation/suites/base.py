"""The evaluation-suite interface and registry.

A suite turns a model and a data set into a JSON-able result. The runner (``robustvit.evaluation.runner``) splits
the work into *units* — (suite, part, chunk of images) — and stores each unit's statistics in SQLite as soon as it
finishes, so an interrupted run resumes where it stopped. A suite therefore writes ``parts(ctx)`` (the independent
pieces of work per chunk, e.g. one per corruption × severity), ``run(ctx, part, batch)`` (one chunk's statistics: a
nested dict of numbers, **additive** across chunks — counts and sums, not means) and ``finalize(ctx, stats)`` (the
summed statistics of every part → the suite's JSON result).

Options: a nested ``Options`` dataclass extending :class:`SuiteOptions`, parsed from the spec
(``pgd:eps=1/255:steps=20``) by :func:`robustvit.options.parse_options` (an unknown key, an empty, NaN or
out-of-range value is a one-line error); ``suite.opts`` holds them all, ``suite.options`` those given (typed), and
every result records ``"options": options_dict(suite.opts)``.

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

import functools
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import torch
from torch import nn

from robustvit.data import parse_data_spec
from robustvit.data.subset import SUBSET_METHODS, dataset_labels
from robustvit.errors import RobustvitError
from robustvit.options import describe, option, option_names, options_dict, parse_options
from robustvit.registry import Registry, parse_spec

#: Data sources whose attack budgets follow the CIFAR convention (RobustBench: L∞ 8/255, L2 0.5).
CIFAR_SOURCES = ("cifar10", "cifar100")


@dataclass
class Batch:
    """One chunk of evaluation data, already on the device."""

    x: torch.Tensor            # float (N, 3, H, W) in [0, 1]
    y: torch.Tensor            # long (N,)
    index: torch.Tensor        # long (N,): positions of these images among the suite's images (0 = its first)
    generator: torch.Generator  # seeded from (run seed, suite key, part, chunk): replayable
    data_index: torch.Tensor | None = None   # long (N,): their indices in the data set (None: equal to ``index``)
    chunk: int = 0             # the unit's chunk among the suite's chunks (0 = its first)
    chunks: int = 1            # how many chunks the suite's images make

    @property
    def ids(self) -> torch.Tensor:
        """The images' indices in the data set (to read the same images from an aligned source)."""
        return self.index if self.data_index is None else self.data_index


@dataclass
class EvalContext:
    """What a suite may look at: ``model`` under test (a ``Normalized`` wrapper with ``.spec``), ``models``
    (every model of the run by name, for transfer-style suites), the data, and the typed data convention
    (``image_size``, ``data_source``), filled in from the model and the data spec when not given."""

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
    image_size: int | None = None       # the model's input side (default: ``model.spec.image_size``)
    data_source: str | None = None      # the source of ``data_spec`` (``cifar10``, ``imagenet``, …)
    class_map: Any = None               # the run's ``--class-map`` (None: the model's classes are the data's)

    def __post_init__(self) -> None:
        spec = self.spec
        if self.image_size is None and spec is not None and getattr(spec, "image_size", None):
            self.image_size = int(spec.image_size)
        if self.data_source is None:
            self.data_source = data_source_of(self.data_spec)

    @property
    def spec(self) -> Any:
        """The model's ``ModelSpec`` (None for a bare module)."""
        return getattr(self.model, "spec", None)

    @property
    def convention(self) -> str:
        """``cifar`` for CIFAR-10/100 data, else ``imagenet``: the attack-budget convention (RobustBench)."""
        return "cifar" if self.data_source in CIFAR_SOURCES else "imagenet"

    @property
    def class_names(self) -> list[str]:
        """The model's class names (empty when it has none)."""
        return list(getattr(self.spec, "class_names", None) or [])


def data_source_of(data_spec: str) -> str:
    """The source name of a data spec (``cifar10:test`` → ``cifar10``)."""
    text = str(data_spec or "")
    if ":" not in text:
        return text
    try:
        return str(parse_data_spec(text)[0])
    except RobustvitError:
        return text.split(":", 1)[0]


@dataclass
class Plan:
    """What the runner does for a suite on one model (:meth:`Suite.plan`): the ``parts`` of every chunk and the
    images they read — ``data``, one data set for every part (None: the run's ``--data``); or, with ``size`` (the
    suite's own images 0 … size−1; ``labels`` for a class-stratified ``limit=``), ``part_data`` ({part: data set}
    of the same images, ImageNet-C units), else nothing: the suite reads them from ``batch.ids``."""

    parts: list[str]
    data: Any = None
    size: int | None = None
    labels: torch.Tensor | None = None
    part_data: dict[str, Any] | None = None


@dataclass
class SuiteOptions:
    """The options every suite takes."""

    limit: int | None = option(None, min=1, help="evaluate this many of the run's images (see subset)")
    subset: Literal[SUBSET_METHODS] | None = option(None, help="how limit= draws them: stratified (seeded, classes in "
                                                   "proportion) or first (default: the run's --subset-method)")


class Suite:
    """Base class of evaluation suites: subclasses set ``name``, declare ``Options`` (a :class:`SuiteOptions`
    subclass) and implement ``run``/``finalize``. ``max_images`` (option ``limit``) caps the images the runner
    draws for it from the run's (option ``subset``; see ``robustvit.data.subset``)."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    aliases: ClassVar[tuple[str, ...]] = ()
    Options: ClassVar[type] = SuiteOptions
    #: The suite's own data set (``dataset``), when as long as the run's, holds the run's images at the same
    #: positions (ImageNet-C next to ImageNet validation): it then takes the run's images (``--limit``, ``--subset``).
    data_aligned: ClassVar[bool] = False
    #: The suite reads the model's class predictions, so the model's classes must be the data's (or mapped onto
    #: them with ``--class-map``); a suite of features only (``fewshot``) sets it False.
    uses_head: ClassVar[bool] = True
    #: ``--precision auto`` runs the suite in bfloat16 on CUDA (plain accuracies: clean, corruptions, shifts);
    #: suites whose numbers hinge on small logit differences or gradients (attacks, flip rates) stay in fp32.
    low_precision: ClassVar[bool] = False
    #: Options of a tiny, fast run (capabilities and the contract tests).
    smoke: ClassVar[dict[str, Any]] = {}
    #: Whether the suite looks inside the model (the ViT probe), so it applies to ViTs only.
    requires_probe: ClassVar[bool] = False
    #: How ``robustvit demo`` runs the suite: (specs of the default plan, specs of the quick plan); None runs it
    #: once under its bare name.
    demo: ClassVar[tuple[tuple[str, ...], tuple[str, ...]] | None] = None
    #: Why ``robustvit demo`` does not run the suite ("" when it does).
    demo_skip: ClassVar[str] = ""
    #: The suite evaluates what it makes on one model on the run's other models (``transfer``): every model must
    #: then read the same images (the same preprocessing).
    across_models: ClassVar[bool] = False

    def __init__(self, limit: int | None = None, subset: str | None = None, **options: Any) -> None:
        given = {k: v for k, v in (("limit", limit), ("subset", subset)) if v is not None}
        given.update({str(k).replace("-", "_"): v for k, v in options.items()})
        for k, v in given.items():
            if isinstance(v, str) and not v.strip():
                raise RobustvitError(f"suite {self.name!r}: option {k}= has no value; write {k}=VALUE "
                                     f"(its options: {', '.join(option_names(type(self).Options))})")
        self.opts: Any = parse_options(type(self).Options, given, what=f"suite {self.name!r}")
        #: The options given in the spec, typed (the others fall back to the run's, see :meth:`option`).
        self.options: dict[str, Any] = {k: getattr(self.opts, k) for k in given}
        self.max_images: int | None = self.opts.limit
        self.subset_method: str | None = self.opts.subset
        self.subset_info: dict[str, Any] | None = None   # set by the runner: the images evaluated (results.json)
        self.subset_note: str | None = None              # set by the runner: why they are not comparable
        self.key = self.name   # the spec as written (set by ``create_suite``): the results.json key

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Every ``finalize`` records the parsed options in its result (``"options"``)."""
        super().__init_subclass__(**kwargs)
        fin = cls.__dict__.get("finalize")
        if fin is not None and not getattr(fin, "records_options", False):
            @functools.wraps(fin)
            def finalize(self: Suite, ctx: EvalContext, stats: dict[str, dict[str, Any]]) -> dict[str, Any]:
                res = fin(self, ctx, stats)
                if isinstance(res, dict):
                    res.setdefault("options", options_dict(self.opts))
                return res
            finalize.records_options = True   # type: ignore[attr-defined]
            cls.finalize = finalize           # type: ignore[method-assign]

    def option(self, ctx: EvalContext, key: str, default: Any = None) -> Any:
        """A suite option given in the spec, else the run's global option of that name (``--eps``, typed as
        the suite's option), else ``default``."""
        if key in self.options:
            return self.options[key]
        value = ctx.options.get(key)
        if value is None:
            return default
        if key in option_names(type(self).Options):
            value = getattr(parse_options(type(self).Options, {key: value}, what=f"--{key} (suite {self.name!r})"), key)
        return value

    def plan(self, ctx: EvalContext) -> Plan:
        """What the runner does for this suite (:class:`Plan`); by default built from :meth:`parts`,
        :meth:`dataset` and :meth:`part_datasets`."""
        own, part_data = self.dataset(ctx), self.part_datasets(ctx)
        if part_data is None:
            return Plan(self.parts(ctx), data=own)
        return Plan(self.parts(ctx), size=len(own), labels=dataset_labels(own), part_data=part_data)

    def parts(self, ctx: EvalContext) -> list[str]:
        return ["all"]

    def dataset(self, ctx: EvalContext) -> Any | None:
        """A data set of the suite's own (e.g. ImageNet-R) instead of the run's; None = the run's."""
        return None

    def part_datasets(self, ctx: EvalContext) -> dict[str, Any] | None:
        """For a suite whose parts read files of their own (ImageNet-C units): {part: data set of the same images,
        position i = the suite's image i}. The runner's loader reads them in its workers and each part's ``run``
        gets its own images in ``batch.x``; None (default): every part gets the chunk's images."""
        return None

    def run(self, ctx: EvalContext, part: str, batch: Batch) -> dict[str, Any]:
        raise NotImplementedError

    def finalize(self, ctx: EvalContext, stats: dict[str, dict[str, Any]]) -> dict[str, Any]:
        raise NotImplementedError


#: ``--precision`` values: ``auto`` (bf16 on CUDA for the ``low_precision`` suites, fp32 otherwise) or one for all.
PRECISION_CHOICES = ("auto", "fp32", "tf32", "bf16")


def suite_precision(requested: str, device: torch.device, suite: Suite) -> str:
    """The precision ``suite`` runs in under ``--precision requested`` on ``device``."""
    if requested not in PRECISION_CHOICES:
        raise RobustvitError(f"--precision must be one of {', '.join(PRECISION_CHOICES)}, got {requested!r}")
    if requested != "auto":
        return requested
    return "bf16" if device.type == "cuda" and suite.low_precision else "fp32"


def nonfinite_result(key: str, count: int) -> dict[str, Any]:
    """``{"num_nonfinite": count}`` and a warning when images had NaN/infinite logits (counted wrong, never
    correct nor robust: see :mod:`robustvit.metrics.accuracy`); ``{}`` when there were none."""
    if not count:
        return {}
    warnings.warn(f"suite {key}: {count} image(s) gave NaN or infinite logits; they count as misclassified "
                  "(num_nonfinite in the result)", stacklevel=2)
    return {"num_nonfinite": int(count)}


SUITES: Registry[type[Suite]] = Registry("suite", package="robustvit.evaluation.suites",
                                         hint="see `robustvit list suites`")
register_suite = SUITES.register


def suite_options(name: str) -> list[dict[str, Any]]:
    """Each option of a suite — name, type, default, help — for ``robustvit list suites --options``."""
    return describe(get_suite_class(name).Options)


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
    suite = SUITES.get(name)(**options)
    suite.key = spec.strip()
    return suite
