"""``ce``: cross-entropy with label smoothing on clean images (soft MixUp/CutMix targets accepted)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from robustvit.options import option
from robustvit.training.losses.base import LossOutput, TrainingLoss, classification_loss, register_loss


@register_loss
class CrossEntropy(TrainingLoss):
    """Cross-entropy with label smoothing (Szegedy et al., arXiv:1512.00567) on clean images."""

    name = "ce"
    soft_targets = True

    @dataclass
    class Options:
        label_smoothing: float = option(0.1, min=0, max=1, help="label smoothing of hard targets")

    def forward(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, epoch: int) -> LossOutput:
        logits = model(x)
        return classification_loss(logits, y, self.options.label_smoothing), logits, None
