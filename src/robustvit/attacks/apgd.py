"""APGD — Auto-PGD (Croce & Hein 2020, "Reliable evaluation of adversarial robustness with an ensemble
of diverse parameter-free attacks", arXiv:2003.01690), L∞ and L2; L1 as APGD-L1 (Croce & Hein 2021, "Mind the
box: l1-APGD for sparse adversarial attacks on image classifiers", arXiv:2103.01208); step by step as the
reference code (fra31/auto-attack).

PGD with momentum (0.75) from a random point of the ε-sphere, step 2ε, halved at checkpoints (0.22·N, then
intervals shrinking by 0.03·N down to 0.06·N) where the loss rose in at most ρ of the steps or the best loss
stalled, with a return to the best point. A point is returned as soon as one iterate fools the model (else the
highest-loss point); restarts attack only the points still robust. The loop never synchronises with the device.

L1: every step is projected exactly onto the L1 ball ∩ [0, 1]^d (:func:`robustvit.attacks.base.project_l1_box`;
ball then clip loses most of the budget on images) along the sparse direction of the top-k gradient entries, k
and the step adapting to the best point's sparsity (``rho`` and ``momentum`` do not apply). ``use_largereps``
(AutoAttack's L1 ``standard``) runs 30 %, 30 % and 40 % of the steps at 3ε, 2ε and ε.

``apgd_ce``: cross-entropy (``targeted=True`` descends the target's); ``apgd_dlr``: DLR, ≥ 3 classes;
``apgd_t``: targeted DLR towards the ``n_target_classes`` most likely wrong classes in turn, ≥ 4 classes.
``eot_iter`` averages the gradients over that many forward passes (EoT, for randomised models).

Example::

    x_adv = create_attack("apgd_ce", model, eps="8/255", steps=100, restarts=5)(x, y)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from robustvit.attacks.base import NORMS, Attack, lp_norm, project_l1_box, register_attack
from robustvit.attacks.fgsm import ascent_direction
from robustvit.attacks.losses import ce_loss, ce_targeted_loss, dlr_loss, dlr_targeted_loss
from robustvit.errors import RobustvitError
from robustvit.options import option


def checkpoint_intervals(steps: int) -> tuple[int, int, int]:
    """(first interval, decrement, minimum interval) of the checkpoint schedule for ``steps`` iterations."""
    return max(int(0.22 * steps), 1), max(int(0.03 * steps), 1), max(int(0.06 * steps), 1)


def _track(now: torch.Tensor, x_adv: torch.Tensor, loss: torch.Tensor, grad: torch.Tensor, fooled: torch.Tensor,
           x_fooled: torch.Tensor, x_best: torch.Tensor, grad_best: torch.Tensor, loss_best: torch.Tensor
           ) -> tuple[torch.Tensor, ...]:
    """One step's bookkeeping: a fooling iterate kept where ``now`` fools, and the highest-loss point with its
    gradient: (fooled, x_fooled, x_best, grad_best, loss_best)."""
    x_fooled = torch.where(_bcast(now, x_adv), x_adv, x_fooled)
    gain = loss > loss_best
    better = _bcast(gain, x_adv)
    return (fooled | now, x_fooled, torch.where(better, x_adv, x_best), torch.where(better, grad, grad_best),
            torch.where(gain, loss, loss_best))


def _bcast(mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return mask.view(-1, *([1] * (like.ndim - 1)))


def _l0(d: torch.Tensor) -> torch.Tensor:
    """Non-zero coordinates per sample (N,), as a float."""
    return (d != 0).flatten(1).sum(1).to(d.dtype)


def sparse_direction(grad: torch.Tensor, topk: torch.Tensor) -> torch.Tensor:
    """APGD-L1's step direction: ``sign(g)`` on the coordinates whose |g| reaches the ``(1 − topk)``-quantile
    (the top ``topk`` fraction, per sample), divided by their count (unit L1 norm)."""
    flat = grad.abs().flatten(1)
    n_fts = flat.shape[1]
    rank = ((1 - topk) * n_fts).clamp(0, n_fts - 1).long()
    threshold = flat.sort(1).values.gather(1, rank[:, None])
    sign = torch.where(flat >= threshold, grad.flatten(1).sign(), torch.zeros_like(flat))
    return (sign / (sign.abs().sum(1, keepdim=True) + 1e-10)).view_as(grad)


@register_attack
class APGD(Attack):
    """APGD on the cross-entropy (Croce & Hein 2020, arXiv:2003.01690); ``targeted=True`` descends the
    cross-entropy of the target ``y``."""

    name = "apgd_ce"
    smoke = {"steps": 2}
    aliases = ("apgd-ce",)
    loss_name = "ce"
    masking_checks = ("model", "more_steps", "blackbox")
    norms = NORMS

    @dataclass
    class Options(Attack.Options):
        steps: int = option(100, min=1, help="iterations")
        restarts: int = option(1, min=1, help="restarts on the points still robust")
        rho: float = option(0.75, min=0, max=1, help="fraction of successful steps below which the step size "
                                                    "halves at a checkpoint (ρ)")
        momentum: float = option(0.75, min=0, max=1, help="momentum α of the update")
        eot_iter: int = option(1, min=1, help="gradients averaged per step (expectation over transformation, "
                                              "for randomised models)")
        use_largereps: bool = option(False, help="L1: run the steps at 3ε, 2ε, then ε (AutoAttack's L1 standard "
                                                 "version)")

    def __init__(self, model: nn.Module, **options: Any) -> None:
        super().__init__(model, **options)
        if self.targeted and self.loss_name != "ce":
            raise RobustvitError(f"{self.name} does not take targeted=True; use apgd_t (it picks its targets) "
                                 "or apgd_ce with targeted=True")
        o = self.opts
        self.steps, self.restarts, self.eot_iter = o.steps, o.restarts, o.eot_iter
        self.rho, self.momentum = float(o.rho), float(o.momentum)
        self.use_largereps = bool(o.use_largereps)
        if self.use_largereps and self.norm != "l1":
            raise RobustvitError(f"{self.name}: use_largereps is the L1 schedule; drop it or set norm=l1")

    # ---- driver: restarts on the points still robust ------------------------------------------
    def perturb(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        gen = self.generator(x.device)
        logits = self.predict(x)
        robust = ~self.success(logits, y)
        adv = x.clone()
        for target in self.targets(logits):
            for _ in range(self.restarts):
                robust = self._attack_remaining(x, y, target, robust, adv, gen)
        return adv

    def targets(self, logits: torch.Tensor) -> list[torch.Tensor | None]:
        """The target classes to run over (``None``: untargeted)."""
        return [None]

    def _attack_remaining(self, x: torch.Tensor, y: torch.Tensor, target: torch.Tensor | None,
                          robust: torch.Tensor, adv: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        """One run on the still-robust points; writes into ``adv`` and returns the new robust mask."""
        idx = robust.nonzero().squeeze(1)
        if idx.numel() == 0:
            return robust
        t = None if target is None else target[idx]
        best, fooled, x_fooled = self.single_run(x[idx], y[idx], t, gen)
        adv[idx] = torch.where(_bcast(fooled, best), x_fooled, best)
        robust = robust.clone()
        robust[idx] = ~fooled
        return robust

    # ---- one APGD run -------------------------------------------------------------------------
    def loss_fn(self, logits: torch.Tensor, y: torch.Tensor, target: torch.Tensor | None) -> torch.Tensor:
        """The per-sample loss the attack maximises."""
        if self.loss_name == "ce":
            return ce_targeted_loss(logits, y, y) if self.targeted else ce_loss(logits, y)
        if self.loss_name == "dlr":
            return dlr_loss(logits, y)
        return dlr_targeted_loss(logits, y, target)

    def grad(self, x_adv: torch.Tensor, y: torch.Tensor, target: torch.Tensor | None
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(loss, gradient, logits) at ``x_adv``, averaged over ``eot_iter`` passes (EoT)."""
        grad = torch.zeros_like(x_adv)
        loss_sum = torch.zeros(x_adv.shape[0], device=x_adv.device, dtype=x_adv.dtype)
        for _ in range(self.eot_iter):
            xa = x_adv.detach().requires_grad_(True)
            logits = self.model(xa)
            loss = self.loss_fn(logits, y, target)
            g, = torch.autograd.grad(loss.sum(), xa)
            grad += g
            loss_sum += loss.detach()
        grad /= self.eot_iter        # exact when eot_iter = 1
        loss_sum /= self.eot_iter
        return loss_sum, grad, logits.detach()

    def sphere_start(self, x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        """A random start on the ε-sphere (L∞: uniform noise rescaled to ‖·‖∞ = ε; L2: Gaussian, ‖·‖₂ = ε)."""
        if self.norm == "linf":
            t = torch.rand(x.shape, generator=gen, device=x.device, dtype=x.dtype) * 2 - 1
        else:
            t = torch.randn(x.shape, generator=gen, device=x.device, dtype=x.dtype)
        t = t / (lp_norm(t, self.norm).view(-1, 1, 1, 1) + 1e-12)
        return (x + self.eps * t).clamp(0, 1)

    def single_run(self, x: torch.Tensor, y: torch.Tensor, target: torch.Tensor | None, gen: torch.Generator
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Returns (highest-loss point, fooled mask, a fooling iterate where fooled)."""
        if self.norm == "l1":
            return self.largereps_run(x, y, target, gen) if self.use_largereps else \
                self.single_run_l1(x, y, target, gen, self.eps, self.steps)
        k, decr, k_min = checkpoint_intervals(self.steps)
        x_adv = self.sphere_start(x, gen)
        loss, grad, logits = self.grad(x_adv, y, target)
        losses = torch.empty((self.steps + 1, x.shape[0]), device=x.device, dtype=loss.dtype)
        losses[0] = loss
        fooled = self.success(logits, y)
        x_fooled, x_best, grad_best, loss_best = x_adv.clone(), x_adv.clone(), grad.clone(), loss.clone()
        step = torch.full((x.shape[0], 1, 1, 1), 2.0 * self.eps, device=x.device, dtype=x.dtype)
        x_prev, since_check = x_adv.clone(), 0
        box = self.linf_box(x) if self.norm == "linf" else None
        best_at_check, reduced_at_check = loss_best.clone(), torch.ones_like(fooled)
        for i in range(self.steps):
            x_adv, x_prev = self._step(x, x_adv, x_prev, grad, step, 1.0 if i == 0 else self.momentum, box), x_adv
            loss, grad, logits = self.grad(x_adv, y, target)
            losses[i + 1] = loss
            fooled, x_fooled, x_best, grad_best, loss_best = _track(
                self.success(logits, y), x_adv, loss, grad, fooled, x_fooled, x_best, grad_best, loss_best)
            since_check += 1
            if since_check == k:
                increases = (losses[i + 2 - k:i + 2] > losses[i + 1 - k:i + 1]).sum(0)
                flag = (increases <= k * self.rho) | (~reduced_at_check & (best_at_check >= loss_best))
                reduced_at_check, best_at_check = flag, loss_best.clone()
                step = torch.where(_bcast(flag, step), step / 2, step)
                x_adv = torch.where(_bcast(flag, x), x_best, x_adv)
                grad = torch.where(_bcast(flag, x), grad_best, grad)
                k, since_check = max(k - decr, k_min), 0
        return x_best, fooled, x_fooled

    # ---- APGD-L1 (Croce & Hein 2021, arXiv:2103.01208) -----------------------------------------------
    def largereps_run(self, x: torch.Tensor, y: torch.Tensor, target: torch.Tensor | None, gen: torch.Generator
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The L1 ε schedule: 30 % of the steps at 3ε, 30 % at 2ε, the rest at ε, each stage starting from the
        previous one's best point projected onto its ball; the last stage's result."""
        part = math.ceil(0.3 * self.steps)
        stages = ((3 * self.eps, part), (2 * self.eps, part), (self.eps, self.steps - part - part))
        noise = torch.randn(x.shape, generator=gen, device=x.device, dtype=x.dtype)
        x_init = x + project_l1_box(x, noise, 3 * self.eps)
        for eps, steps in stages:
            x_init = x + project_l1_box(x, x_init - x, eps)
            x_init, fooled, x_fooled = self.single_run_l1(x, y, target, gen, eps, steps, x_init)
        return x_init, fooled, x_fooled

    def single_run_l1(self, x: torch.Tensor, y: torch.Tensor, target: torch.Tensor | None, gen: torch.Generator,
                      eps: float, n_iter: int, x_init: torch.Tensor | None = None
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One APGD-L1 run of ``n_iter`` steps in the L1 ball of radius ``eps`` ∩ [0, 1]^d, from ``x_init`` (else
        a projected Gaussian draw): (highest-loss point, fooled mask, a fooling iterate where fooled)."""
        n, n_fts = x.shape[0], x[0].numel()
        if x_init is None:
            noise = torch.randn(x.shape, generator=gen, device=x.device, dtype=x.dtype)
            x_adv = x + project_l1_box(x, noise, eps)
            topk = torch.full((n,), 0.2, device=x.device, dtype=x.dtype)
            sp_old = torch.full((n,), float(n_fts), device=x.device, dtype=x.dtype)
        else:
            x_adv = x_init.clamp(0, 1)
            sp_old = _l0(x_adv - x)
            topk = sp_old / n_fts / 1.5
        loss, grad, logits = self.grad(x_adv, y, target)
        fooled = self.success(logits, y)
        x_fooled, x_best, grad_best, loss_best = x_adv.clone(), x_adv.clone(), grad.clone(), loss.clone()
        step = torch.full((n, 1, 1, 1), eps, device=x.device, dtype=x.dtype)
        k, since_check = max(int(0.04 * n_iter), 1), 0
        for _ in range(n_iter):
            x_adv = x + project_l1_box(x, x_adv - x + step * sparse_direction(grad, topk), eps)
            loss, grad, logits = self.grad(x_adv, y, target)
            fooled, x_fooled, x_best, grad_best, loss_best = _track(
                self.success(logits, y), x_adv, loss, grad, fooled, x_fooled, x_best, grad_best, loss_best)
            since_check += 1
            if since_check == k:       # sparsity-adaptive: k follows the best point's sparsity
                sp = _l0(x_best - x)
                denser = sp / sp_old < 0.95
                topk, sp_old = sp / n_fts / 1.5, sp
                step = torch.where(_bcast(denser, step), torch.full_like(step, eps), step / 1.5).clamp(eps / 10, eps)
                x_adv = torch.where(_bcast(denser, x), x_best, x_adv)
                grad = torch.where(_bcast(denser, x), grad_best, grad)
                since_check = 0
        return x_best, fooled, x_fooled

    def _step(self, x: torch.Tensor, x_adv: torch.Tensor, x_prev: torch.Tensor, grad: torch.Tensor,
              step: torch.Tensor, alpha: float, box: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
        if box is not None:  # L∞: one clamp against precomputed bounds projects
            z = torch.clamp(x_adv + step * grad.sign(), *box)
            return torch.clamp(x_adv + alpha * (z - x_adv) + (1 - alpha) * (x_adv - x_prev), *box)
        z = self.project(x, x_adv + step * ascent_direction(grad, self.norm))
        return self.project(x, x_adv + alpha * (z - x_adv) + (1 - alpha) * (x_adv - x_prev))


@register_attack
class APGDDLR(APGD):
    """APGD on the DLR loss (Croce & Hein 2020); untargeted, ≥ 3 classes."""

    name = "apgd_dlr"
    aliases = ("apgd-dlr",)
    loss_name = "dlr"


@register_attack
class APGDT(APGD):
    """APGD on the targeted DLR loss (Croce & Hein 2020), towards each of the most likely wrong classes of the
    clean logits in turn, ``restarts`` runs on the points still robust; ``y`` are the true labels, ≥ 4 classes."""

    name = "apgd_t"
    smoke = {"steps": 2, "n_target_classes": 1}
    aliases = ("apgd-t",)
    loss_name = "dlr-targeted"

    @dataclass
    class Options(APGD.Options):
        n_target_classes: int = option(9, min=1, help="target classes tried, the most likely wrong ones first "
                                                      "(capped at classes − 1)")

    def __init__(self, model: nn.Module, **options: Any) -> None:
        super().__init__(model, **options)
        self.n_target_classes = self.opts.n_target_classes

    def targets(self, logits: torch.Tensor) -> list[torch.Tensor | None]:
        ranked = logits.argsort(dim=1)
        return [ranked[:, -t] for t in range(2, min(self.n_target_classes, logits.shape[1] - 1) + 2)]
