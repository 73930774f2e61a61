"""Accuracy and robust accuracy, defined once for the evaluation suites and training validation.

Robust accuracy follows RobustBench (Croce et al. 2021, arXiv:2010.09670): an image is robust when classified
correctly before *and* after the attack, so robust accuracy never exceeds clean accuracy. A row of logits holding
a NaN or an infinity is never correct nor robust (``argmax`` of a NaN row picks an arbitrary class);
:func:`nonfinite_rows` tells which, so results can report ``num_nonfinite``.

>>> import torch
>>> logits = torch.tensor([[2.0, 1.0], [float("nan"), 0.0]])
>>> correct(logits, torch.tensor([0, 0])).tolist()
[True, False]
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def nonfinite_rows(logits: torch.Tensor) -> torch.Tensor:
    """Boolean (N,): rows of ``logits`` (N, C) holding a NaN or an infinity."""
    return ~torch.isfinite(logits).all(dim=1)


def correct(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Boolean (N,): top-1 prediction equals ``y`` and every logit of the row is finite."""
    return (logits.argmax(1) == y) & ~nonfinite_rows(logits)


def robust_correct(clean_logits: torch.Tensor, adv_logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Boolean (N,): correct on the clean image *and* on its adversarial example (RobustBench convention)."""
    return correct(clean_logits, y) & correct(adv_logits, y)


def topk_correct(logits: torch.Tensor, y: torch.Tensor, ks: Sequence[int] = (1,)) -> list[int]:
    """Number of samples whose label is among the top-k logits, for each k (k capped at the class count);
    rows with a non-finite logit count as wrong."""
    return [int(h) for h in topk_hits(logits, y, ks)]


def topk_hits(logits: torch.Tensor, y: torch.Tensor, ks: Sequence[int] = (1,)) -> list[torch.Tensor]:
    """:func:`topk_correct` as 0-d tensors on the logits' device (read later: no host-device synchronisation)."""
    kmax = min(max(ks), logits.shape[1])
    hit = logits.topk(kmax, dim=1).indices.eq(y[:, None]) & ~nonfinite_rows(logits)[:, None]
    return [hit[:, : min(k, kmax)].any(1).sum() for k in ks]


def accuracy(logits: torch.Tensor, y: torch.Tensor) -> float:
    """Top-1 accuracy of ``logits`` (N, C) against labels ``y`` (N,); non-finite rows count as wrong."""
    return float(correct(logits, y).float().mean()) if y.numel() else 0.0


def robust_accuracy(clean_logits: torch.Tensor, adv_logits: torch.Tensor, y: torch.Tensor) -> float:
    """Fraction of images correct before and after the attack (see :func:`robust_correct`)."""
    return float(robust_correct(clean_logits, adv_logits, y).float().mean()) if y.numel() else 0.0


__all__ = ["accuracy", "correct", "nonfinite_rows", "robust_accuracy", "robust_correct", "topk_correct"]
