"""FGSM — the Fast Gradient Sign Method (Goodfellow, Shlens & Szegedy 2015, arXiv:1412.6572).

One step of size ε along the sign of the cross-entropy's input gradient (L∞), or along the L2-normalised
gradient (``norm="l2"``, the "fast gradient method"); targeted: one step *down* the cross-entropy of the target.
``random_start=True`` first jumps to a uniform point of the ε-ball (FGSM-RS, Wong et al. 2020, arXiv:2001.03994;
then use e.g. ``step_size=1.25 * eps``).

Example::

    x_adv = create_attack("fgsm", model, eps="1/255")(x, y)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from robustvit.attacks.base import Attack, register_attack
from robustvit.options import Eps, option


def ascent_direction(grad: torch.Tensor, norm: str) -> torch.Tensor:
    """The steepest-ascent unit step for ``norm``: sign(g) for L∞, g/‖g‖₂ per sample for L2."""
    if norm == "linf":
        return grad.sign()
    return grad / grad.flatten(1).norm(dim=1).clamp_min(1e-12).view(-1, *([1] * (grad.ndim - 1)))


@register_attack
class FGSM(Attack):
    """FGSM (Goodfellow et al. 2015, arXiv:1412.6572): one signed-gradient step (L∞), or FGM (L2)."""

    name = "fgsm"
    demo = (("fgsm:eps=1/255:limit=500", "fgsm:eps=4/255:limit=500"), ("fgsm:eps=1/255:limit=100", "fgsm:eps=4/255:limit=100"))
    masking_checks = ("model",)   # one step: a black-box attack beating it is expected, not a sign of masking

    @dataclass
    class Options(Attack.Options):
        step_size: Eps | None = option(None, min=0, help="step (default ε)")
        random_start: bool = option(False, help="start from a random point of the ε-ball (FGSM-RS; the seed draws it)")

    def __init__(self, model: nn.Module, **options: Any) -> None:
        super().__init__(model, **options)
        self.step_size = self.eps if self.opts.step_size is None else float(self.opts.step_size)
        self.use_random_start = self.opts.random_start

    def perturb(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x0 = self.random_start(x, self.generator(x.device)) if self.use_random_start else x
        _, grad, _ = self.loss_and_grad(x0, y)
        return x0 + self.step_size * ascent_direction(grad, self.norm)
