"""``smoothadv``: adversarial training of the smoothed classifier, SmoothAdv_PGD (Salman et al., NeurIPS 2019,
arXiv:1906.04584; Hadisalman/smoothing-adversarial ``train_pgd.py --adv-training --attack PGD``).

Per batch: ``m`` Gaussian draws δ_i (σ, pixel units, unclipped) per image; the attack
(:func:`robustvit.certify.smoothadv.smoothadv_pgd`, eval mode) finds x' in the L2 ball of radius ε that raises the
smoothed soft classifier's cross-entropy; the model then trains on x' + δ_i, all m draws (``multi_noise``, the
reference's ``--train-multi-noise``) or the first. ε warms up as ε·min(1, (epoch + 1)/W) (``--warmup W``). The
training accuracy is x' + δ_1's. Deviation: the reference splits a batch into m mini-batches of N/m images; here
every image gets its m draws (N·m inputs per step).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from robustvit.certify.smoothadv import smoothadv_pgd
from robustvit.models.wrapper import range_check_off
from robustvit.options import Eps, option
from robustvit.training.losses.base import (LossOutput, TrainingLoss, classification_loss, hard_labels,
                                            register_loss)


@register_loss
class SmoothAdv(TrainingLoss):
    """SmoothAdv_PGD training at the σ the smoothed classifier is certified with."""

    name = "smoothadv"
    soft_targets = True
    smoke: ClassVar[dict[str, Any]] = {"steps": 1, "m": 2}
    counts_calls = True

    @dataclass
    class Options:
        sigma: float = option(0.25, min=0, help="noise standard deviation in pixel units ([0, 1] images)")
        eps: Eps = option(0.25, min=0, help="L2 budget of the attack in pixel units (the reference's 64/256)")
        steps: int = option(10, min=1, help="PGD steps (step size 2ε/steps)")
        m: int = option(1, min=1, help="noise draws per image in the attack (m_train)")
        multi_noise: bool = option(True, help="train on all m noisy adversarial copies (off: the first only)")
        eps_warmup_epochs: float = option(1.0, min=1, help="ε·min(1, (epoch + 1)/W) (the reference's --warmup)")
        label_smoothing: float = option(0.0, min=0, max=1, help="label smoothing of hard targets")
        seed: int = option(0, help="seed of the noise draws")

    def eps_for(self, epoch: int) -> float:
        o = self.options
        return float(o.eps) * min(1.0, (epoch + 1) / o.eps_warmup_epochs)

    def forward(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, epoch: int) -> LossOutput:
        o = self.options
        gen = self.seeded_generator(o.seed, "smoothadv", x.device)
        noise = o.sigma * torch.randn((len(x), o.m, *x.shape[1:]), generator=gen, device=x.device, dtype=x.dtype)
        eps = self.eps_for(epoch)
        x_adv = smoothadv_pgd(model, x, hard_labels(y), noise, eps, o.steps, gen) if eps > 0 else x
        draws = noise if o.multi_noise else noise[:, :1]
        with range_check_off(model):
            logits = model((x_adv[:, None] + draws).flatten(0, 1)).unflatten(0, draws.shape[:2])   # (N, m', K)
        targets = y.repeat_interleave(draws.shape[1], 0)
        loss = classification_loss(logits.flatten(0, 1), targets, o.label_smoothing)
        return loss, logits[:, 0], None
