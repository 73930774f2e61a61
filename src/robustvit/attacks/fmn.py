"""FMN — the Fast Minimum-Norm attack (Pintor, Roli, Brendel & Biggio, "Fast Minimum-norm Adversarial Attacks
through Adaptive Norm Constraints", NeurIPS 2021, arXiv:2102.12827), L∞, L2 and L1.

It ascends the logit margin ``max_{j≠y} f_j − f_y`` (targeted: ``f_t − max_{j≠t} f_j``) with L2-normalised steps
projected onto an Lp ball whose radius ε adapts per image: the linear distance estimate ``‖δ‖ + |L| / ‖∇L‖_dual``
until an adversarial point is seen, then ``min(ε(1 − γ), best norm)`` when adversarial, ``ε(1 + γ)`` when not
(at most ``‖max(x, 1 − x)‖_p``); α and γ anneal (cosine) over the ``steps``. As the authors' code
(pralab/Fast-Minimum-Norm-FMN-Attack), also for L2 points inside the ball, which stay (adv_lib 0.2.8 rescales
them onto the sphere); L1 projection of Duchi et al. 2008.

It returns the smallest adversarial found where its norm is at most ε, else the clean image. ``last_distance``
(N,) holds that norm (0 if already misclassified, ``inf`` if none), ``last_adversarial`` the images, whatever ε.

Example::

    atk = create_attack("fmn", model, norm="l2", eps=0.5, steps=100)
    x_adv = atk(x, y)
    distances = atk.last_distance
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from robustvit.attacks.base import NORMS, Attack, lp_norm, register_attack
from robustvit.options import option

#: The dual of each norm (the norm of the gradient in the linear distance estimate |L| / ‖∇L‖_dual).
DUAL = {"linf": "l1", "l2": "l2", "l1": "linf"}


def project_l1_ball(d: torch.Tensor, eps: torch.Tensor) -> torch.Tensor:
    """Euclidean projection of each row of ``d`` (N, D) onto the L1 ball of radius ``eps`` (N,) (Duchi et al.,
    ICML 2008: soft-thresholding at θ found from the sorted magnitudes); rows inside the ball are kept."""
    a = d.abs()
    inside = a.sum(1) <= eps
    e = torch.where(inside, torch.zeros_like(eps), eps)[:, None]          # finite where it matters
    mu = a.sort(dim=1, descending=True).values
    cum = mu.cumsum(1)
    k = torch.arange(1, d.shape[1] + 1, device=d.device, dtype=d.dtype)
    rho = ((mu * k > cum - e) * k).amax(1, keepdim=True).clamp_min(1)  # the number of coordinates kept
    theta = (cum.gather(1, rho.long() - 1) - e) / rho
    return torch.where(inside[:, None], d, torch.sign(d) * (a - theta).clamp_min(0))


def project_ball(d: torch.Tensor, eps: torch.Tensor, norm: str) -> torch.Tensor:
    """Projection of each perturbation of ``d`` (N, …) onto its Lp ball of radius ``eps`` (N,)."""
    flat, e = d.flatten(1), eps[:, None]
    if norm == "linf":
        out = torch.maximum(torch.minimum(flat, e), -e)
    elif norm == "l2":
        out = flat * torch.clamp(e / flat.norm(dim=1, keepdim=True).clamp_min(1e-12), max=1.0)
    else:
        out = project_l1_ball(flat, eps)
    return out.view_as(d)


@register_attack
class FMN(Attack):
    """FMN, the Fast Minimum-Norm attack (Pintor et al. 2021, arXiv:2102.12827): the smallest adversarial
    perturbation per image; robust at ε when it exceeds ε."""

    name = "fmn"
    norms = NORMS
    smoke = {"steps": 3}
    masking_checks = ("model", "more_steps", "blackbox")

    @dataclass
    class Options(Attack.Options):
        steps: int = option(100, min=1, help="iterations (one forward and backward pass each)")
        alpha_init: float = option(1.0, min=0, help="initial step size α₀ (L2 length of the step)")
        alpha_final: float | None = option(None, min=0, help="final step size after cosine annealing "
                                                             "(default α₀/100)")
        gamma_init: float = option(0.05, min=0, max=1, help="initial ε-adaptation factor γ₀ (ε·(1 ± γ))")
        gamma_final: float = option(0.001, min=0, max=1, help="final ε-adaptation factor after cosine annealing")

    def __init__(self, model: nn.Module, **options: Any) -> None:
        super().__init__(model, **options)
        o = self.opts
        self.steps = int(o.steps)
        self.alpha_init = float(o.alpha_init)
        self.alpha_final = self.alpha_init / 100 if o.alpha_final is None else float(o.alpha_final)
        self.gamma_init, self.gamma_final = float(o.gamma_init), float(o.gamma_final)
        self.last_distance: torch.Tensor | None = None
        self.last_adversarial: torch.Tensor | None = None

    def perturb(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        best, dist = self.minimize(x, y)
        self.last_adversarial, self.last_distance = best, dist
        within = (dist <= self.eps).view(-1, *([1] * (x.ndim - 1)))
        return torch.where(within, best, x)

    def schedule(self, i: int) -> tuple[float, float]:
        """(α, γ) at iteration ``i``: cosine annealing from the initial to the final values."""
        cosine = (1 + math.cos(math.pi * i / self.steps)) / 2
        return (self.alpha_final + (self.alpha_init - self.alpha_final) * cosine,
                self.gamma_final + (self.gamma_init - self.gamma_final) * cosine)

    def margin(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The loss FMN ascends (N,): positive exactly where the top class is adversarial (ties aside)."""
        own = logits.gather(1, y[:, None]).squeeze(1)
        other = logits.scatter(1, y[:, None], -torch.inf).amax(1)
        return own - other if self.targeted else other - own

    def minimize(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The smallest adversarial images found and their distances (N,) to ``x`` (``inf`` and ``x`` where none
        was found; 0 where ``x`` is adversarial already). No host–device synchronisation in the loop."""
        n, view = x.shape[0], (-1, *([1] * (x.ndim - 1)))
        worst = lp_norm(torch.maximum(x, 1 - x), self.norm)
        eps = torch.full((n,), torch.inf, device=x.device, dtype=x.dtype)
        best_norm, best, delta = eps.clone(), x.clone(), torch.zeros_like(x)
        found = torch.zeros(n, dtype=torch.bool, device=x.device)
        for i in range(self.steps):
            alpha, gamma = self.schedule(i)
            delta.requires_grad_(True)
            logits = self.model(x + delta)
            loss = self.margin(logits, y)
            grad, = torch.autograd.grad(loss.sum(), delta)
            delta, loss, logits = delta.detach(), loss.detach(), logits.detach()
            is_adv = self.success(logits, y)
            norm = lp_norm(delta, self.norm)
            better = is_adv & (norm < best_norm)
            best_norm = torch.where(better, norm, best_norm)
            best = torch.where(better.view(view), x + delta, best)
            found |= is_adv
            to_boundary = loss.abs() / lp_norm(grad, DUAL[self.norm]).clamp_min(1e-12)
            eps = torch.where(is_adv, torch.minimum(eps * (1 - gamma), best_norm),
                              torch.where(found, eps * (1 + gamma), norm + to_boundary))
            eps = torch.minimum(eps, worst)
            step = grad / grad.flatten(1).norm(dim=1).clamp_min(1e-12).view(view)
            delta = project_ball(delta + alpha * step, eps, self.norm)
            delta = (x + delta).clamp(0, 1) - x
        return best, torch.where(found, lp_norm(best - x, self.norm), torch.inf)
