"""Pluggable training losses.

A loss module is called as ``loss_fn(model, x, y, epoch) -> (loss, clean_logits, adv_logits_or_None)``
(the interface of Debenedetti's light-recipe code), so adversarial training (PGD-AT, FGSM-RS, TRADES)
and feature-alignment training (AFAT) plug into the same training loop.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from robustvit.errors import unknown_name

LossOutput = tuple[torch.Tensor, torch.Tensor, "torch.Tensor | None"]


class TrainingLoss(nn.Module):
    """Base class: subclasses implement ``forward(model, x, y, epoch)``."""

    name = ""

    def forward(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, epoch: int) -> LossOutput:  # noqa: D102
        raise NotImplementedError


class CrossEntropy(TrainingLoss):
    """Standard training: cross-entropy with label smoothing on clean images."""

    name = "ce"

    def __init__(self, label_smoothing: float = 0.1) -> None:
        super().__init__()
        self.label_smoothing = label_smoothing

    def forward(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, epoch: int) -> LossOutput:
        logits = model(x)
        return F.cross_entropy(logits, y, label_smoothing=self.label_smoothing), logits, None


_LOSSES: dict[str, Callable[..., TrainingLoss]] = {"ce": CrossEntropy}


def register_loss(name: str) -> Callable[[Callable[..., TrainingLoss]], Callable[..., TrainingLoss]]:
    def deco(cls: Callable[..., TrainingLoss]) -> Callable[..., TrainingLoss]:
        _LOSSES[name] = cls
        return cls
    return deco


def list_losses(pattern: str | None = None) -> list[str]:
    return sorted(n for n in _LOSSES if pattern is None or fnmatch.fnmatch(n, pattern))


def create_loss(name: str, **kwargs: Any) -> TrainingLoss:
    if name not in _LOSSES:
        raise unknown_name("training loss", name, _LOSSES)
    return _LOSSES[name](**kwargs)
