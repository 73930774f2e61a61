"""Shape bias on cue-conflict stimuli (Geirhos et al., ICLR 2019, arXiv:1811.12231).

A cue-conflict stimulus has the *shape* of one category and the *texture* of another; a decision naming the shape
category is a **shape decision**, the texture category a **texture decision**, else *other*. Stimuli whose two
categories agree are excluded. ``shape bias = shape decisions / (shape + texture decisions)``.

ImageNet models map to the 16 entry-level categories as bethgelab/model-vs-human
(``ImageNetProbabilitiesTo16ClassesMapping``): softmax over the 1000 classes, then per category the **mean** of
the probabilities of its indices (``classlists/geirhos16.json``, from ``HumanCategories.<category>_indices``);
decision = argmax of the 16. ``shape_accuracy`` / ``texture_accuracy`` are model-vs-human's
``fraction-correct-shape`` / ``-texture``: decisions divided by *all* stimuli, the excluded ones included.

Stimuli layout (``texture-vs-shape`` / model-vs-human ``cue-conflict``):
``ROOT/<shape category>/<shape category><i>-<texture category><j>.png``; the texture category is the file name's
last ``-`` field without digits (``dog10-bird2.png`` → bird).

>>> counts = shape_bias_counts(torch.tensor([0, 1, 2]), torch.tensor([0, 0, 2]), torch.tensor([1, 1, 2]), 3)
>>> shape_bias_summary(counts, ["a", "b", "c"])["shape_bias"]    # 1 shape, 1 texture, 1 excluded
0.5
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

from robustvit.errors import RobustvitError

GEIRHOS_MAPPING_FILE = Path(__file__).resolve().parent.parent / "data" / "classlists" / "geirhos16.json"


@lru_cache(maxsize=1)
def geirhos_categories() -> dict[str, tuple[int, ...]]:
    """The 16 categories (sorted) → their ImageNet-1k class indices (model-vs-human's mapping)."""
    data = json.loads(GEIRHOS_MAPPING_FILE.read_text())
    return {c: tuple(int(i) for i in idx) for c, idx in sorted(data["categories"].items())}


def imagenet_to_16_matrix(device: torch.device | str | None = None) -> torch.Tensor:
    """(1000, 16) matrix M with ``probs @ M`` = the mean probability over each category's indices."""
    cats = geirhos_categories()
    m = torch.zeros(1000, len(cats), device=device)
    for j, idx in enumerate(cats.values()):
        m[list(idx), j] = 1.0 / len(idx)
    return m


def imagenet_to_16(logits: torch.Tensor) -> torch.Tensor:
    """(N, 1000) logits → (N, 16) category scores: softmax, then the mean over each category's classes."""
    if logits.ndim != 2 or logits.shape[1] != 1000:
        raise RobustvitError(f"the 16-category mapping needs (N, 1000) ImageNet logits, got {tuple(logits.shape)}")
    return logits.float().softmax(1) @ imagenet_to_16_matrix(logits.device)


def texture_from_filename(name: str) -> str:
    """``"XXX_dog10-bird2.png"`` → ``"bird"`` (model-vs-human's ``ShapeBias.get_texture_category``)."""
    last = Path(name).name.split("_")[-1].split(".")[0].split("-")[-1]
    return "".join(ch for ch in last if not ch.isdigit())


def shape_bias_counts(decisions: torch.Tensor, shape: torch.Tensor, texture: torch.Tensor,
                      num_categories: int) -> dict[str, Any]:
    """Additive counts for a batch: per shape category the numbers of shape, texture and other decisions
    (conflict stimuli only), and of excluded (shape == texture) stimuli. All inputs are (N,) ints."""
    if not decisions.shape == shape.shape == texture.shape:
        raise RobustvitError("decisions, shape and texture labels must have the same shape (N,)")
    conflict = shape != texture
    is_shape = conflict & (decisions == shape)
    is_tex = conflict & (decisions == texture)
    is_other = conflict & ~is_shape & ~is_tex

    def per(mask: torch.Tensor) -> list[int]:
        return torch.bincount(shape[mask].long(), minlength=num_categories).tolist()

    return {"shape": per(is_shape), "texture": per(is_tex), "other": per(is_other), "excluded": per(~conflict)}


def _bias(s: float, t: float) -> float | None:
    return s / (s + t) if s + t else None


def shape_bias_summary(counts: dict[str, Any], categories: list[str]) -> dict[str, Any]:
    """Summed :func:`shape_bias_counts` → ``shape_bias``, decisions, accuracies and ``per_category``."""
    s, t, o, e = (list(map(int, counts[k])) for k in ("shape", "texture", "other", "excluded"))
    if len(s) != len(categories):
        raise RobustvitError(f"counts have {len(s)} categories but {len(categories)} names were given")
    shape, tex, other, excl = sum(s), sum(t), sum(o), sum(e)
    n = shape + tex + other
    total = max(n + excl, 1)
    per_category = {c: {"shape_bias": _bias(s[i], t[i]), "shape": s[i], "texture": t[i], "other": o[i],
                        "num_stimuli": s[i] + t[i] + o[i]} for i, c in enumerate(categories) if s[i] + t[i] + o[i]}
    return {"shape_bias": _bias(shape, tex), "shape_decisions": shape, "texture_decisions": tex,
            "other_decisions": other, "num_stimuli": n, "excluded": excl,
            "shape_accuracy": shape / total, "texture_accuracy": tex / total, "per_category": per_category}


__all__ = ["geirhos_categories", "imagenet_to_16", "imagenet_to_16_matrix", "shape_bias_counts", "shape_bias_summary",
           "texture_from_filename"]
