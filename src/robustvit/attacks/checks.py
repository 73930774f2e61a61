"""Gradient-masking checks in the spirit of AutoAttack's self-checks (Croce & Hein 2020,
arXiv:2003.01690, and the ``flags_doc.md`` of fra31/auto-attack).

Each check returns ``{"flag": bool, "detail": {...}, "message": str}``; ``flag=True`` means the evaluation may be
unreliable for the reason in ``message``. The evaluation suites and :class:`robustvit.attacks.autoattack.AutoAttack`
put these dicts in their results.

    >>> report = run_checks(model, x, y)            # doctest: +SKIP
    >>> {name: r["flag"] for name, r in report.items()}   # doctest: +SKIP
    {'randomized': False, 'softmax_output': False, 'zero_gradients': False, 'n_classes': False}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

import torch
from torch import nn

from robustvit.attacks.base import create_attack
from robustvit.attacks.losses import get_loss
from robustvit.utils import eval_mode


class CheckResult(TypedDict):
    flag: bool
    detail: dict[str, Any]
    message: str


def _result(flag: bool, message: str, **detail: Any) -> CheckResult:
    return {"flag": bool(flag), "detail": detail, "message": message if flag else ""}


def _eval_logits(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    with eval_mode(model), torch.no_grad():
        return model(x)


def check_randomized(model: nn.Module, x: torch.Tensor, n: int = 3, tol: float = 1e-4) -> CheckResult:
    """Flag a model whose output changes between forward passes on the same input (in eval mode):
    a randomised defence needs EoT (``autoattack`` ``version="rand"``)."""
    outs = [_eval_logits(model, x) for _ in range(n)]
    outs = [o / (o.flatten(1).norm(dim=1, keepdim=True) + 1e-10) for o in outs]
    diff = max(((a - b).flatten(1).norm(dim=1).max().item() for a in outs for b in outs), default=0.0)
    return _result(diff > tol, "the model's output is randomised: use version='rand' (EoT) or fix the seed",
                   max_normalised_difference=diff, passes=n)


def check_softmax_output(model: nn.Module, x: torch.Tensor, tol: float = 1e-5) -> CheckResult:
    """Flag outputs that look like probabilities (in [0, 1], rows summing to 1) instead of logits."""
    out = _eval_logits(model, x)
    row_err = (out.sum(-1) - 1).abs().max().item()
    flag = out.max().item() < 1 + tol and out.min().item() > -tol and row_err < tol
    return _result(flag, "the model seems to output probabilities; attacks need logits (remove the softmax)",
                   max_row_sum_error=row_err)


def zero_gradient_fraction(grad: torch.Tensor) -> float:
    """Fraction of samples whose input gradient is exactly zero."""
    return (grad.flatten(1).abs().sum(1) == 0).float().mean().item()


def check_zero_gradients(model: nn.Module, x: torch.Tensor, y: torch.Tensor, loss: str = "ce") -> CheckResult:
    """Flag samples with an all-zero input gradient of the CE (or DLR) loss — a sign of gradient masking
    (e.g. saturated softmax, non-differentiable preprocessing)."""
    with eval_mode(model), torch.enable_grad():
        xa = x.detach().clone().requires_grad_(True)
        g, = torch.autograd.grad(get_loss(loss)(model(xa), y).sum(), xa)
    return zero_gradients_result(zero_gradient_fraction(g), loss)


def zero_gradients_result(fraction: float, loss: str = "ce", **detail: Any) -> CheckResult:
    """The zero-gradient check's result from the fraction of samples with an all-zero input gradient."""
    return _result(fraction > 0, f"{fraction:.1%} of the samples have a zero input gradient; gradient-based attacks "
                   "are unreliable on them (try apgd_dlr, square)", fraction=fraction, loss=loss, **detail)


def check_blackbox_stronger(robust_accuracy: Mapping[str, float], blackbox: Sequence[str] = ("square",),
                            tol: float = 0.002) -> CheckResult:
    """From per-attack robust accuracies (as run *separately*, or AutoAttack's cumulative report),
    flag when a black-box attack lowers the accuracy by more than ``tol`` below the white-box attacks."""
    white = {k: v for k, v in robust_accuracy.items() if k not in blackbox and k != "clean"}
    black = {k: v for k, v in robust_accuracy.items() if k in blackbox}
    if not white or not black:
        return _result(False, "", white_box=white, black_box=black)
    best_white, best_black = min(white.values()), min(black.values())
    gap = best_white - best_black
    return _result(gap > tol, f"the black-box attack lowered the robust accuracy by {gap:.2%} after the white-box "
                   "attacks: the gradients may be masked; use more queries or an adaptive attack",
                   white_box=best_white, black_box=best_black, gap=gap)


def check_more_steps(model: nn.Module, x: torch.Tensor, y: torch.Tensor, attack: str = "pgd",
                     steps: Sequence[int] = (10, 50), tol: float = 0.0, **kwargs: Any) -> CheckResult:
    """Run ``attack`` with increasing ``steps`` (same seed) and flag robust accuracy that *rises* with more
    steps by more than ``tol`` — the attack is not converging (a sign of masking or a bad step size)."""
    accs = []
    for s in steps:
        atk = create_attack(attack, model, steps=int(s), **kwargs)
        accs.append((_eval_logits(model, atk(x, y)).argmax(1) == y).float().mean().item())
    return more_steps_result(attack, steps, accs, tol)


def more_steps_result(attack: str, steps: Sequence[int], robust_accuracy: Sequence[float], tol: float = 0.0,
                      **detail: Any) -> CheckResult:
    """The more-steps check's result from the robust accuracies after each number of ``steps`` (same seed):
    flagged when it *rises* with more steps by more than ``tol``."""
    accs = [float(a) for a in robust_accuracy]
    worst = max([b - a for a, b in zip(accs, accs[1:])], default=0.0)
    return _result(worst > tol, f"robust accuracy rose by {worst:.2%} with more {attack} steps",
                   attack=attack, steps=[int(s) for s in steps], robust_accuracy=accs, **detail)


def check_n_classes(n_classes: int, n_target_classes: int = 9) -> CheckResult:
    """Flag too few classes for the (targeted) DLR losses or for the requested number of targets."""
    msgs = []
    if n_classes <= 2:
        msgs.append(f"with {n_classes} classes the DLR losses cannot be used")
    elif n_classes == 3:
        msgs.append("with 3 classes the targeted DLR loss cannot be used")
    if n_target_classes > n_classes - 1:
        msgs.append(f"{n_target_classes} target classes asked but only {n_classes - 1} possible "
                    f"(using {max(n_classes - 1, 0)})")
    return _result(bool(msgs), "; ".join(msgs), n_classes=n_classes, n_target_classes=n_target_classes)


def run_checks(model: nn.Module, x: torch.Tensor, y: torch.Tensor, n_target_classes: int = 9,
               randomized: bool = True) -> dict[str, CheckResult]:
    """The cheap model-level checks together (randomness, softmax output, zero gradients, class count)."""
    out: dict[str, CheckResult] = {}
    if randomized:
        out["randomized"] = check_randomized(model, x)
    out["softmax_output"] = check_softmax_output(model, x)
    out["zero_gradients"] = check_zero_gradients(model, x, y)
    out["n_classes"] = check_n_classes(_eval_logits(model, x[:1]).shape[1], n_target_classes)
    return out


__all__ = ["CheckResult", "check_blackbox_stronger", "check_more_steps", "check_n_classes", "check_randomized",
           "check_softmax_output", "check_zero_gradients", "more_steps_result", "run_checks", "zero_gradient_fraction",
           "zero_gradients_result"]
