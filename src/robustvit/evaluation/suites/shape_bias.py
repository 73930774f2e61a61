"""Suite ``shape_bias``: the cue-conflict shape bias of Geirhos et al. (ICLR 2019, arXiv:1811.12231).

The suite reads its own stimuli (``Suite.dataset``; result keys: docs/natural-shift.md):

* ``stimuli=/path/to/cue-conflict`` — the Geirhos stimuli (``ROOT/<category>/<category>X-<texture>Y.png``,
  16 categories) for a 1000-class ImageNet model, decided through model-vs-human's 16-category mapping
  (``robustvit.metrics.shape_bias``), resized as ImageNet validation (``crop_pct``, default 0.875 =
  Resize(256)+CenterCrop(224), model-vs-human's transform);
* default, for synthshapes models (2–12 classes): the ``synthshapes:cue_conflict`` split at the model's input size
  and class count (texture label = another class's texture), decided by the model's argmax.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from robustvit.data import create_dataset
from robustvit.data.base import FileImageDataset, ImageDataset, Resize
from robustvit.data.synthshapes import MAX_CLASSES, SHAPES, SynthShapesDataset
from robustvit.errors import RobustvitError
from robustvit.evaluation.suites.base import Batch, EvalContext, Suite, SuiteOptions, register_suite
from robustvit.options import option
from robustvit.metrics.shape_bias import geirhos_categories, imagenet_to_16, shape_bias_counts, shape_bias_summary, \
    texture_from_filename

IMG_EXTENSIONS = (".png", ".jpg", ".jpeg")


def geirhos_stimuli(root: str | Path) -> tuple[list[tuple[str, int]], torch.Tensor, list[str]]:
    """Read a cue-conflict folder → (samples [(path, shape index)], texture indices (N,), the 16 categories)."""
    root = Path(root).expanduser()
    if not root.is_dir():
        raise RobustvitError(f"cue-conflict stimuli folder {root} does not exist; pass stimuli=DIR holding "
                             "<category>/<category>X-<texture>Y.png (Geirhos et al.'s cue-conflict set)")
    cats = list(geirhos_categories())
    index = {c: i for i, c in enumerate(cats)}
    samples, textures = [], []
    for d in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if d.name not in index:
            raise RobustvitError(f"stimuli folder {d.name!r} is not one of the 16 categories ({', '.join(cats)})")
        for f in sorted(p for p in d.iterdir() if p.suffix.lower() in IMG_EXTENSIONS):
            tex = texture_from_filename(f.name)
            if tex not in index:
                raise RobustvitError(f"cannot read the texture category from {f.name!r} (got {tex!r}); stimuli must "
                                     "be named <shape>X-<texture>Y.png with one of the 16 categories")
            samples.append((str(f), index[d.name]))
            textures.append(index[tex])
    if not samples:
        raise RobustvitError(f"{root} holds no stimuli; expected <category>/<category>X-<texture>Y.png")
    return samples, torch.tensor(textures, dtype=torch.long), cats


@dataclass
class _Stimuli:
    dataset: ImageDataset
    texture: torch.Tensor        # (N,) texture category per data-set index
    categories: list[str]
    imagenet16: bool             # map 1000 ImageNet logits to the 16 categories
    source: str


@register_suite
class ShapeBias(Suite):
    name = "shape_bias"
    description = "shape vs texture decisions on cue-conflict stimuli (Geirhos et al.)"

    @dataclass
    class Options(SuiteOptions):
        stimuli: str | None = option(None, help="folder of Geirhos et al.'s cue-conflict images (1000-class models; "
                                                "default: the built-in synthshapes set)")
        crop_pct: float = option(0.875, min=0.01, max=1, help="centre-crop fraction of the stimuli")

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._cache: dict[tuple[int, int], _Stimuli] = {}

    def _stimuli(self, ctx: EvalContext) -> _Stimuli:
        size = int(ctx.image_size or 224)
        key = (size, int(ctx.num_classes))
        if key not in self._cache:
            self._cache[key] = self._load(ctx, size)
        return self._cache[key]

    def _load(self, ctx: EvalContext, size: int) -> _Stimuli:
        k = int(ctx.num_classes)
        root = self.opts.stimuli
        if root:
            if k != 1000:
                raise RobustvitError(f"shape_bias with stimuli= needs a 1000-class ImageNet model; {ctx.model_name} "
                                     f"has {k} classes (synthshapes models: leave stimuli out)")
            samples, tex, cats = geirhos_stimuli(root)      # ``limit``: the runner draws the stimuli
            ds = FileImageDataset(samples, cats, f"cue_conflict:{root}", Resize(size, self.opts.crop_pct))
            return _Stimuli(ds, tex, cats, True, str(root))
        names = ctx.class_names
        synth = ctx.data_source == "synthshapes" or names == list(SHAPES[:k])
        if not (2 <= k <= MAX_CLASSES and synth):
            raise RobustvitError(f"shape_bias: pass stimuli=DIR (Geirhos cue-conflict images) for {ctx.model_name} "
                                 f"({k} classes); the built-in synthshapes cue-conflict set is only for synthshapes models")
        spec = f"synthshapes:cue_conflict,size={size},classes={k}"
        if self.max_images is not None:
            spec += f",count={self.max_images}"
        ds = create_dataset(spec)
        assert isinstance(ds, SynthShapesDataset)
        return _Stimuli(ds, ds.extra["texture_labels"].long(), list(ds.classes), False, ds.spec)

    def dataset(self, ctx: EvalContext) -> ImageDataset:
        return self._stimuli(ctx).dataset

    @torch.no_grad()
    def run(self, ctx: EvalContext, part: str, batch: Batch) -> dict[str, Any]:
        st = self._stimuli(ctx)
        logits = ctx.model(batch.x)
        scores = imagenet_to_16(logits) if st.imagenet16 else logits
        texture = st.texture[batch.ids.cpu()].to(batch.y.device)
        return shape_bias_counts(scores.argmax(1), batch.y, texture, len(st.categories))

    def finalize(self, ctx: EvalContext, stats: dict[str, dict[str, Any]]) -> dict[str, Any]:
        st = self._stimuli(ctx)
        counts = stats.get("all") or {}
        if not counts:
            raise RobustvitError(f"shape_bias: no stimulus of {st.source} could be read")
        return {**shape_bias_summary(counts, st.categories), "categories": st.categories, "stimuli": st.source}
