"""Pluggable training losses.

A loss module is called as ``loss_fn(model, x, y, epoch) -> (loss, clean_logits, adv_logits_or_None)``
(the interface of Debenedetti's light-recipe code), so adversarial training (PGD-AT, FGSM-RS, TRADES)
and feature-alignment training (AFAT) plug into the same training loop.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from robustvit.registry import Registry

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


LOSSES: Registry[type[TrainingLoss]] = Registry("training loss", hint="see `robustvit list losses`")
register_loss = LOSSES.register
LOSSES.register(CrossEntropy)


def list_losses(pattern: str | None = None) -> list[str]:
    """Registered training-loss names (``ce``, …), optionally filtered by a shell-style pattern."""
    return LOSSES.list(pattern)


def create_loss(name: str, **kwargs: Any) -> TrainingLoss:
    """Build a registered training loss, e.g. ``create_loss("ce", label_smoothing=0.1)``."""
    return LOSSES.create(name, **kwargs)
