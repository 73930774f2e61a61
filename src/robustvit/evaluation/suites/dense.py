"""Dense-prediction suites: ``seg_clean``, ``seg_corruptions`` (semantic segmentation, mIoU) and ``det_clean``,
``det_corruptions`` (object detection, COCO box mAP). Options and result keys: docs/dense.md.

Segmentation under corruption follows Kamann & Rother ("Benchmarking the Robustness of Semantic Segmentation
Models", CVPR 2020, arXiv:1908.05005) as SegFormer (arXiv:2105.15203) and FAN (arXiv:2204.12451) report it on
Cityscapes-C: the 16 corruptions of :data:`CITYSCAPES_C_CATEGORIES`, noise at severities 1–3 and the others at
1–5; mIoU per corruption × severity, their mean and retention = mean corrupted mIoU / clean mIoU. Detection under
corruption follows FAN's COCO-C (its ``gen_coco_c.py`` and ``coco_c_test_all.sh``): the same 16 at severities 1–5
on COCO val, box mAP; ``corruptions=imagenet_c`` gives Michaelis et al.'s COCO-C (arXiv:1907.07484), ImageNet-C's
15. ``source=DIR`` reads a stored corrupted copy instead (``robustvit.data.dense``).

As the benchmarks generate their files, each corruption is applied to the image **at its native resolution** with
imagecorruptions' parameters (never scaled to the image size), to the image only (never the mask or boxes), before
anything is resized. Segmentation is scored at the label's resolution as mmseg does: the image is brought to the
model's input (``inference=whole``: resized; ``slide``: resized to cover it and cut into overlapping windows at
``stride``, default ¾ of the window, mmseg's 768 of 1024 on Cityscapes, the logits averaged), the logits resized
back (bilinear) before the argmax; mIoU from one confusion matrix over the data set
(:mod:`robustvit.metrics.dense`). Detectors receive the native image; mAP is ``pycocotools``' COCOeval.

From Python (any model, no CLI): :func:`evaluate_dense`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

from robustvit.corruptions import corrupt
from robustvit.corruptions.params import BENCHMARK_CORRUPTIONS, parse_corruptions, parse_severities, resolve_preset
from robustvit.data import ImageDataset, create_dataset, dataset_for_model
from robustvit.data.dense import (StoredCorruptions, coco_ground_truth, detection_images, image_ids, relpaths,
                                  segmentation_samples)
from robustvit.data.subset import dataset_labels
from robustvit.errors import RobustvitError
from robustvit.evaluation.suites.base import (Batch, EvalContext, Plan, Suite, SuiteOptions, create_suite,
                                            register_suite)
from robustvit.metrics.corruption import mean_or_none, retention
from robustvit.metrics.dense import coco_box_map, confusion_matrix, segmentation_scores
from robustvit.options import option
from robustvit.models.segmenter import ARCHITECTURE as _SEGMENTER  # noqa: F401  (registers segmentation_net with timm)
from robustvit.utils import derive_seed, eval_mode, sum_stats

CLEAN = "clean"
#: Cityscapes-C (Kamann & Rother 2020) as SegFormer / FAN report it, by category.
CITYSCAPES_C_CATEGORIES: dict[str, tuple[str, ...]] = {
    "noise": ("gaussian_noise", "shot_noise", "impulse_noise", "speckle_noise"),
    "blur": ("defocus_blur", "glass_blur", "motion_blur", "gaussian_blur"),
    "digital": ("brightness", "contrast", "saturate", "jpeg_compression"),
    "weather": ("snow", "spatter", "fog", "frost"),
}
CITYSCAPES_C: tuple[str, ...] = tuple(n for g in CITYSCAPES_C_CATEGORIES.values() for n in g)
SEG_NOISE = CITYSCAPES_C_CATEGORIES["noise"]
#: Named corruption sets: FAN's Cityscapes-C / COCO-C 16 and ImageNet-C's 15 (Michaelis et al.'s COCO-C).
CORRUPTION_SETS: dict[str, tuple[str, ...]] = {"cityscapes_c": CITYSCAPES_C, "imagenet_c": tuple(BENCHMARK_CORRUPTIONS)}
#: imagecorruptions' parameter table (the dense benchmarks apply it unscaled at native resolution).
DENSE_PRESET = "imagenet"
#: mmseg's sliding-window stride relative to its window (768 of 1024 on Cityscapes).
SLIDE_STRIDE = 0.75
#: Corruptions that move pixels: the (unchanged) mask no longer lines up exactly.
GEOMETRIC = ("elastic_transform",)


def _base(ds: Any) -> Any:
    """The data set under a ``ResizedDataset`` (which resizes images only)."""
    while hasattr(ds, "ds") and not hasattr(ds, "get_masks") and not hasattr(ds, "get_targets"):
        ds = ds.ds
    return ds


def _groups(shapes: list[tuple[int, ...]]) -> list[list[int]]:
    """Positions grouped by shape, in order of first appearance (images of one shape are corrupted as one batch)."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, sh in enumerate(shapes):
        groups.setdefault(tuple(sh), []).append(i)
    return list(groups.values())


class _DenseCorruptions(Suite):
    """Shared option handling: corruptions × severities (+ clean), in memory or from a stored tree."""

    corrupted = True

    @dataclass
    class Options(SuiteOptions):
        corruptions: str = option("cityscapes_c", help="cityscapes_c (FAN's 16), imagenet_c (ImageNet-C's 15), a "
                                                       "group or names joined by +")
        severities: str = option("1-5", help="e.g. 1-5, 3 or 1+3+5")
        preset: str = option(DENSE_PRESET, help="parameter table, applied unscaled at native resolution: imagenet "
                                                "(imagecorruptions') or cifar")
        source: str | None = option(None, help="a stored corrupted copy (FAN's <corruption>_<severity>/ or the "
                                               "<corruption>/<severity>/ layout)")

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        o = self.opts      # the clean suites take no corruption options: their defaults apply
        spec = getattr(o, "corruptions", "cityscapes_c")
        self.corruption_set = spec if spec in CORRUPTION_SETS else "custom"
        self.names = list(CORRUPTION_SETS[spec]) if spec in CORRUPTION_SETS else parse_corruptions(spec)
        self.severities = parse_severities(getattr(o, "severities", "1-5"))
        self.preset = getattr(o, "preset", DENSE_PRESET)
        resolve_preset(self.preset, 0, 0)
        self.source = getattr(o, "source", None)
        self._src = StoredCorruptions(self.source) if self.source is not None else None
        if self._src is not None:
            if "preset" in self.options:
                raise RobustvitError("source= reads stored images: preset= does not apply; drop it")
            if "corruptions" not in self.options:
                self.names = [n for n in self.names if n in self._src.corruptions]
                self.corruption_set = "custom" if set(self.names) != set(CITYSCAPES_C) else "cityscapes_c"

    def plan(self, ctx: EvalContext) -> Plan:
        """The units read their own images (at native size, from ``batch.ids``): the runner reads none."""
        ds = self._check_data(_base(ctx.dataset))
        return Plan(self.parts(ctx), size=len(ds), labels=dataset_labels(ds))

    def _check_data(self, ds: Any) -> Any:
        raise NotImplementedError

    def severities_of(self, name: str) -> list[int]:
        return list(self.severities)

    def units(self) -> list[tuple[str, int]]:
        return [(n, s) for n in self.names for s in self.severities_of(n)]

    def parts(self, ctx: EvalContext) -> list[str]:
        if not self.corrupted:
            return [CLEAN]
        if self._src is not None:
            for n, s in self.units():
                self._src.check(n, s)
        return [CLEAN] + [f"{n}/{s}" for n, s in self.units()]

    def _corrupt(self, x: torch.Tensor, part: str, gen: torch.Generator) -> torch.Tensor:
        """imagecorruptions' parameters at the image's own resolution (no size scaling), as Cityscapes-C / COCO-C."""
        name, sev = part.rsplit("/", 1)
        return corrupt(x, name, int(sev), generator=gen, preset=self.preset, size_scaling=False)

    def _native_images(self, ctx: EvalContext, part: str, batch: Batch, clean: list[torch.Tensor] | None
                       ) -> list[torch.Tensor]:
        """The images of ``part`` at native size on the device: ``clean`` (or the data set's), corrupted here, or
        read from the stored tree."""
        ds = _base(ctx.dataset)
        idx = batch.ids.cpu()
        if part != CLEAN and self._src is not None:
            name, sev = part.rsplit("/", 1)
            rel = relpaths(ds)
            return [im.to(ctx.device) for im in self._src.images(name, int(sev), [rel[i] for i in idx.tolist()], None)]
        ims = [im.to(ctx.device) for im in (clean if clean is not None else detection_images(ds, idx))]
        if part == CLEAN:
            return ims
        out: list[torch.Tensor] = [torch.empty(0)] * len(ims)
        for g in _groups([im.shape for im in ims]):
            y = self._corrupt(torch.stack([ims[i] for i in g]), part, batch.generator)
            for i, yi in zip(g, y):
                out[i] = yi
        return out

    def _per_unit(self, stats: dict[str, dict[str, Any]], score: Callable[[dict[str, Any] | None], Any],
                  metrics: tuple[str, ...]) -> list[dict[str, dict[str, float | None]]]:
        """Per metric, ``{corruption: {severity: value}}`` from ``score`` of every unit's stats (None if unscored)."""
        tables: list[dict[str, dict[str, float | None]]] = [{} for _ in metrics]
        for name in self.names:
            for t in tables:
                t[name] = {}
            for s in self.severities_of(name):
                r = score(stats.get(f"{name}/{s}"))
                for t, m in zip(tables, metrics):
                    t[name][str(s)] = r and r[m]
        return tables

    def _common(self, n: int) -> dict[str, Any]:
        made = self._src is None and self.corrupted     # corrupted here, at native resolution
        return {"severities": list(self.severities), "corruptions": list(self.names) if self.corrupted else [],
                "corruption_set": self.corruption_set if self.corrupted else None,
                "source": None if self.source is None else str(Path(self.source)),
                "source_layout": None if self._src is None else self._src.layout, "num_images": int(n),
                "preset": self.preset if made else None, "size_scaling": False if made else None,
                "corrupted_at": "native resolution" if made else None}


# ------------------------------------------------------------------------------------------ segmentation
def slide_logits(forward: Any, x: torch.Tensor, crop: tuple[int, int], stride: tuple[int, int]) -> torch.Tensor:
    """mmseg's ``slide_inference``: windows of ``crop`` at ``stride`` over ``x`` (n, 3, H, W) with H, W ≥ the
    crop (the last window of a row or column flush with the border), ``forward`` on each, the logits of
    overlapping windows averaged → (n, K, H, W)."""
    (h, w), (ch, cw), (sh, sw) = x.shape[-2:], crop, stride
    out = count = None
    for i in range(max(h - ch + sh - 1, 0) // sh + 1):
        for j in range(max(w - cw + sw - 1, 0) // sw + 1):
            y2, x2 = min(i * sh + ch, h), min(j * sw + cw, w)
            y1, x1 = max(y2 - ch, 0), max(x2 - cw, 0)
            logits = forward(x[:, :, y1:y2, x1:x2])
            if out is None:
                out = logits.new_zeros(x.shape[0], logits.shape[1], h, w)
                count = logits.new_zeros(1, 1, h, w)
            out[:, :, y1:y2, x1:x2] += logits
            count[:, :, y1:y2, x1:x2] += 1
    return out / count


@dataclass
class InferenceOptions(SuiteOptions):
    """How a segmentation model sees an image (mmseg's ``test_cfg.mode``)."""

    inference: Literal["whole", "slide"] = option("whole", help="whole: the image resized to the model's input; "
                                                  "slide: windows of the input size (mmseg)")
    stride: int | None = option(None, min=1, help="sliding-window stride in pixels (default: 3/4 of the window)")


class _Segmentation(_DenseCorruptions):
    demo_skip = "needs a segmentation model and per-pixel masks (docs/dense.md: train --task segment)"
    data_aligned = True      # its own images are the run's, 1:1 (--limit and --subset draw from them)

    @dataclass
    class Options(_DenseCorruptions.Options, InferenceOptions):
        noise_severities: str = option("1-3", help="severities of the noise category (SegFormer's practice: 1-3; "
                                                   "all: as the others)")

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        ns = getattr(self.opts, "noise_severities", "1-3")
        self.noise_severities = list(self.severities) if ns == "all" else [
            s for s in parse_severities(ns) if s in self.severities]
        self.inference = getattr(self.opts, "inference", "whole")
        self.stride = getattr(self.opts, "stride", None)

    def severities_of(self, name: str) -> list[int]:
        return self.noise_severities if name in SEG_NOISE else list(self.severities)

    def _check_data(self, ds: Any) -> Any:
        if not getattr(ds, "has_masks", False):
            raise RobustvitError(f"{self.name} needs masks: use a segmentation data set (synthshapes:test,masks=1, "
                                 "cityscapes:ROOT, ade20k:ROOT)")
        return ds

    def _logits(self, ctx: EvalContext, x: torch.Tensor) -> torch.Tensor:
        logits = ctx.model(x)
        if logits.ndim != 4:
            raise RobustvitError(f"{self.name} needs a segmentation model ((N, K, H, W) logits), got output "
                                 f"{tuple(logits.shape)}; train one with robustvit train --task segment")
        return logits

    def predict(self, ctx: EvalContext, x: torch.Tensor) -> torch.Tensor:
        """Logits (n, K, H, W) at the size of ``x`` (n, 3, H, W): the image brought to the model's input
        (``whole``: resized to it; ``slide``: resized to cover it and cut into windows, mmseg's
        ``slide_inference``), the logits resized back (bilinear)."""
        h, w = x.shape[-2:]
        ih, iw = self._input(ctx) or (h, w)
        if self.inference == "whole":
            xi = x if (h, w) == (ih, iw) else F.interpolate(x, size=(ih, iw), mode="bilinear", align_corners=False,
                                                            antialias=True)
            logits = self._logits(ctx, xi)
        else:
            scale = max(ih / h, iw / w)
            sh, sw = max(ih, round(h * scale)), max(iw, round(w * scale))
            xs = x if (sh, sw) == (h, w) else F.interpolate(x, size=(sh, sw), mode="bilinear", align_corners=False,
                                                            antialias=True)
            logits = slide_logits(lambda c: self._logits(ctx, c), xs, (ih, iw), self._strides(ih, iw))
        if logits.shape[-2:] != (h, w):
            logits = F.interpolate(logits, size=(h, w), mode="bilinear", align_corners=False)
        return logits

    @staticmethod
    def _input(ctx: EvalContext) -> tuple[int, int] | None:
        """The model's input (H, W) (``spec.input_size``); None for a model without a spec (any size)."""
        spec = getattr(ctx.model, "spec", None)
        return (int(spec.input_size[-2]), int(spec.input_size[-1])) if spec is not None else None

    def _strides(self, ih: int, iw: int) -> tuple[int, int]:
        if self.stride is not None:
            return self.stride, self.stride
        return max(1, round(SLIDE_STRIDE * ih)), max(1, round(SLIDE_STRIDE * iw))

    @torch.no_grad()
    def run(self, ctx: EvalContext, part: str, batch: Batch) -> dict[str, Any]:
        ds = _base(ctx.dataset)
        clean, masks = segmentation_samples(ds, batch.ids.cpu())
        ims = self._native_images(ctx, part, batch, clean)
        conf = None
        for g in _groups([(*im.shape, *masks[i].shape) for i, im in enumerate(ims)]):
            x = torch.stack([ims[i] for i in g])
            m = torch.stack([masks[i] for i in g]).to(ctx.device)
            logits = self.predict(ctx, x)
            if logits.shape[-2:] != m.shape[-2:]:
                logits = F.interpolate(logits, size=m.shape[-2:], mode="bilinear", align_corners=False)
            c = confusion_matrix(logits.argmax(1), m, int(logits.shape[1])).flatten()
            conf = c if conf is None else conf + c
        conf = conf.cpu()
        nz = conf.nonzero().flatten().tolist()
        return {"n": len(ims), "confusion": {str(i): int(conf[i]) for i in nz}}

    @staticmethod
    def scores(stat: dict[str, Any] | None, k: int) -> dict[str, Any] | None:
        if not stat or not stat.get("n"):
            return None
        conf = torch.zeros(k * k, dtype=torch.long)
        for i, v in stat["confusion"].items():
            conf[int(i)] = int(v)
        return segmentation_scores(conf.view(k, k))

    def finalize(self, ctx: EvalContext, stats: dict[str, dict[str, Any]]) -> dict[str, Any]:
        k = int(ctx.num_classes)
        clean = self.scores(stats.get(CLEAN), k)
        out: dict[str, Any] = {
            "clean_miou": clean and clean["miou"], "clean_pixel_accuracy": clean and clean["pixel_accuracy"],
            "clean_mean_accuracy": clean and clean["mean_accuracy"], "clean_iou": clean and clean["iou"],
            "class_names": list(getattr(ctx.dataset, "classes", [])) or None}
        n = max((int(s.get("n", 0)) for s in stats.values()), default=0)
        inp = self._input(ctx)
        out.update(inference=self.inference,
                   stride=list(self._strides(*inp)) if self.inference == "slide" and inp else self.stride)
        if not self.corrupted:
            return {**out, **self._common(n)}
        miou, pacc = self._per_unit(stats, lambda st: self.scores(st, k), ("miou", "pixel_accuracy"))
        per_corr = {nm: mean_or_none(list(v.values())) for nm, v in miou.items()}
        mean = mean_or_none(list(per_corr.values()))
        cats = {c: mean_or_none([per_corr[nm] for nm in names if nm in per_corr])
                for c, names in CITYSCAPES_C_CATEGORIES.items() if any(nm in per_corr for nm in names)}
        per_sev = {str(s): mean_or_none([miou[nm][str(s)] for nm in self.names if str(s) in miou[nm]])
                   for s in self.severities if any(str(s) in miou[nm] for nm in self.names)}
        return {**out, "miou": miou, "pixel_accuracy": pacc, "corruption_miou": per_corr, "category_miou": cats,
                "severity_miou": per_sev, "mean_miou": mean, "retention": retention(mean, out["clean_miou"]),
                "noise_severities": list(self.noise_severities),
                "misaligned_corruptions": [nm for nm in self.names if nm in GEOMETRIC], **self._common(n)}


@register_suite
class SegClean(_Segmentation):
    name = "seg_clean"
    description = "semantic segmentation: mIoU, pixel accuracy, per-class IoU on clean images"
    corrupted = False
    Options = InferenceOptions


@register_suite
class SegCorruptions(_Segmentation):
    name = "seg_corruptions"
    description = "segmentation under corruption (Cityscapes-C style): mIoU per corruption × severity, mean, retention"


# ------------------------------------------------------------------------------------------ detection
class _Detection(_DenseCorruptions):
    demo_skip = "needs a torchvision detector (--model tv:NAME) and box annotations (docs/dense.md)"
    def _check_data(self, ds: Any) -> Any:
        if not getattr(ds, "has_boxes", False):
            raise RobustvitError(f"{self.name} needs boxes: use a detection data set (coco:ROOT, "
                                 "synthshapes:test,boxes=1)")
        return ds

    @torch.no_grad()
    def run(self, ctx: EvalContext, part: str, batch: Batch) -> dict[str, Any]:
        ims = self._native_images(ctx, part, batch, None)
        out = ctx.model(ims)
        if not isinstance(out, (list, tuple)) or (out and not isinstance(out[0], dict)):
            raise RobustvitError(f"{self.name} needs a detection model (a list of dicts with boxes/labels/scores "
                                 "per image): robustvit.dense.create_detector('fasterrcnn_resnet50_fpn')")
        dets: dict[str, list[list[float]]] = {}
        for i, o in zip(batch.ids.tolist(), out):
            b = o["boxes"].detach().float().cpu()
            wh = b[:, 2:] - b[:, :2]
            rows = torch.cat([b[:, :2], wh, o["scores"].detach().float().cpu()[:, None],
                              o["labels"].detach().float().cpu()[:, None]], 1)
            dets[str(i)] = [[round(v, 3) for v in r[:4]] + [round(r[4], 5), int(r[5])] for r in rows.tolist()]
        return {"n": len(ims), "detections": dets}

    @staticmethod
    def scores(ds: Any, stat: dict[str, Any] | None) -> dict[str, Any] | None:
        if not stat or not stat.get("n"):
            return None
        pos = sorted(int(i) for i in stat["detections"])
        index = torch.tensor(pos, dtype=torch.long)
        gt = coco_ground_truth(ds, index)
        ids = image_ids(ds, index)
        dts = [{"image_id": iid, "category_id": int(d[5]), "bbox": d[:4], "score": float(d[4])}
               for p, iid in zip(pos, ids) for d in stat["detections"][str(p)]]
        return coco_box_map(gt, dts)

    def finalize(self, ctx: EvalContext, stats: dict[str, dict[str, Any]]) -> dict[str, Any]:
        ds = _base(ctx.dataset)
        clean = self.scores(ds, stats.get(CLEAN))
        n = max((int(s.get("n", 0)) for s in stats.values()), default=0)
        out: dict[str, Any] = {"clean_map": clean and clean["map"], "clean_map_50": clean and clean["map_50"],
                               "clean_map_75": clean and clean["map_75"], "clean_stats": clean and clean["stats"]}
        if not self.corrupted:
            return {**out, **self._common(n)}
        m, m50 = self._per_unit(stats, lambda st: self.scores(ds, st), ("map", "map_50"))
        per_corr = {nm: mean_or_none(list(v.values())) for nm, v in m.items()}
        mean = mean_or_none(list(per_corr.values()))
        return {**out, "map": m, "map_50": m50, "corruption_map": per_corr, "mean_map": mean,
                "retention": retention(mean, out["clean_map"]), **self._common(n)}


@register_suite
class DetClean(_Detection):
    name = "det_clean"
    description = "object detection: COCO box mAP (pycocotools) on clean images"
    corrupted = False
    Options = SuiteOptions


@register_suite
class DetCorruptions(_Detection):
    name = "det_corruptions"
    description = "detection under corruption (COCO-C style): box mAP per corruption × severity, mean, retention"


# ------------------------------------------------------------------------------------------ from Python
def evaluate_dense(model: nn.Module, data: str | ImageDataset, suites: list[str], *, batch_size: int = 32,
                   limit: int | None = None, seed: int = 0, device: str | torch.device | None = None) -> dict[str, Any]:
    """Run dense suites on ``model`` (a segmentation model or a :class:`robustvit.models.detection.Detector`)
    without the unit store: {suite key: result}. Units are seeded as in ``robustvit eval`` (run seed, suite key, part,
    chunk), so the numbers match a CLI run with the same ``--seed``, ``--batch-size`` and ``--limit``.
    ``device=None`` runs on the model's own device; another device runs a copy of the model there (the caller's
    model is never moved; :func:`robustvit.analysis.base.model_on`). The model runs in eval mode; its own train/eval
    flags are restored afterwards.

    >>> evaluate_dense(create_segmenter("vit_cifar_micro", 11), "synthshapes:test,masks=1", ["seg_clean"],
    ...                limit=8)["seg_clean"]["num_images"]                                   # doctest: +SKIP
    8
    """
    from robustvit.analysis.base import model_on

    model, device = model_on(model, device)
    spec = getattr(model, "spec", None)
    if isinstance(data, str):
        detector = spec is None or spec.family == "detector"
        dataset = create_dataset(data) if detector else dataset_for_model(data, spec)
        data_spec = data
    else:
        dataset, data_spec = data, getattr(data, "spec", "")
    ctx = EvalContext(model=model, model_name=getattr(spec, "architecture", "model"), models={"model": model},
                      data_spec=data_spec, dataset=dataset, num_classes=int(getattr(spec, "num_classes", 0) or
                                                                             dataset.num_classes),
                      device=device, seed=seed)
    results: dict[str, Any] = {}
    with eval_mode(model):       # the caller's model keeps its own train/eval flags
        for key in suites:
            suite = create_suite(key)
            plan = suite.plan(ctx)
            ds = plan.data if plan.data is not None else dataset
            total = len(ds) if plan.size is None else plan.size
            n = total if limit is None else min(limit, total)
            n = n if suite.max_images is None else min(n, suite.max_images)
            acc: dict[str, list[dict[str, Any]]] = {p: [] for p in plan.parts}
            for c in range(math.ceil(n / batch_size)):
                idx = torch.arange(c * batch_size, min(n, (c + 1) * batch_size))
                x, y = ((torch.empty(len(idx), 3, 0, 0), torch.zeros_like(idx)) if plan.size is not None  # reads its own
                        else ds.get_batch(idx))
                x, y = x.to(device), y.to(device)
                for p in plan.parts:
                    gen = torch.Generator(device=device)
                    gen.manual_seed(derive_seed(seed, suite.key, p, c))
                    acc[p].append(suite.run(ctx, p, Batch(x, y, idx, gen)))
            results[suite.key] = suite.finalize(ctx, {p: sum_stats(v) for p, v in acc.items()})
    return results


__all__ = ["CITYSCAPES_C", "CITYSCAPES_C_CATEGORIES", "DetClean", "DetCorruptions", "SegClean", "SegCorruptions",
           "evaluate_dense"]
