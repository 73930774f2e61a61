"""PGD — projected gradient descent (Madry et al. 2018, "Towards Deep Learning Models Resistant to
Adversarial Attacks", arXiv:1706.06083), L∞ and L2, with random start and restarts.

Each step moves ``step_size`` along sign(∇) (L∞) or ∇/‖∇‖₂ (L2) of the per-sample cross-entropy,
then projects onto the ε-ball around ``x`` and onto [0, 1]. The output of one restart is its last
iterate (as in Madry et al. and torchattacks). Restarts run **batched** (all restarts of all images in
one forward/backward pass; ``batch_restarts=False`` loops instead, using less memory) and keep, per
sample, a restart that fools the model, else the one with the highest loss. Restart ``r`` draws the
same start whatever the number of restarts, so more restarts never give higher robust accuracy.

Defaults: ε = 8/255, 10 steps, step size 2.5·ε/steps (Madry et al.'s rule; = ε/4 at 10 steps, i.e.
torchattacks' 2/255 for 8/255), random start, 1 restart.

``targeted_pgd`` is the same attack with ``targeted=True`` (``y`` = target classes) and the settings of
Debenedetti's class-targeted visualisation (L2, ε = 15, 100 steps, start at the given image);
:func:`class_visualisation` runs it from uniform noise.

Example::

    atk = create_attack("pgd", model, eps="4/255", steps=20, restarts=5)
    x_adv = atk(x, y)
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from robustvit.attacks.base import Attack, register_attack
from robustvit.attacks.fgsm import ascent_direction
from robustvit.attacks.losses import LossFn, ce_loss
from robustvit.errors import RobustvitError
from robustvit.utils import make_generator, parse_eps


@register_attack
class PGD(Attack):
    """PGD. Keywords: ``eps`` (8/255), ``norm`` ("linf"/"l2"), ``steps`` (10), ``step_size``
    (2.5·ε/steps), ``random_start`` (True), ``restarts`` (1), ``batch_restarts`` (True),
    ``targeted`` (False; then ``y`` holds target classes), ``seed`` (0), ``loss`` (None = per-sample
    cross-entropy; any callable ``(logits, y) -> (N,)`` to maximise, e.g. TRADES's KL to the clean output)."""

    name = "pgd"
    smoke = {"steps": 2}

    def __init__(self, model: nn.Module, *, steps: int = 10, step_size: float | str | None = None,
                 random_start: bool = True, restarts: int = 1, batch_restarts: bool = True,
                 loss: LossFn | None = None, **kwargs) -> None:
        super().__init__(model, **kwargs)
        if int(steps) < 1 or int(restarts) < 1:
            raise RobustvitError(f"{self.name}: steps and restarts must be >= 1, got {steps} and {restarts}")
        self.steps = int(steps)
        self.restarts = int(restarts)
        self.step_size = 2.5 * self.eps / self.steps if step_size is None else parse_eps(step_size)
        self.use_random_start = bool(random_start)
        self.batch_restarts = bool(batch_restarts)
        self.loss_fn = loss

    def memory_factor(self, num_classes: int) -> int:
        """Batched restarts stack ``restarts`` copies of the batch."""
        return self.restarts if self.batch_restarts else 1

    # ---- algorithm ----------------------------------------------------------------------------
    def perturb(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        gen = self.generator(x.device)
        if self.restarts == 1:
            return self.run(x, y, self.start(x, gen))
        if self.batch_restarts:
            return self._batched(x, y, gen)
        return self._looped(x, y, gen)

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
        best_adv, best_score = None, None
        for _ in range(self.restarts):
            adv = self.run(x, y, self.start(x, gen))
            s = self.score(adv, y)
            if best_adv is None:
                best_adv, best_score = adv, s
                continue
            better = s > best_score
            best_adv = torch.where(better.view(-1, 1, 1, 1), adv, best_adv)
            best_score = torch.maximum(s, best_score)
        return best_adv


@register_attack
class TargetedPGD(PGD):
    """Targeted PGD towards ``y`` with the defaults of Debenedetti's class visualisation: L2, ε = 15,
    100 steps, step size 2.5·ε/steps, no random start, ``targeted=True``."""

    name = "targeted_pgd"
    smoke = {"steps": 2, "eps": 1.0}
    aliases = ("targeted-pgd",)

    def __init__(self, model: nn.Module, *, eps: float | str = 15.0, norm: str = "l2", steps: int = 100,
                 random_start: bool = False, targeted: bool = True, **kwargs) -> None:
        super().__init__(model, eps=eps, norm=norm, steps=steps, random_start=random_start, targeted=targeted,
                         **kwargs)


def class_visualisation(model: nn.Module, classes: Sequence[int] | torch.Tensor | None = None, *,
                        n: int | None = None, image_size: tuple[int, int, int] = (3, 32, 32),
                        num_classes: int | None = None, seed: int = 0, device: torch.device | str | None = None,
                        **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    """Class-targeted input visualisation (Debenedetti, "A Light Recipe to Train Robust Vision
    Transformers", arXiv:2209.07399): start from uniform noise and run targeted PGD-100 (L2, ε = 15)
    towards each class. Robust models produce images with visible class features.

    ``classes``: target classes; if None, ``n`` classes drawn at random among ``num_classes``
    (inferred from the model's output). Extra keywords go to ``targeted_pgd``.
    Returns ``(images (N, *image_size) in [0, 1], classes (N,))``.

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
            with torch.no_grad():
                was = model.training
                model.eval()
                num_classes = model(torch.zeros(1, *image_size, device=device)).shape[1]
                model.train(was)
        classes = torch.randint(num_classes, (n,), generator=gen, device=device)
    classes = torch.as_tensor(classes, device=device).long()
    noise = torch.rand((len(classes), *image_size), generator=gen, device=device)
    atk = TargetedPGD(model, seed=seed, **kwargs)
    return atk(noise, classes), classes
