"""Suite ``model_vs_human``: out-of-distribution accuracy and human-likeness on model-vs-human's data sets
(Geirhos et al., NeurIPS 2021, arXiv:2106.07411). Options and result keys: docs/natural-shift.md.

Decisions are among the 16 entry-level categories: a 1000-class ImageNet model's softmax is averaged over each
category's ImageNet classes (model-vs-human's ``ImageNetProbabilitiesTo16ClassesMapping``, see
``robustvit.metrics.shape_bias``); a model whose classes are the 16 categories decides by its argmax.

The images (``images`` in the result) are either ``released`` (``root=DIR``, model-vs-human's ``datasets``
folder, ``robustvit.data.modelvshuman``; with ``raw_data=DIR`` also the accuracy difference and the observed and
error consistency against its human observers, ``robustvit.metrics.modelvshuman``), or ``generated`` from the
run's images of the 16 categories (``robustvit.data.mvh_conditions``; accuracies only; power-equalisation and
false-colour need the reference's tables, ``tables=DIR``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from robustvit.data.base import FileImageDataset, ImageDataset, Resize
from robustvit.data.modelvshuman import DATASETS, Stimulus, read_human_trials, read_stimuli
from robustvit.data.mvh_conditions import GENERATED, NEEDS_TABLES, Tables, apply_condition, load_tables
from robustvit.errors import RobustvitError
from robustvit.evaluation.suites.base import Batch, EvalContext, Suite, SuiteOptions, register_suite
from robustvit.metrics.modelvshuman import EXCLUDED_CONDITIONS, Trial, benchmark_summary, compare_with_humans
from robustvit.metrics.shape_bias import geirhos_categories, imagenet_to_16
from robustvit.options import option

MODEL = "model"


def sixteen_class_decisions(logits: torch.Tensor, model_classes: list[str]) -> torch.Tensor:
    """(N,) category indices (sorted 16 categories) of a 1000-class ImageNet model or a 16-category model."""
    cats = list(geirhos_categories())
    if logits.shape[1] == 1000:
        return imagenet_to_16(logits).argmax(1)
    if sorted(model_classes) == cats and logits.shape[1] == 16:
        order = torch.tensor([model_classes.index(c) for c in cats], device=logits.device)
        return logits[:, order].argmax(1)
    raise RobustvitError(f"model_vs_human needs a 1000-class ImageNet model or one whose classes are the 16 "
                         f"categories ({', '.join(cats)}); this one has {logits.shape[1]} classes")


def category_of_labels(classes: list[str]) -> torch.Tensor:
    """(C,) the 16-category index of each data class, −1 for classes outside the 16 categories."""
    cats = geirhos_categories()
    names = list(cats)
    if len(classes) == 1000:
        table = torch.full((1000,), -1, dtype=torch.long)
        for j, idx in enumerate(cats.values()):
            table[list(idx)] = j
        return table
    if set(classes) <= set(names):
        return torch.tensor([names.index(c) for c in classes], dtype=torch.long)
    raise RobustvitError("model_vs_human without root= makes its sets from the run's images: they need 1000-class "
                         "ImageNet labels or the 16 category names as classes; or pass root=DIR (the released images)")


@register_suite
class ModelVsHuman(Suite):
    name = "model_vs_human"
    demo_skip = "needs a 1000-class ImageNet model and model-vs-human's images (root=DIR) or 16-class data"
    aliases = ("model-vs-human", "modelvshuman")
    description = "OOD accuracy and human-likeness on model-vs-human's data sets (Geirhos et al. 2021)"
    low_precision = True

    @dataclass
    class Options(SuiteOptions):
        root: str | None = option(None, help="model-vs-human's datasets folder (released images; default: generate "
                                             "the parametric sets from the run's images)")
        raw_data: str | None = option(None, help="model-vs-human's raw-data folder: compare with its human observers")
        datasets: list[str] | None = option(None, help="data sets joined by + (default: all available)")
        tables: str | None = option(None, help="the code/ folder of rgeirhos/generalisation-humans-DNNs (its mean "
                                               "spectrum and gamma table): generates power-equalisation and "
                                               "false-colour too")

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        names = self.opts.datasets
        pool = DATASETS if self.opts.root else GENERATED
        for n in names or ():
            if n not in pool:
                raise RobustvitError(f"model_vs_human: unknown data set {n!r}"
                                     + ("" if self.opts.root else " for generated images (pass root=DIR for the "
                                        "released ones)") + f"; choose from {', '.join(pool)}")
        if self.opts.raw_data and not self.opts.root:
            raise RobustvitError("model_vs_human: raw_data= compares with humans on the released images; pass root=DIR too")
        self.tables: Tables | None = None if self.opts.root or not self.opts.tables else load_tables(self.opts.tables)
        if not self.opts.root and not self.tables:
            for n in names or ():
                if n in NEEDS_TABLES:
                    apply_condition(torch.zeros(1, 3, 2, 2), n, GENERATED[n][0][-1])     # its one-line error
        self._stimuli: list[Stimulus] | None = None

    # ------------------------------------------------------------ which images
    def _names(self) -> list[str]:
        if self.opts.datasets:
            return list(self.opts.datasets)
        if not self.opts.root:
            return [n for n in GENERATED if self.tables is not None or n not in NEEDS_TABLES]
        root = Path(self.opts.root).expanduser()
        found = [n for n in DATASETS if (root / n).is_dir()]
        if not found:
            raise RobustvitError(f"{root} holds none of model-vs-human's data sets ({', '.join(DATASETS)})")
        return found

    def stimuli(self) -> list[Stimulus]:
        if self._stimuli is None:
            cats = list(geirhos_categories())
            self._stimuli = [s for n in self._names() for s in read_stimuli(str(self.opts.root), n, cats)]
        return self._stimuli

    def dataset(self, ctx: EvalContext) -> ImageDataset | None:
        if not self.opts.root:
            return None
        cats = list(geirhos_categories())
        samples = [(s.path, cats.index(s.category)) for s in self.stimuli()]
        return FileImageDataset(samples, cats, f"model_vs_human:{self.opts.root}",
                                Resize(int(ctx.image_size or 224), 1.0))

    def parts(self, ctx: EvalContext) -> list[str]:
        if self.opts.root:
            return ["all"]
        return [f"{n}/{c}" for n in self._names() for c in GENERATED[n][0]]

    # ------------------------------------------------------------ per chunk
    @torch.no_grad()
    def run(self, ctx: EvalContext, part: str, batch: Batch) -> dict[str, Any]:
        if self.opts.root:
            dec = sixteen_class_decisions(ctx.model(batch.x), ctx.class_names)
            return {"decisions": dict(zip(map(str, batch.ids.tolist()), dec.tolist()))}
        if not getattr(ctx.dataset, "classes", None):
            raise RobustvitError("model_vs_human without root= generates its sets from the run's data: it needs data "
                                 "with class names (ImageNet or the 16 categories); or give root=DIR")
        name, cond = part.split("/", 1)
        table = category_of_labels(list(ctx.dataset.classes)).to(batch.y.device)
        cat = table[batch.y]
        keep = cat >= 0
        x = apply_condition(batch.x, name, cond, batch.generator, self.tables)
        dec = sixteen_class_decisions(ctx.model(x), ctx.class_names)
        return {"n": keep.sum(), "correct": ((dec == cat) & keep).sum()}

    # ------------------------------------------------------------ result
    def finalize(self, ctx: EvalContext, stats: dict[str, dict[str, Any]]) -> dict[str, Any]:
        if not self.opts.root:
            return self._finalize_generated(stats)
        cats = list(geirhos_categories())
        decisions = (stats.get("all") or {}).get("decisions") or {}
        if not decisions:
            raise RobustvitError(f"model_vs_human: no image of {self.opts.root} could be read")
        model: dict[str, list[Trial]] = {}
        for i, d in decisions.items():
            s = self.stimuli()[int(i)]
            model.setdefault(s.dataset, []).append(Trial(MODEL, s.condition, s.image, s.category, cats[int(d)]))
        per: dict[str, Any] = {}
        for name, trials in model.items():
            if self.opts.raw_data:
                per[name] = compare_with_humans(name, trials, read_human_trials(self.opts.raw_data, name), DATASETS[name])
            else:
                per[name] = _accuracies(name, {c: (sum(t.correct for t in trials if t.condition == c),
                                                   sum(t.condition == c for t in trials)) for c in DATASETS[name]})
        return {"images": "released", "root": str(self.opts.root), "human_data": self.opts.raw_data,
                "datasets": per, **benchmark_summary(per), "num_images": len(decisions)}

    def _finalize_generated(self, stats: dict[str, dict[str, Any]]) -> dict[str, Any]:
        per: dict[str, Any] = {}
        for name in self._names():
            counts = {c: (stats[f"{name}/{c}"]["correct"], stats[f"{name}/{c}"]["n"]) for c in GENERATED[name][0]
                      if f"{name}/{c}" in stats}
            per[name] = _accuracies(name, counts)
        n = max((v["conditions"][c]["num_images"] for v in per.values() for c in v["conditions"]), default=0)
        if not n:
            raise RobustvitError("model_vs_human: none of the run's images belongs to the 16 categories")
        return {"images": "generated", "datasets": per, **benchmark_summary(per), "num_images": n}


def _accuracies(name: str, counts: dict[str, tuple[int, int]]) -> dict[str, Any]:
    """Per condition accuracy and count; ``ood_accuracy`` over the benchmark's conditions."""
    conds = {c: {"accuracy": k / n, "num_images": n} for c, (k, n) in counts.items() if n}
    bench = [c for c in conds if c not in EXCLUDED_CONDITIONS.get(name, ())]
    out: dict[str, Any] = {"conditions": conds, "benchmark_conditions": bench}
    if bench:
        out["ood_accuracy"] = sum(conds[c]["accuracy"] for c in bench) / len(bench)
    return out
