"""``gaussian_noise``: training for randomized smoothing, cross-entropy on images plus unclipped Gaussian noise of
σ in pixel units, added before the model's normalisation (Cohen et al., arXiv:1902.02918; locuslab/smoothing)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from robustvit.certify.smoothing import add_noise
from robustvit.models.wrapper import range_check_off
from robustvit.options import option
from robustvit.training.losses.base import LossOutput, TrainingLoss, classification_loss, register_loss


@register_loss(aliases=("gaussian-noise",))
class GaussianNoise(TrainingLoss):
    """Gaussian data augmentation at the σ the smoothed classifier is certified with."""

    name = "gaussian_noise"
    soft_targets = True
    smoke: ClassVar[dict[str, Any]] = {"sigma": 0.25}
    counts_calls = True

    @dataclass
    class Options:
        sigma: float = option(0.25, min=0, help="noise standard deviation in pixel units ([0, 1] images)")
        label_smoothing: float = option(0.0, min=0, max=1, help="label smoothing of hard targets")
        seed: int = option(0, help="seed of the noise draws")

    def forward(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, epoch: int) -> LossOutput:
        gen = self.seeded_generator(self.options.seed, "noise", x.device)
        with range_check_off(model):
            logits = model(add_noise(x, self.options.sigma, gen))
        return classification_loss(logits, y, self.options.label_smoothing), logits, None
