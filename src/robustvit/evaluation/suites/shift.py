"""Suites ``imagenet_r``, ``imagenet_a``, ``imagenet_sketch``, ``imagenet_v2``: accuracy under natural shift.

Each suite reads its own data set from option ``root=`` (else ``$ROBUSTVIT_DATA/<folder>``, see
``robustvit.data.shift``) and evaluates a 1000-class ImageNet model. For ImageNet-R and ImageNet-A only the 200
logits of their classes are kept (as the official scripts, hendrycks/imagenet-r and hendrycks/natural-adv-examples,
and Bhojanapalli et al., arXiv:2103.14586, Sec. 3.1). Images get the model's own preprocessing as in timm's
validation (``crop_pct`` overrides the crop: 0.875 with a bilinear model = the official Resize(256)+CenterCrop(224)).
Result keys: docs/natural-shift.md.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import torch

from robustvit.data import Resize, model_resize
from robustvit.data.base import FileImageDataset
from robustvit.data.shift import PRETTY, load_shift_dataset, resolve_root
from robustvit.errors import RobustvitError
from robustvit.evaluation.suites.base import Batch, EvalContext, Suite, SuiteOptions, register_suite
from robustvit.options import option
from robustvit.metrics.accuracy import topk_correct


class ShiftSuite(Suite):
    """Top-1/top-5 of a 1000-class model on one shift data set (subclasses set ``name`` and ``dataset_name``)."""

    dataset_name: ClassVar[str] = ""
    low_precision = True
    demo_skip = "needs the data set on disk and a 1000-class ImageNet model (pass root=DIR)"

    @dataclasses.dataclass
    class Options(SuiteOptions):
        root: str | None = option(None, help="the data set's folder (default: the usual locations, see docs)")
        crop_pct: float | None = option(None, min=0.01, max=1, help="centre-crop fraction (default: the model's)")

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._cache: dict[Resize, FileImageDataset] = {}

    def resize(self, ctx: EvalContext) -> Resize:
        """The model's own preprocessing (``crop_pct`` replaced when the option is given)."""
        resize = model_resize(ctx.model.spec) if hasattr(ctx.model, "spec") else Resize(224)
        if "crop_pct" in self.options:
            resize = dataclasses.replace(resize, crop_pct=float(self.opts.crop_pct))
        return resize

    def dataset(self, ctx: EvalContext) -> FileImageDataset:
        if ctx.num_classes != 1000:
            raise RobustvitError(f"{self.name} evaluates 1000-class ImageNet models; {ctx.model_name} has "
                                 f"{ctx.num_classes} classes")
        resize = self.resize(ctx)
        if resize not in self._cache:
            root = resolve_root(self.dataset_name, self.opts.root)
            ds = load_shift_dataset(self.dataset_name, root, image_size=resize.size, crop_pct=resize.crop_pct,
                                    interpolation=resize.interpolation)
            self._cache[resize] = ds          # ``limit``: the runner draws the images (robustvit.data.subset)
        return self._cache[resize]

    @torch.no_grad()
    def run(self, ctx: EvalContext, part: str, batch: Batch) -> dict[str, Any]:
        logits = ctx.model(batch.x)
        if logits.shape[1] != 1000:
            raise RobustvitError(f"{self.name}: the model returned {logits.shape[1]} logits, expected 1000")
        keep = self.dataset(ctx).shift.logit_indices
        if keep is not None:
            logits = logits[:, torch.as_tensor(keep, device=logits.device)]
        c1, c5 = topk_correct(logits, batch.y, (1, 5))
        return {"n": int(batch.y.numel()), "top1": c1, "top5": c5}

    def finalize(self, ctx: EvalContext, stats: dict[str, dict[str, Any]]) -> dict[str, Any]:
        ds = self.dataset(ctx)
        s = stats.get("all", {})
        n = int(s.get("n", 0))
        if n == 0:
            raise RobustvitError(f"{PRETTY[self.dataset_name]}: no image under {ds.spec} could be read")
        return {"top1": s["top1"] / n, "top5": s["top5"] / n, "num_images": n, "num_classes": ds.num_classes,
                "class_folders": ds.shift.num_found_classes, "unreadable": len(ds) - n,
                "root": ds.spec.split(":", 1)[1], "preprocessing": dataclasses.asdict(self.resize(ctx))}


def _shift_suite(class_name: str, name: str, description: str) -> type[ShiftSuite]:
    """Register the suite of the shift data set ``name`` (``robustvit.data.shift`` reads it by that name)."""
    return register_suite(type(class_name, (ShiftSuite,), {"name": name, "dataset_name": name,
                                                           "description": description, "__module__": __name__}))


ImageNetR = _shift_suite("ImageNetR", "imagenet_r", "ImageNet-R top-1/top-5 (200 classes: logits masked to them)")
ImageNetA = _shift_suite("ImageNetA", "imagenet_a", "ImageNet-A top-1/top-5 (200 classes: logits masked to them)")
ImageNetSketch = _shift_suite("ImageNetSketch", "imagenet_sketch", "ImageNet-Sketch top-1/top-5 (1000 classes)")
ImageNetV2 = _shift_suite("ImageNetV2", "imagenet_v2", "ImageNet-V2 (matched frequency) top-1/top-5 (1000 classes)")
