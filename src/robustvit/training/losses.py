"""Pluggable training losses.

A loss module is called as ``loss_fn(model, x, y, epoch) -> (loss, clean_logits, adv_logits_or_None)``
(the interface of Debenedetti's light-recipe code, dedeswim/vits-robustness-torch), so adversarial
training and feature-alignment training plug into the same training loop:

* ``ce``: cross-entropy with label smoothing (soft targets from MixUp/CutMix accepted).
* ``pgd_at``: Madry et al. (arXiv:1706.06083): train on PGD examples generated with the model in eval mode.
* ``fgsm_rs``: Wong et al., "Fast is better than free" (arXiv:2001.03994): uniform start in the ε-ball, one
  signed-gradient step of 1.25·ε, projection.
* ``trades``: Zhang et al. (arXiv:1901.08573): CE(clean) + β·KL(p_clean ‖ p_adv), the inner PGD maximising the KL.
* ``afat`` (and ``afat_random``, ``afat_patchdrop``): see :mod:`robustvit.training.afat`.
* ``mpp``: masked patch prediction, the ViT paper's self-supervised pre-training; see :mod:`robustvit.training.mpp`.

The inner attacks are robustvit's own (``robustvit.attacks``), which put the model in eval mode and restore
its mode. ε follows a per-epoch schedule (:mod:`robustvit.training.schedules`); at ε = 0 (the first epoch of
a linear warm-up) the adversarial losses train on clean images. Attack random starts are seeded from
``seed`` and a call counter that is part of the loss's ``state_dict`` (so a resumed run replays them).

>>> loss_fn = create_loss("fgsm_rs", eps="4/255")
>>> loss, clean_logits, adv_logits = loss_fn(model, x, y, epoch=0)
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from robustvit.attacks import create_attack
from robustvit.errors import RobustvitError
from robustvit.registry import Registry
from robustvit.training.schedules import check_schedule, eps_at
from robustvit.utils import derive_seed, parse_eps

LossOutput = tuple[torch.Tensor, torch.Tensor, "torch.Tensor | None"]


def classification_loss(logits: torch.Tensor, y: torch.Tensor, label_smoothing: float = 0.0) -> torch.Tensor:
    """Mean cross-entropy; ``y`` is (N,) class indices or (N, K) soft targets (MixUp/CutMix, already smoothed)."""
    if y.ndim == 2:
        return torch.sum(-y * F.log_softmax(logits, dim=-1), dim=-1).mean()
    return F.cross_entropy(logits, y, label_smoothing=label_smoothing)


def hard_labels(y: torch.Tensor) -> torch.Tensor:
    """Class indices from hard or soft targets."""
    return y.argmax(1) if y.ndim == 2 else y


def _rank() -> int:
    dist = torch.distributed
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


class TrainingLoss(nn.Module):
    """Base class: subclasses implement ``forward(model, x, y, epoch)``.

    ``after_step()`` is called by the trainer after every optimizer step (AFAT's corruption model steps there);
    ``metrics()`` returns extra numbers for ``metrics.jsonl`` (averaged over the epoch's steps).
    """

    name = ""

    def forward(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, epoch: int) -> LossOutput:  # noqa: D102
        raise NotImplementedError

    def setup(self, model: nn.Module) -> None:
        """Hook run once with the model before training (and before a checkpoint's state is loaded)."""

    def after_step(self) -> None:
        """Hook run after the classifier's optimizer step."""

    def metrics(self) -> dict[str, float]:
        return {}

    def optimized_parameters(self) -> list[tuple[str, nn.Parameter]]:
        """(name, parameter) pairs of this loss that the trainer's optimizer trains with the model (MPP's
        [mask] embedding and head); losses with their own optimizer (AFAT) return none."""
        return []


class CrossEntropy(TrainingLoss):
    """Standard training: cross-entropy with label smoothing on clean images."""

    name = "ce"

    def __init__(self, label_smoothing: float = 0.1) -> None:
        super().__init__()
        self.label_smoothing = label_smoothing

    def forward(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, epoch: int) -> LossOutput:
        logits = model(x)
        return classification_loss(logits, y, self.label_smoothing), logits, None


class AdversarialLoss(TrainingLoss):
    """Shared settings of the adversarial losses: ``eps`` (pixel units, "4/255" accepted), ``attack_steps`` K,
    ``step_size`` (default 1.5·ε/K, the light recipe's rule), ε schedule (``eps_schedule`` "constant"/"linear",
    ``eps_warmup_epochs``), ``label_smoothing``, ``seed``."""

    def __init__(self, eps: float | str = 4 / 255, attack_steps: int = 1, step_size: float | str | None = None,
                 eps_schedule: str = "constant", eps_warmup_epochs: float = 0, label_smoothing: float = 0.1,
                 seed: int = 0) -> None:
        super().__init__()
        self.eps = parse_eps(eps)
        if int(attack_steps) < 1:
            raise RobustvitError(f"{self.name}: attack_steps must be >= 1, got {attack_steps}")
        check_schedule(eps_schedule)
        self.attack_steps = int(attack_steps)
        self.step_size = None if step_size is None else parse_eps(step_size)
        self.eps_schedule, self.eps_warmup_epochs = eps_schedule, float(eps_warmup_epochs)
        self.label_smoothing = float(label_smoothing)
        self.seed = int(seed)
        self.register_buffer("calls", torch.zeros((), dtype=torch.long))   # attack seeds; saved with the run

    def eps_for(self, epoch: int) -> float:
        return eps_at(epoch, self.eps, self.eps_schedule, self.eps_warmup_epochs)

    def step_for(self, eps: float) -> float:
        """The attack's step: the explicit ``step_size`` scaled with the ε schedule, else 1.5·ε/K."""
        if self.step_size is None:
            return 1.5 * eps / self.attack_steps
        return self.step_size * (eps / self.eps if self.eps > 0 else 0.0)

    def next_seed(self) -> int:
        """A fresh attack seed per call (and per data-parallel rank)."""
        s = derive_seed(self.seed, "attack", int(self.calls), _rank()) % 2**31   # the attack scales it
        self.calls += 1
        return s

    def attack(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, eps: float, **kw: Any) -> torch.Tensor:
        """PGD (``attack_steps`` steps, random start) from ``robustvit.attacks``, model in eval mode."""
        atk = create_attack("pgd", model, eps=eps, steps=self.attack_steps, step_size=self.step_for(eps),
                            random_start=True, seed=self.next_seed(), **kw)
        return atk(x, y)

    @staticmethod
    def clean_logits(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """Clean logits for the training-accuracy log only (no graph)."""
        with torch.no_grad():
            return model(x)


class PGDAT(AdversarialLoss):
    """PGD adversarial training (Madry et al., arXiv:1706.06083): CE with label smoothing on x_adv only."""

    name = "pgd_at"

    def forward(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, epoch: int) -> LossOutput:
        eps, labels = self.eps_for(epoch), hard_labels(y)
        x_adv = self.attack(model, x, labels, eps) if eps > 0 else x
        adv_logits = model(x_adv)
        clean = self.clean_logits(model, x) if eps > 0 else adv_logits.detach()
        return classification_loss(adv_logits, y, self.label_smoothing), clean, adv_logits


class FGSMRS(PGDAT):
    """FGSM with random start (Wong et al., arXiv:2001.03994): x + U(−ε, ε), one step of 1.25·ε along
    sign(∇), projection onto the ε-ball and [0, 1]; then CE on x_adv (``step_size`` overrides 1.25·ε)."""

    name = "fgsm_rs"

    def __init__(self, eps: float | str = 4 / 255, step_size: float | str | None = None, eps_schedule: str = "constant",
                 eps_warmup_epochs: float = 0, label_smoothing: float = 0.1, seed: int = 0) -> None:
        super().__init__(eps=eps, attack_steps=1, step_size=step_size, eps_schedule=eps_schedule,
                         eps_warmup_epochs=eps_warmup_epochs, label_smoothing=label_smoothing, seed=seed)

    def step_for(self, eps: float) -> float:
        return 1.25 * eps if self.step_size is None else super().step_for(eps)


class TRADES(AdversarialLoss):
    """TRADES (Zhang et al., arXiv:1901.08573): CE(f(x), y) + β·KL(softmax f(x) ‖ softmax f(x_adv)), β = 6;
    the inner PGD maximises the same KL from a uniform start (the original starts at x + 0.001·N(0, 1)).
    Clean and adversarial images go through the model in one batch."""

    name = "trades"

    def __init__(self, beta: float = 6.0, eps: float | str = 8 / 255, attack_steps: int = 10, **kwargs: Any) -> None:
        super().__init__(eps=eps, attack_steps=attack_steps, **kwargs)
        self.beta = float(beta)

    def forward(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, epoch: int) -> LossOutput:
        eps = self.eps_for(epoch)
        if eps > 0:
            was = model.training
            model.eval()
            with torch.no_grad():
                p_clean = F.softmax(model(x).float(), dim=1)
            model.train(was)

            def kl_to_clean(logits: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
                return F.kl_div(F.log_softmax(logits.float(), dim=1), p_clean[idx], reduction="none").sum(1)

            # the attack's "labels" are row indices into p_clean, so the KL target follows the batch
            x_adv = self.attack(model, x, torch.arange(len(x), device=x.device), eps, loss=kl_to_clean)
        else:
            x_adv = x
        logits = model(torch.cat([x, x_adv]))
        clean, adv = logits[: len(x)], logits[len(x):]
        kl = F.kl_div(F.log_softmax(adv, dim=1), F.softmax(clean, dim=1), reduction="batchmean")
        return classification_loss(clean, y, self.label_smoothing) + self.beta * kl, clean, adv


def _load_builtin_losses() -> None:
    import robustvit.training.afat  # noqa: F401  (registers afat, afat_random, afat_patchdrop)
    import robustvit.training.mpp  # noqa: F401  (registers mpp)


LOSSES: Registry[type[TrainingLoss]] = Registry("training loss", loader=_load_builtin_losses,
                                                 hint="see `robustvit list losses`")
register_loss = LOSSES.register
for _cls in (CrossEntropy, PGDAT, FGSMRS, TRADES):
    LOSSES.register(_cls)


def list_losses(pattern: str | None = None) -> list[str]:
    """Registered training-loss names (``ce``, ``pgd_at``, ``fgsm_rs``, ``trades``, ``afat``, …)."""
    return LOSSES.list(pattern)


def create_loss(name: str, **kwargs: Any) -> TrainingLoss:
    """Build a registered training loss, e.g. ``create_loss("trades", beta=6, eps="8/255")``."""
    return LOSSES.create(name, **kwargs)


def loss_keywords(name: str) -> set[str] | None:
    """Options the loss ``name`` accepts (None: any)."""
    return LOSSES.keywords(name)
