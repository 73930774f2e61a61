"""``trades``: TRADES (Zhang et al., arXiv:1901.08573) as yaodongyu/TRADES ``trades.py`` computes it: the inner
attack in eval mode starts at x + 0.001·N(0, 1) and takes K = 10 steps of 0.007 along sign(∇ KL(p_clean ‖ p_adv))
(KL summed over the batch) within ε = 0.031 and [0, 1]; loss = CE(f(x), y) + β·KL(f(x) ‖ f(x_adv)) (``batchmean``,
β = 6, no label smoothing), clean and adversarial images in separate train-mode forwards (``forward=concat``: one).

Deviations: the start is clipped to [0, 1] (the reference clips after the first step); the KL target reuses the
first clean forward's logits instead of a second ``model(x_natural)`` (BatchNorm sees the clean batch once). An
explicit ``step_size`` is the step at full ε, scaled with the ε schedule; by default the step is 0.007/0.031·ε.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from robustvit.options import Eps, option
from robustvit.training.losses.adversarial import AdversarialLoss, AdversarialOptions
from robustvit.training.losses.base import LossOutput, classification_loss, register_loss
from robustvit.utils import make_generator

START_STD = 0.001


@register_loss
class TRADES(AdversarialLoss):
    """TRADES with the reference's defaults (ε 0.031, step 0.007, 10 steps, β 6, no label smoothing)."""

    name = "trades"

    @dataclass
    class Options(AdversarialOptions):
        eps: Eps = option(0.031, min=0, help="L∞ budget (TRADES: 0.031)")
        label_smoothing: float = option(0.0, min=0, max=1, help="label smoothing of the clean CE")
        attack_steps: int = option(10, min=1, help="steps of the inner attack")
        beta: float = option(6.0, min=0, help="weight of the KL term")
        forward: Literal["separate", "concat"] = option("separate", help="clean/adversarial forwards")

    def step_for(self, eps: float) -> float:
        if self.options.step_size is None:
            return 0.007 / 0.031 * eps
        return super().step_for(eps)

    def inner_attack(self, model: nn.Module, x: torch.Tensor, eps: float) -> torch.Tensor:
        """TRADES's PGD on the KL from clip(x + 0.001·N(0, 1)), in eval mode unless ``attack_mode=train``."""
        was = model.training
        model.train(self.options.attack_mode == "train")
        gen = make_generator(self.next_seed(), x.device)
        step, x = self.step_for(eps), x.detach()
        try:
            with torch.no_grad():
                p_clean = F.softmax(model(x).float(), dim=1)
            x_adv = (x + START_STD * torch.randn(x.shape, generator=gen, device=x.device, dtype=x.dtype)).clamp_(0, 1)
            for _ in range(self.options.attack_steps):
                x_adv.requires_grad_(True)
                with torch.enable_grad():
                    kl = F.kl_div(F.log_softmax(model(x_adv).float(), dim=1), p_clean, reduction="sum")
                    (grad,) = torch.autograd.grad(kl, x_adv)
                x_adv = x_adv.detach() + step * grad.sign()
                x_adv = torch.min(torch.max(x_adv, x - eps), x + eps).clamp_(0, 1)
        finally:
            model.train(was)
        return x_adv.detach()

    def forward(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, epoch: int) -> LossOutput:
        eps = self.eps_for(epoch)
        if eps <= 0:                     # ε warm-up epoch 0: x_adv = x, the KL term vanishes
            clean = model(x)
            return classification_loss(clean, y, self.options.label_smoothing), clean, clean
        x_adv = self.inner_attack(model, x, eps)
        if self.options.forward == "concat":
            clean, adv = model(torch.cat([x, x_adv])).split(len(x))
        else:
            clean, adv = model(x), model(x_adv)
        kl = F.kl_div(F.log_softmax(adv, dim=1), F.softmax(clean, dim=1), reduction="batchmean")
        return classification_loss(clean, y, self.options.label_smoothing) + self.options.beta * kl, clean, adv
