"""Top-k accuracy."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def topk_correct(logits: torch.Tensor, y: torch.Tensor, ks: Sequence[int] = (1,)) -> list[int]:
    """Number of samples whose label is among the top-k logits, for each k (k capped at the class count)."""
    kmax = min(max(ks), logits.shape[1])
    top = logits.topk(kmax, dim=1).indices
    hit = top.eq(y[:, None])
    return [int(hit[:, : min(k, kmax)].any(1).sum()) for k in ks]


def accuracy(logits: torch.Tensor, y: torch.Tensor) -> float:
    """Top-1 accuracy of ``logits`` (N, C) against labels ``y`` (N,)."""
    return float((logits.argmax(1) == y).float().mean()) if y.numel() else 0.0
