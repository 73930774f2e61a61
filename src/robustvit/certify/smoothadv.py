"""SmoothAdv's attack: L2 PGD on the smoothed soft classifier (Salman, Li, Razenshteyn, Zhang, Zhang, Bubeck & Yang,
"Provably Robust Deep Learning via Adversarially Trained Smoothed Classifiers", NeurIPS 2019, arXiv:1906.04584;
Hadisalman/smoothing-adversarial, ``attacks.py``: ``PGD_L2._attack_mutlinoise``).

G(x) = E_δ[softmax f(x + δ)], δ ~ N(0, σ²I), is estimated on ``m`` draws per image, fixed through the attack. From
δ_adv = 0, each of ``steps`` steps of size 2ε/steps ascends CE(log mean softmax, y) along the per-image unit-L2
gradient (a random normal direction where it is 0), then projects x + δ_adv onto [0, 1] and δ_adv onto the ε ball.
The noise is in pixel units and not clipped, as in :mod:`robustvit.certify.smoothing`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from robustvit.models.wrapper import range_check_off
from robustvit.utils import eval_mode


def smoothed_log_probs(model: nn.Module, x: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """log E_δ[softmax f(x + δ)] on the draws ``noise`` (N, m, 3, H, W): (N, K), clamped at 1e-20 as the reference."""
    n, m = noise.shape[:2]
    with range_check_off(model):
        logits = model((x[:, None] + noise).flatten(0, 1))
    probs = logits.float().softmax(-1).view(n, m, -1).mean(1)
    return probs.clamp(min=1e-20).log()


def smoothadv_pgd(model: nn.Module, x: torch.Tensor, y: torch.Tensor, noise: torch.Tensor, eps: float, steps: int,
                  generator: torch.Generator | None = None) -> torch.Tensor:
    """SmoothAdv_PGD: x + δ_adv (N, 3, H, W) in [0, 1], ‖δ_adv‖₂ ≤ ``eps``, against the smoothed soft classifier on
    the fixed draws ``noise`` (N, m, 3, H, W) (model in eval mode, restored after)."""
    x, step = x.detach(), 2 * eps / steps
    delta = torch.zeros_like(x)
    with eval_mode(model), torch.enable_grad():
        for _ in range(steps):
            delta.requires_grad_(True)
            loss = F.nll_loss(smoothed_log_probs(model, x + delta, noise), y)
            (grad,) = torch.autograd.grad(loss, delta)
            norm = grad.flatten(1).norm(dim=1).view(-1, 1, 1, 1)
            rand = torch.randn(x.shape, generator=generator, device=x.device, dtype=x.dtype)
            grad = torch.where(norm > 0, grad / norm.clamp(min=1e-30), rand)   # reference: randn where ‖g‖ = 0
            delta = ((x + delta.detach() + step * grad).clamp(0, 1) - x)
            delta = delta.renorm(2, 0, eps) if eps > 0 else torch.zeros_like(delta)
    return (x + delta).detach()


__all__ = ["smoothadv_pgd", "smoothed_log_probs"]
