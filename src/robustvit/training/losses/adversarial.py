"""Shared machinery of the adversarial losses (``pgd_at``, ``fgsm_rs``, ``trades``): ε schedule, attack step,
per-call attack seeds, the model's mode during the inner attack and the clean logits of the ``train_acc`` log.

* ``attack_mode="eval"`` (default) runs the inner attack in eval mode (Madry et al.'s and TRADES's code);
  ``"train"`` keeps train mode (dropout, drop-path and BatchNorm batch statistics), as Wong et al.'s FGSM-RS
  (locuslab/fast_adversarial).
* ``clean_forward``: ``pgd_at``/``fgsm_rs`` train on the adversarial batch only, so that BatchNorm's running
  statistics see what the references' do; ``train_acc``'s clean logits come from an extra no-grad forward in eval
  mode (``"eval"``, default), from none (``"none"``: accuracy on the adversarial batch, as Wong et al. log it), or
  from a train-mode forward (``"train"``: BN statistics also see the clean batch).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn

from robustvit.attacks import create_attack
from robustvit.options import Eps, option
from robustvit.training.losses.base import TrainingLoss, _rank
from robustvit.training.schedules import EpsSchedule, eps_at
from robustvit.utils import derive_seed, eval_mode


@dataclass
class AdversarialOptions:
    """Options every adversarial loss shares."""

    eps: Eps = option(4 / 255, min=0, help="L∞ budget in pixel units (4/255 accepted)")
    step_size: Eps | None = option(None, min=0, help="attack step at full ε (none: the loss's rule)")
    eps_schedule: EpsSchedule = option("constant", help="ε warm-up schedule")
    eps_warmup_epochs: float = option(0.0, min=0, help="epochs of the linear ε warm-up")
    label_smoothing: float = option(0.1, min=0, max=1, help="label smoothing of the classification loss")
    seed: int = option(0, help="seed of the attacks' random starts")
    attack_mode: Literal["eval", "train"] = option("eval", help="model mode during the inner attack")
    clean_forward: Literal["eval", "none", "train"] = option("eval", help="how train_acc's clean logits are made")


class _KeepTrainMode(nn.Module):
    """Forwards to ``inner`` and ignores ``train()``/``eval()``: an attack that puts its model in eval mode
    leaves ``inner`` in train mode (``attack_mode="train"``)."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.inner(x)

    def train(self, mode: bool = True) -> "_KeepTrainMode":  # noqa: D102
        return self


class AdversarialLoss(TrainingLoss):
    """Base of the adversarial losses; ``self.options`` is an :class:`AdversarialOptions` (or a subclass)."""

    Options = AdversarialOptions
    #: the attack's step at full ε when ``step_size`` is not given, as a multiple of ε
    step_rule: float = 1.5
    counts_calls = True

    def eps_for(self, epoch: int) -> float:
        o = self.options
        return eps_at(epoch, float(o.eps), o.eps_schedule, float(o.eps_warmup_epochs))

    def step_for(self, eps: float) -> float:
        """The attack's step at ``eps``: the explicit ``step_size`` scaled with the ε schedule, else the loss's
        rule (``step_rule``·ε/K; PGD-AT 1.5·ε/K as the light recipe, FGSM-RS 1.25·ε)."""
        if self.options.step_size is None:
            return self.step_rule * eps / self.options.attack_steps
        full = float(self.options.eps)
        return float(self.options.step_size) * (eps / full if full > 0 else 0.0)

    def next_seed(self) -> int:
        """A fresh attack seed per call (and per data-parallel rank)."""
        s = derive_seed(self.options.seed, "attack", int(self.calls), _rank()) % 2**31   # the attack scales it
        self.calls += 1
        return s

    def attack_model(self, model: nn.Module) -> nn.Module:
        """The model as the inner attack sees it (kept in train mode with ``attack_mode="train"``)."""
        return _KeepTrainMode(model) if self.options.attack_mode == "train" else model

    def attack(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, eps: float, **kw: Any) -> torch.Tensor:
        """PGD (``attack_steps`` steps, uniform random start) from ``robustvit.attacks``."""
        return create_attack("pgd", self.attack_model(model), eps=eps, steps=self.options.attack_steps,
                             step_size=self.step_for(eps), random_start=True, seed=self.next_seed(), **kw)(x, y)

    def clean_logits(self, model: nn.Module, x: torch.Tensor, adv_logits: torch.Tensor) -> torch.Tensor:
        """Logits for the ``train_acc`` log only (no graph), as ``clean_forward`` says."""
        mode = self.options.clean_forward
        if mode == "none":
            return adv_logits.detach()
        with torch.no_grad(), (eval_mode(model) if mode == "eval" else contextlib.nullcontext()):
            return model(x)
