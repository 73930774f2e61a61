"""Flip probability, top-5 distance, flip rate and mFR / mT5D of perturbation sequences (ImageNet-P).

Hendrycks & Dietterich, "Benchmarking Neural Network Robustness to Common Corruptions and Perturbations",
ICLR 2019 (arXiv:1903.12261), section 4; definitions as in the reference ``ImageNet-P/test.py``:

* pairs of frames (:func:`frame_pairs`): noise sequences compare every frame j ≥ 1 with frame 0, the others
  consecutive frames of ``seq[i::d]`` for each i < d (difficulty d);
* flip probability FP: the share of pairs whose top-1 predictions differ; top-5 distance T5D: with σ(i) the rank
  in the second frame of the class ranked i-th in the first, Σ_{i=1..5} |(i − 1) − min(σ(i) − 1, 5)|; both
  averaged within a sequence, then over sequences;
* flip rate FR = FP / FP_baseline (AlexNet in the paper); mFR = mean FR over the 10 test perturbations; mT5D
  likewise.

Batched from logits (N, T, C) or top-5 class indices (N, T, 5); ties broken like
``scipy.stats.rankdata(-logits, method="ordinal")`` (the lower class index first).

>>> import torch
>>> logits = torch.tensor([[[2., 1.], [1., 2.], [1., 2.]]])          # 1 sequence, 3 frames, 2 classes
>>> finalize_perturbation_stats(perturbation_stats(logits, noise=False))["flip_probability"]
0.5
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import torch

from robustvit.errors import RobustvitError

TOPK = 5


def ranking(logits: torch.Tensor, k: int = TOPK) -> torch.Tensor:
    """The ``k`` best classes of every row, best first (long, (..., min(k, C))); ties: lower index first."""
    order = torch.sort(logits.float(), dim=-1, descending=True, stable=True).indices
    return order[..., : min(k, logits.shape[-1])]


def frame_pairs(num_frames: int, *, noise: bool, difficulty: int = 1) -> tuple[list[int], list[int]]:
    """The (first, second) frame indices compared, exactly the reference's loops."""
    if num_frames < 2:
        raise RobustvitError(f"a perturbation sequence needs at least 2 frames, got {num_frames}")
    if noise:
        return [0] * (num_frames - 1), list(range(1, num_frames))
    d = int(difficulty)
    if d < 1:
        raise RobustvitError(f"difficulty must be >= 1, got {difficulty}")
    first: list[int] = []
    second: list[int] = []
    for i in range(d):
        seq = list(range(i, num_frames, d))
        first += seq[:-1]
        second += seq[1:]
    if not first:
        raise RobustvitError(f"difficulty {d} leaves no pair of frames in a {num_frames}-frame sequence")
    return first, second


def top5_distance_pairs(top_a: torch.Tensor, top_b: torch.Tensor) -> torch.Tensor:
    """T5D of frame pairs from their top-k class lists (..., k) (best first) → float (...); σ(i) − 1 capped at 5
    is the position of a's i-th class in b's top-5 list, or 5 when absent, so the top-5 lists suffice."""
    eq = top_a.unsqueeze(-1) == top_b.unsqueeze(-2)                        # (..., k, k)
    pos = torch.where(eq.any(-1), eq.to(torch.int64).argmax(-1), torch.full_like(top_a, TOPK))
    ideal = torch.arange(top_a.shape[-1], device=top_a.device)
    return (ideal - pos.clamp(max=TOPK)).abs().sum(-1).to(torch.float64)


def perturbation_stats(scores: torch.Tensor, *, noise: bool, difficulty: int = 1) -> dict[str, Any]:
    """Additive statistics of sequences, ``{"n", "flip_sum", "t5d_sum"}`` (sums of per-sequence means), from
    logits (N, T, C) (float) or top-5 class indices (N, T, k) (integer) of every frame. Sum the dicts of several
    chunks and pass the total to :func:`finalize_perturbation_stats`."""
    if scores.ndim != 3:
        raise RobustvitError(f"perturbation_stats needs (N, T, C) logits or (N, T, k) rankings, got {tuple(scores.shape)}")
    top = scores if not scores.is_floating_point() else ranking(scores)
    a, b = frame_pairs(top.shape[1], noise=noise, difficulty=difficulty)
    ta, tb = (top[:, torch.tensor(i, device=top.device)] for i in (a, b))   # (N, P, k)
    flips = (ta[..., 0] != tb[..., 0]).to(torch.float64).mean(1)           # per sequence
    t5d = top5_distance_pairs(ta, tb).mean(1)
    return {"n": int(top.shape[0]), "flip_sum": float(flips.sum()), "t5d_sum": float(t5d.sum())}


def finalize_perturbation_stats(stats: Mapping[str, Any]) -> dict[str, Any]:
    """``{"flip_probability", "top5_distance", "num_sequences"}`` from summed :func:`perturbation_stats`."""
    n = int(stats.get("n", 0))
    if n == 0:
        return {"flip_probability": None, "top5_distance": None, "num_sequences": 0}
    return {"flip_probability": stats["flip_sum"] / n, "top5_distance": stats["t5d_sum"] / n, "num_sequences": n}


def flip_probability(scores: torch.Tensor, *, noise: bool, difficulty: int = 1) -> float:
    """FP of sequences (N, T, C) logits or (N, T, k) rankings: mean over sequences of the pair flip rate."""
    return finalize_perturbation_stats(perturbation_stats(scores, noise=noise, difficulty=difficulty))["flip_probability"]


def top5_distance(scores: torch.Tensor, *, noise: bool, difficulty: int = 1) -> float:
    """T5D of sequences, averaged like :func:`flip_probability`."""
    return finalize_perturbation_stats(perturbation_stats(scores, noise=noise, difficulty=difficulty))["top5_distance"]


def flip_rate(fp: float | None, fp_base: float | None) -> float | None:
    """FR = FP / FP_baseline; None when either is missing or the baseline's FP is 0."""
    if fp is None or fp_base is None or not math.isfinite(fp_base) or fp_base <= 0:
        return None
    return float(fp) / float(fp_base)


def mfr(fp: Mapping[str, float | None], fp_base: Mapping[str, float | None], names: Iterable[str]) -> float | None:
    """mFR: mean of FP[name] / FP_base[name] over ``names`` (ImageNet-P: the 10 test perturbations,
    ``robustvit.corruptions.perturbations.TEST_PERTURBATIONS``); None if any is missing or has a zero baseline."""
    ratios = [flip_rate(fp.get(n), fp_base.get(n)) for n in names]
    if not ratios or any(r is None for r in ratios):
        return None
    return sum(ratios) / len(ratios)    # type: ignore[arg-type]


def mt5d(t5d: Mapping[str, float | None], t5d_base: Mapping[str, float | None], names: Iterable[str]) -> float | None:
    """mT5D: mean of T5D[name] / T5D_base[name] over ``names`` (as :func:`mfr`)."""
    return mfr(t5d, t5d_base, names)


__all__ = ["ranking", "frame_pairs", "top5_distance_pairs", "perturbation_stats", "finalize_perturbation_stats",
           "flip_probability", "top5_distance", "flip_rate", "mfr", "mt5d"]
