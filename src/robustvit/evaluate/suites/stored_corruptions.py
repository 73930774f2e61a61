"""Suite ``corruptions:source=DIR``: the common corruptions read from an ImageNet-C tree or CIFAR-10/100-C folder
(:mod:`robustvit.data.corrupted`) instead of made in memory; options, parts and result as
:mod:`robustvit.evaluate.suites.corruptions` (Hendrycks & Dietterich, ICLR 2019, arXiv:1903.12261), whose docstring
describes ``source=``."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from robustvit.data import UNREADABLE
from robustvit.data.corrupted import CorruptedSource, open_corrupted
from robustvit.data.subset import SubsetDataset, dataset_labels
from robustvit.errors import RobustvitError
from robustvit.evaluate.suites.base import Batch, EvalContext, Plan
from robustvit.evaluate.suites.corruptions import CLEAN, CorruptionSuite, part_name


class StoredCorruptions(CorruptionSuite):
    """``corruptions`` with ``source=``: stored images (built by ``create_suite("corruptions:source=…")``)."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        if self.opts.jpeg_quality not in ("auto", None) or self.opts.preset is not None:
            raise RobustvitError("source= reads stored images: preset= and jpeg_quality= do not apply; drop them")
        self.src: CorruptedSource = open_corrupted(self.source)
        if "corruptions" not in self.options:    # default: every corruption the folder holds
            self.names = [n for n in self.names if n in self.src.corruptions]
        for n in self.names:
            for s in self.severities:
                self.src.check(n, s)
        self._num_images: int | None = None

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
        data: dict[str, Any] = {}
        for part in parts:
            if part == CLEAN:
                ids = self._clean_ids(ctx)
                assert ids is not None
                data[part] = SubsetDataset(ctx.dataset, ids)
            else:
                name, sev = part.rsplit("/", 1)
                data[part] = self.src.unit(name, int(sev))
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
        if not self.src.imagenet_like:
            return (f"{self.source} is not a 1000-class ImageNet-C tree; AlexNet-normalised mCE is defined "
                    "for ImageNet-C only (CIFAR-C reports plain mean accuracy)")
        return None

    def _extra(self) -> dict[str, Any]:
        return {"frost_source": None, "source_layout": self.src.layout}


__all__ = ["StoredCorruptions", "part_name"]
