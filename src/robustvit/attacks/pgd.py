"""PGD — projected gradient descent (Madry et al. 2018, "Towards Deep Learning Models Resistant to
Adversarial Attacks", arXiv:1706.06083), L∞ and L2, with random start and restarts.

Steps of ``step_size`` (default 2.5·ε/steps, Madry et al.'s rule) along sign(∇) (L∞) or ∇/‖∇‖₂ (L2) of the
cross-entropy, each projected onto the ε-ball and [0, 1]; a restart returns its last iterate (as torchattacks).
Restarts run as one batch (``batch_restarts=False``: a loop, less memory) and keep, per sample, one that fools the
model, else the highest-loss one; restart r draws the same start whatever the number of restarts, so more
restarts never raise robust accuracy. ``targeted_pgd``: the settings of Debenedetti's class-targeted
visualisation (:func:`class_visualisation`).

Example::

    x_adv = create_attack("pgd", model, eps="4/255", steps=20, restarts=5)(x, y)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from robustvit.attacks.base import Attack, register_attack
from robustvit.attacks.fgsm import ascent_direction
from robustvit.attacks.losses import ce_loss
from robustvit.errors import RobustvitError
from robustvit.options import Eps, option
from robustvit.utils import eval_mode, make_generator


@register_attack
class PGD(Attack):
    """PGD (Madry et al. 2018, arXiv:1706.06083): L∞ / L2, random start, batched restarts.

    ``targeted=True``: ``y`` holds target classes. ``loss``: any callable ``(logits, y) -> (N,)`` to maximise
    instead of the per-sample cross-entropy (e.g. TRADES's KL to the clean output; Python only)."""

    name = "pgd"
    smoke = {"steps": 2}
    demo = (("pgd:eps=1/255:limit=500:save=8:checks=0", "pgd:eps=2/255:limit=500:checks=0", "pgd:eps=4/255:limit=500:save=8"),
            ("pgd:eps=1/255:limit=100:save=8:checks=0", "pgd:eps=4/255:limit=100:save=8"))
    masking_checks = ("model", "more_steps", "blackbox")

    @dataclass
    class Options(Attack.Options):
        steps: int = option(10, min=1, help="iterations")
        step_size: Eps | None = option(None, min=0, help="step per iteration (default 2.5·ε/steps)")
        random_start: bool = option(True, help="start from a random point of the ε-ball")
        restarts: int = option(1, min=1, help="random restarts; an image counts as robust only if it survives all")
        batch_restarts: bool = option(True, help="run the restarts as one batch (faster; the same result)")
        loss: Any = option(None, help="a callable (logits, y) -> per-sample loss to maximise (Python only; "
                                      "default cross-entropy)")

    def __init__(self, model: nn.Module, **options: Any) -> None:
        super().__init__(model, **options)
        o = self.opts
        if o.loss is not None and not callable(o.loss):
            raise RobustvitError(f"{self.name}: loss must be a callable (logits, y) -> per-sample loss, got {o.loss!r}")
        self.steps, self.restarts = o.steps, o.restarts
        self.step_size = 2.5 * self.eps / self.steps if o.step_size is None else float(o.step_size)
        self.use_random_start, self.batch_restarts, self.loss_fn = o.random_start, o.batch_restarts, o.loss

    def memory_factor(self, num_classes: int) -> int:
        """Batched restarts stack ``restarts`` copies of the batch."""
        return self.restarts if self.batch_restarts else 1

    # ---- algorithm ----------------------------------------------------------------------------
    def perturb(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        gen = self.generator(x.device)
        if self.restarts == 1:
            return self.run(x, y, self.start(x, gen))
        return self._batched(x, y, gen) if self.batch_restarts else self._looped(x, y, gen)

    def start(self, x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        """The starting point of one restart."""
        return self.random_start(x, gen) if self.use_random_start else x.clone()

    def run(self, x: torch.Tensor, y: torch.Tensor, x_adv: torch.Tensor) -> torch.Tensor:
        """``steps`` PGD iterations from ``x_adv``; returns the last iterate."""
        if self.norm == "linf":
            lo, hi = self.linf_box(x)
            for _ in range(self.steps):
                _, grad, _ = self.loss_and_grad(x_adv, y, self.loss_fn)
                x_adv = torch.clamp(x_adv.add(grad.sign_(), alpha=self.step_size), lo, hi)
            return x_adv
        for _ in range(self.steps):
            _, grad, _ = self.loss_and_grad(x_adv, y, self.loss_fn)
            x_adv = self.project(x, x_adv + self.step_size * ascent_direction(grad, self.norm))
        return x_adv

    def score(self, x_adv: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Per-sample score used to pick among restarts: +inf when the attack succeeds, else the loss."""
        logits = self.predict(x_adv)
        loss = (self.loss_fn or ce_loss)(logits, y)
        loss = -loss if self.targeted else loss
        return torch.where(self.success(logits, y), torch.full_like(loss, float("inf")), loss)

    def _batched(self, x: torch.Tensor, y: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        r, n = self.restarts, x.shape[0]
        starts = torch.cat([self.start(x, gen) for _ in range(r)])
        xr, yr = x.repeat(r, 1, 1, 1), y.repeat(r)
        adv = self.run(xr, yr, starts)
        best = self.score(adv, yr).view(r, n).argmax(0)
        return adv.view(r, *x.shape)[best, torch.arange(n, device=x.device)]

    def _looped(self, x: torch.Tensor, y: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        best_adv = self.run(x, y, self.start(x, gen))
        best_score = self.score(best_adv, y)
        for _ in range(self.restarts - 1):
            adv = self.run(x, y, self.start(x, gen))
            s = self.score(adv, y)
            best_adv = torch.where((s > best_score).view(-1, 1, 1, 1), adv, best_adv)
            best_score = torch.maximum(s, best_score)
        return best_adv


@register_attack
class TargetedPGD(PGD):
    """Targeted PGD towards ``y`` with the settings of Debenedetti's class-targeted visualisation (L2, ε = 15,
    100 steps, no random start)."""

    name = "targeted_pgd"
    smoke = {"steps": 2, "eps": 1.0}
    aliases = ("targeted-pgd",)
    masking_checks = ("model",)   # the checks attack the true labels; a targeted attack takes targets

    @dataclass
    class Options(PGD.Options):
        eps: Eps = option(15.0, min=0, help="perturbation budget ε, a number or a fraction such as 8/255")
        norm: str = option("l2", help="threat model: linf or l2")
        targeted: bool = option(True, help="move towards the target class y (false: away from the true class y)")
        steps: int = option(100, min=1, help="iterations")
        random_start: bool = option(False, help="start from a random point of the ε-ball")


def class_visualisation(model: nn.Module, classes: Sequence[int] | torch.Tensor | None = None, *,
                        n: int | None = None, image_size: tuple[int, int, int] = (3, 32, 32),
                        num_classes: int | None = None, seed: int = 0, device: torch.device | str | None = None,
                        **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    """Class-targeted input visualisation (Debenedetti, "A Light Recipe to Train Robust Vision Transformers",
    arXiv:2209.07399): targeted PGD-100 (L2, ε = 15) from uniform noise towards each class; robust models produce
    images with visible class features.

    ``classes``: target classes; if None, ``n`` classes drawn at random among ``num_classes`` (inferred from the
    model's output). Extra keywords go to ``targeted_pgd``. Returns ``(images (N, *image_size) in [0, 1],
    classes (N,))``.

    Example::

        imgs, cls = class_visualisation(model, n=8, image_size=(3, 32, 32), seed=0)
    """
    if device is None:
        p = next(model.parameters(), None)
        device = p.device if p is not None else "cpu"
    gen = make_generator(seed, device)
    if classes is None:
        if n is None:
            raise RobustvitError("class_visualisation: give classes or n")
        if num_classes is None:
            with torch.no_grad(), eval_mode(model):
                num_classes = model(torch.zeros(1, *image_size, device=device)).shape[1]
        classes = torch.randint(num_classes, (n,), generator=gen, device=device)
    classes = torch.as_tensor(classes, device=device).long()
    noise = torch.rand((len(classes), *image_size), generator=gen, device=device)
    atk = TargetedPGD(model, seed=seed, **kwargs)
    return atk(noise, classes), classes
