"""``pgd_at``: PGD adversarial training (Madry et al., arXiv:1706.06083; MadryLab/robustness): cross-entropy with
label smoothing on PGD examples only (one train-mode forward per step)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from robustvit.options import option
from robustvit.training.losses.adversarial import AdversarialLoss, AdversarialOptions
from robustvit.training.losses.base import LossOutput, classification_loss, hard_labels, register_loss


@register_loss(aliases=("pgd-at",))
class PGDAT(AdversarialLoss):
    """PGD-AT: K steps of ``step_size`` (default 1.5·ε/K, the light recipe's rule) from a uniform start."""

    name = "pgd_at"

    @dataclass
    class Options(AdversarialOptions):
        attack_steps: int = option(1, min=1, help="PGD steps K")

    def forward(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, epoch: int) -> LossOutput:
        eps, labels = self.eps_for(epoch), hard_labels(y)
        x_adv = self.attack(model, x, labels, eps) if eps > 0 else x
        adv_logits = model(x_adv)
        clean = self.clean_logits(model, x, adv_logits) if eps > 0 else adv_logits.detach()
        return classification_loss(adv_logits, y, self.options.label_smoothing), clean, adv_logits
