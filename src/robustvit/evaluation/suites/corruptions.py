"""Suite ``corruptions``: accuracy under the common corruptions of ImageNet-C / CIFAR-10-C; mCE, retention.

Hendrycks & Dietterich, "Benchmarking Neural Network Robustness to Common Corruptions and Perturbations",
ICLR 2019 (arXiv:1903.12261); retention rate from FAN (Zhou et al., arXiv:2204.12451); "IN-C w/o noise"
from AFAT. Metrics: ``robustvit.metrics.corruption``; options and result keys: docs/corruptions.md.

The run's images are corrupted on the device (``robustvit.corruptions.corrupt``) with the unit's seeded
generator, one part per corruption × severity plus ``clean``. With ``source=DIR`` (:class:`StoredCorruptions`,
built by the same name) the images are read instead from a released or ``robustvit corrupt``-written ImageNet-C
tree or CIFAR-10/100-C folder (``robustvit.data.corrupted``), or an ImageNet-3DCC tree (Kar et al., CVPR 2022,
arXiv:2203.01441; RobustBench's ``corruptions_3d``: ``corruptions_acc_3d``, ``corruptions_mce_3d`` from
``robustvit.metrics.corruption.ALEXNET_ERRORS_3DCC``); ``clean`` then reads the run's ``--data`` at the same
positions when it matches. ``jpeg_quality=auto`` applies the released files' JPEG-85 round trip to ImageNet
validation images corrupted with the ``imagenet`` table, so that mCE compares with the published tables;
``mce_protocol`` / ``mce_approximations`` say how the images differ from the released files.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F

from robustvit.corruptions import BENCHMARK_CORRUPTIONS, CORRUPTION_GROUPS, corrupt
from robustvit.corruptions.frost import frost_source
from robustvit.corruptions.params import parse_corruptions, parse_severities, resolve_preset
from robustvit.data import UNREADABLE
from robustvit.data.corrupted import CorruptedSource, open_corrupted
from robustvit.data.subset import SubsetDataset, dataset_labels
from robustvit.errors import RobustvitError
from robustvit.evaluation.suites.base import (Batch, EvalContext, Plan, Suite, SuiteOptions, data_source_of,
                                            register_suite)
from robustvit.metrics.accuracy import correct
from robustvit.metrics.corruption import (ALEXNET_ERRORS, ALEXNET_ERRORS_3DCC, NOISE_CORRUPTIONS, corruption_error,
                                          mean_or_none, relative_corruption_error, retention)
from robustvit.options import option
from robustvit.protocols import CORRUPTIONS_3DCC

GROUP_NAMES = ("noise", "blur", "weather", "digital", "extra")
CLEAN = "clean"


def _image_size(ctx: EvalContext) -> int | None:
    """``ctx.image_size``; the protocol checks below also take a duck-typed context (model + data spec)."""
    if isinstance(ctx, EvalContext):
        return ctx.image_size
    return getattr(getattr(ctx.model, "spec", None), "image_size", None)


def _data_source(ctx: EvalContext) -> str:
    return ctx.data_source or "" if isinstance(ctx, EvalContext) else data_source_of(ctx.data_spec)


def part_name(name: str, severity: int) -> str:
    return f"{name}/{severity}"


def _split(part: str) -> tuple[str, int]:
    """``"fog/3"`` → ``("fog", 3)``."""
    name, severity = part.rsplit("/", 1)
    return name, int(severity)


class CorruptionSuite(Suite):
    """What both corruption suites share: the options, the parts, accuracy per unit and the result. A subclass
    gives the images of a unit (:meth:`_images`) and the protocol facts (preset, JPEG, mCE reason, approximations)."""

    name = "corruptions"
    smoke = {"corruptions": ["gaussian_noise", "contrast"], "severities": [1]}
    demo = ("corruptions:limit=100",), ("corruptions:limit=40:severities=1+3+5",)
    low_precision = True
    description = "common corruptions (ImageNet-C / CIFAR-10-C): accuracy per corruption × severity, mCE, retention"
    data_aligned = True

    @dataclass
    class Options(SuiteOptions):
        corruptions: str = option("all", help="a group (all, benchmark, noise, blur, weather, digital, extra) or "
                                              "names joined by +")
        severities: str = option("1-5", help="e.g. 1-5, 3 or 1+3+5")
        preset: str | None = option(None, help="parameter table: imagenet or cifar (default: by image size)")
        jpeg_quality: int | Literal["auto"] | None = option(
            "auto", min=1, max=100, help="JPEG round trip after corrupting (auto: 85 for ImageNet, as the released "
                                         "files; none: no round trip)")
        source: str | None = option(None, help="a stored ImageNet-C / CIFAR-10-C folder instead of corrupting "
                                               "in memory")

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.source = self.opts.source
        self.names = self._parse_names(self.opts.corruptions)
        self.severities = parse_severities(self.opts.severities)

    def _parse_names(self, spec: str) -> list[str]:
        """The corruption names of the ``corruptions=`` option."""
        return parse_corruptions(spec)

    def _units(self) -> list[str]:
        return [part_name(n, s) for n in self.names for s in self.severities]

    def _images(self, ctx: EvalContext, part: str, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, int]:
        """The images and labels of one unit, and how many of its images were unreadable."""
        raise NotImplementedError

    @torch.no_grad()
    def run(self, ctx: EvalContext, part: str, batch: Batch) -> dict[str, Any]:
        x, y, unreadable = self._images(ctx, part, batch)
        hits = correct(ctx.model(x), y).sum() if len(y) else 0     # a device tensor, read one unit late
        return {"n": int(len(y)), "correct": hits, "unreadable": unreadable}

    # ------------------------------------------------------------ protocol facts (see the subclasses)
    def _preset(self, ctx: EvalContext) -> str | None:
        return None

    def _jpeg_quality(self, ctx: EvalContext) -> int | None:
        return None

    def _data_reason(self, ctx: EvalContext) -> str | None:
        """Why the data is not ImageNet-C-like (AlexNet-normalised mCE undefined), or None."""
        raise NotImplementedError

    def _differences(self, ctx: EvalContext) -> list[str]:
        """How the images differ from the released ImageNet-C files (empty: they match)."""
        return []

    def _extra(self) -> dict[str, Any]:
        """The result's ``frost_source``, ``source_layout`` and ``num_classes`` (of a stored tree)."""
        return {"frost_source": None, "source_layout": None}

    def _mce_reason(self, ctx: EvalContext) -> str | None:
        """None when the AlexNet normalisation applies, else why not."""
        return self._data_reason(ctx) or self._unevaluated(BENCHMARK_CORRUPTIONS,
                                                           "mCE averages the 15 benchmark corruptions")

    def _unevaluated(self, required: Iterable[str], averages: str) -> str | None:
        """Why an mCE over ``required`` × severities 1-5 cannot be computed (None: it can)."""
        missing = [n for n in required if n not in self.names]
        if missing:
            return f"{averages}; {len(missing)} were not evaluated ({missing[0]} …)"
        if self.severities != [1, 2, 3, 4, 5]:
            return "CE sums the errors of severities 1-5; evaluate every severity"
        return None

    def _mce_3d_reason(self, ctx: EvalContext) -> str | None:
        """None when RobustBench's 3DCC mCE applies (see :class:`StoredCorruptions`)."""
        return "not ImageNet-3DCC"

    def _approximations(self, ctx: EvalContext) -> list[str]:
        """How the evaluation differs from the released ImageNet-C protocol (empty: it matches): images
        corrupted in memory unlike the released files, or a subset of the validation images."""
        return self._differences(ctx) + ([self.subset_note] if self.subset_note else [])

    def finalize(self, ctx: EvalContext, stats: dict[str, dict[str, Any]]) -> dict[str, Any]:
        def acc(part: str) -> float | None:
            s = stats.get(part, {})
            return s["correct"] / s["n"] if s.get("n") else None

        def errors(n: str) -> dict[int, float]:
            return {s: 1.0 - accuracy[n][str(s)] for s in self.severities}   # type: ignore[operator]

        accuracy = {n: {str(s): acc(part_name(n, s)) for s in self.severities} for n in self.names}
        per_corr = {n: mean_or_none(list(accuracy[n].values())) for n in self.names}
        bench = [n for n in BENCHMARK_CORRUPTIONS if n in self.names]
        curve_over = bench or list(self.names)
        per_sev = {str(s): mean_or_none([accuracy[n][str(s)] for n in curve_over]) for s in self.severities}
        clean = acc(CLEAN)
        mean_bench = mean_or_none([per_corr[n] for n in bench])
        no_noise = [n for n in bench if n not in NOISE_CORRUPTIONS]
        groups = {g: mean_or_none([per_corr[n] for n in CORRUPTION_GROUPS[g] if n in self.names])
                  for g in GROUP_NAMES if any(n in self.names for n in CORRUPTION_GROUPS[g])}
        reason = self._mce_reason(ctx)
        ce: dict[str, float] | None = None
        rce: dict[str, float] | None = None
        m = rm = None
        if reason is None:
            scored = [n for n in self.names if n in ALEXNET_ERRORS and None not in accuracy[n].values()]
            ce = {n: 100.0 * corruption_error(errors(n), ALEXNET_ERRORS[n]) for n in scored}
            m = mean_or_none([ce.get(n) for n in BENCHMARK_CORRUPTIONS])
            if clean is not None:
                rce = {n: 100.0 * relative_corruption_error(errors(n), 1.0 - clean, ALEXNET_ERRORS[n]) for n in scored}
                rm = mean_or_none([rce.get(n) for n in BENCHMARK_CORRUPTIONS])
            else:
                reason = "relative mCE needs the clean accuracy (give --data with the clean images of the source)"
        three_d = [n for n in CORRUPTIONS_3DCC if n in self.names]
        ce_3d: dict[str, float] | None = None
        if three_d and self._mce_3d_reason(ctx) is None and all(per_corr[n] is not None for n in three_d):
            ce_3d = {n: 100.0 * corruption_error(errors(n), ALEXNET_ERRORS_3DCC[n]) for n in three_d}
        approximations = self._approximations(ctx) if m is not None else []
        n_images = max((s.get("n", 0) + s.get("unreadable", 0) for s in stats.values()), default=0)
        unreadable = sum(int(s.get("unreadable", 0)) for s in stats.values())
        extra = self._extra()
        return {
            "accuracy": accuracy, "clean_accuracy": clean,
            "corruption_accuracy": per_corr, "severity_accuracy": per_sev,
            "mean_accuracy": mean_bench, "mean_over": bench,
            "mean_accuracy_all": mean_or_none([per_corr[n] for n in self.names]),
            "mean_accuracy_without_noise": mean_or_none([per_corr[n] for n in no_noise]),
            "groups": groups, "retention": retention(mean_bench, clean),
            "ce": ce, "relative_ce": rce, "mce": m, "relative_mce": rm, "mce_reason": reason,
            "mce_protocol": None if m is None else ("approximate" if approximations else "imagenet-c"),
            "mce_approximations": approximations,
            "frost_source": extra["frost_source"],
            "preset": self._preset(ctx), "jpeg_quality": self._jpeg_quality(ctx), "severities": list(self.severities),
            "corruptions": list(self.names), "source": None if self.source is None else str(Path(self.source)),
            "source_layout": extra["source_layout"],
            "num_images": int(n_images), "num_unreadable": unreadable,
            "corruptions_acc_3d": mean_or_none([per_corr[n] for n in three_d]),
            "corruptions_mce_3d": mean_or_none(list(ce_3d.values())) if ce_3d else None, "ce_3d": ce_3d,
            "num_classes": extra.get("num_classes"),
        }


@register_suite
class Corruptions(CorruptionSuite):
    """The run's images corrupted in memory; ``corruptions:source=DIR`` builds :class:`StoredCorruptions`."""

    def __new__(cls, **options: Any) -> Any:
        if cls is Corruptions and options.get("source") is not None:
            return StoredCorruptions(**options)
        return super().__new__(cls)

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.preset = self.opts.preset
        if self.preset is not None:
            resolve_preset(self.preset, 0, 0)   # checks the name
        self.auto_jpeg = self.opts.jpeg_quality == "auto"
        self.jpeg_quality: int | None = None if self.auto_jpeg else self.opts.jpeg_quality

    def parts(self, ctx: EvalContext) -> list[str]:
        return [CLEAN] + self._units()

    def _images(self, ctx: EvalContext, part: str, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, int]:
        """The chunk's images, corrupted here with the unit's generator (``clean``: as they are)."""
        if part == CLEAN:
            return batch.x, batch.y, 0
        x = corrupt(batch.x, *_split(part), generator=batch.generator, preset=self.preset,
                    jpeg_quality=self._jpeg_quality(ctx))
        return x, batch.y, 0

    def _preset(self, ctx: EvalContext) -> str | None:
        size = _image_size(ctx)
        return self.preset if size is None else resolve_preset(self.preset, int(size), int(size))

    def _imagenet(self, ctx: EvalContext) -> bool:
        """Whether ImageNet validation images (1000 classes) are corrupted with the imagenet table."""
        return (_data_source(ctx) == "imagenet" and getattr(ctx.dataset, "num_classes", None) == 1000
                and self._preset(ctx) == "imagenet")

    def _jpeg_quality(self, ctx: EvalContext) -> int | None:
        if self.auto_jpeg:
            return 85 if self._imagenet(ctx) else None
        return self.jpeg_quality

    def _data_reason(self, ctx: EvalContext) -> str | None:
        if _data_source(ctx) != "imagenet" or getattr(ctx.dataset, "num_classes", None) != 1000:
            return (f"the data ({ctx.data_spec}) is not ImageNet validation data with 1000 classes; AlexNet-"
                    "normalised mCE is defined for ImageNet-C only")
        if self._preset(ctx) != "imagenet":
            return "images were corrupted with the cifar preset; mCE needs the imagenet parameters"
        return None

    def _differences(self, ctx: EvalContext) -> list[str]:
        out = []
        size = _image_size(ctx)
        if size is not None and int(size) != 224:
            out.append(f"corrupted at {size} px, not 224: the spatial parameters were scaled")
        if self._jpeg_quality(ctx) != 85:
            out.append("no JPEG quality-85 round trip (the released files have one): use jpeg_quality=85")
        if "frost" in self.names and frost_source() == "procedural":
            out.append("frost used the procedural texture, not the ImageNet-C photographs: set ROBUSTVIT_FROST_DIR "
                       "(--frost-dir) or install imagecorruptions")
        return out

    def _extra(self) -> dict[str, Any]:
        return {"frost_source": frost_source() if "frost" in self.names else None, "source_layout": None}


class StoredCorruptions(CorruptionSuite):
    """``corruptions`` with ``source=``: stored images (built by ``create_suite("corruptions:source=…")``)."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        if self.opts.jpeg_quality not in ("auto", None) or self.opts.preset is not None:
            raise RobustvitError("source= reads stored images: preset= and jpeg_quality= do not apply; drop them")
        if "corruptions" not in self.options:    # default: every corruption the folder holds
            self.names = [n for n in self.names if n in self.src.corruptions]
        for n in self.names:
            for s in self.severities:
                self.src.check(n, s)
        self._num_images: int | None = None

    def _parse_names(self, spec: str) -> list[str]:
        """Opens the source first: an ImageNet-3DCC tree names its own 12 corruptions (``all``: every one)."""
        self.src: CorruptedSource = open_corrupted(self.source)
        if self.src.layout != "imagenet-3dcc":
            return parse_corruptions(spec)
        if spec.strip() == "all":
            return list(CORRUPTIONS_3DCC)
        names = list(dict.fromkeys(t.strip() for t in spec.replace(",", "+").split("+") if t.strip()))
        bad = [n for n in names if n not in CORRUPTIONS_3DCC]
        if bad or not names:
            raise RobustvitError(f"{self.source} is an ImageNet-3DCC tree: corruptions= takes all or names among "
                                 f"{', '.join(CORRUPTIONS_3DCC)} joined by +, not {bad[0] if bad else spec!r}")
        return names

    def _size(self) -> int:
        if self._num_images is None:
            self._num_images = self.src.num_images        # checks that every unit has as many images
        return self._num_images

    def _clean_ids(self, ctx: EvalContext) -> torch.Tensor | None:
        """Where the source's images lie in the run's data set: the same positions when it has at least as many
        images, or — for a copy written from the run's ``--limit`` / ``--subset`` images (in data-set order) —
        those images; None when the clean images are not known."""
        ds = ctx.dataset
        if ds is None or ds.num_classes != len(self.src.classes):
            return None
        n = self._size()
        run = ctx.subset
        if run is not None and not run.whole and len(run.indices) == n and len(ds) != n:
            return run.indices.sort().values
        return torch.arange(n) if len(ds) >= n else None

    def parts(self, ctx: EvalContext) -> list[str]:
        return ([CLEAN] if self._clean_ids(ctx) is not None else []) + self._units()

    def plan(self, ctx: EvalContext) -> Plan:
        """Each unit's files, and the run's clean images at the same positions, read by the runner's loader
        workers; the labels (of the first unit) draw a class-stratified ``limit=``."""
        if ctx.num_classes < len(self.src.classes):
            raise RobustvitError(f"the model has {ctx.num_classes} classes but {self.source} has "
                                 f"{len(self.src.classes)}; evaluate a model trained on those classes")
        set_size = getattr(self.src, "set_image_size", None)
        if set_size is not None:                 # ImageNet-C files: resized to the model's input on reading
            set_size(ctx.image_size)
        parts = self.parts(ctx)
        data = {p: SubsetDataset(ctx.dataset, self._clean_ids(ctx)) if p == CLEAN else self.src.unit(*_split(p))
                for p in parts}
        first = self.src.unit(self.names[0], self.severities[0]) if self.names else None
        return Plan(parts, size=self._size(), labels=None if first is None else dataset_labels(first), part_data=data)

    def _images(self, ctx: EvalContext, part: str, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, int]:
        """The unit's own images (the runner read them), unreadable files left out, stored images (e.g. 32-px
        CIFAR-C) resized to the model's input."""
        x, y = batch.x, batch.y
        keep = y != UNREADABLE
        unreadable = int((~keep).sum())
        if unreadable:
            x, y = x[keep], y[keep]
        size = ctx.image_size
        if part != CLEAN and size is not None and len(y) and tuple(x.shape[-2:]) != (int(size), int(size)):
            x = F.interpolate(x, size=(int(size), int(size)), mode="bilinear", align_corners=False, antialias=True)
        return x, y, unreadable

    def _data_reason(self, ctx: EvalContext) -> str | None:
        if self.src.layout == "imagenet-3dcc":
            why = self._mce_3d_reason(ctx)
            return ("ImageNet-3DCC: its mCE is corruptions_mce_3d (AlexNet's 3DCC errors)" if why is None
                    else f"ImageNet-3DCC: no corruptions_mce_3d: {why}")
        if not self.src.imagenet_like:
            return (f"{self.source} is not a 1000-class ImageNet-C tree; AlexNet-normalised mCE is defined "
                    "for ImageNet-C only (CIFAR-C reports plain mean accuracy)")
        return None

    def _mce_3d_reason(self, ctx: EvalContext) -> str | None:
        if self.src.layout != "imagenet-3dcc":
            return "not ImageNet-3DCC"
        if not self.src.imagenet_like:
            return f"{self.source} is not a 1000-class tree; AlexNet's 3DCC errors are ImageNet-1k's"
        return self._unevaluated(CORRUPTIONS_3DCC, "it averages the 12 corruptions")

    def _extra(self) -> dict[str, Any]:
        return {"frost_source": None, "source_layout": self.src.layout, "num_classes": len(self.src.classes)}


__all__ = ["StoredCorruptions", "part_name"]
