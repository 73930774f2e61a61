"""The attack base class and registry (one attack per module, torchattacks-style).

Every attack maps images ``x`` (float (N, 3, H, W) in [0, 1]) and labels ``y`` (N,) — target classes when
``targeted=True`` — to adversarial images of the same shape, dtype and device. The base class puts the model in
eval mode (restoring every submodule's mode after), checks inputs, parses options, seeds a generator per call,
clips the result to [0, 1] and projects it onto the ε-ball (``bounded`` attacks), and leaves no gradient on the
model's parameters.

A new attack is one module of this package with a registered subclass (``@register_attack``; example in
:meth:`Attack.perturb`): it sets ``name`` (snake_case; older spellings in ``aliases``), declares its ``Options``
dataclass (``robustvit.options``, extending ``Attack.Options``: ``eps``, ``norm``, ``targeted``, ``seed``; fields
with a default, bounds and a help line) and writes ``perturb(x, y)``. The constructor parses the keyword options
into ``self.opts``: spec strings are typed (``steps="20"`` → 20, ``eps="4/255"``); an unknown key or a bad value
is a one-line error naming the valid options (``robustvit list attacks --options`` prints them).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from robustvit.attacks.losses import ce_loss
from robustvit.errors import RobustvitError
from robustvit.options import Eps, describe, option, option_names, parse_options
from robustvit.registry import Registry
from robustvit.utils import check_images, eval_mode, make_generator

#: Every threat model an attack option, ``--norm`` or a result names: L∞, L2 and L1 (in pixel units, [0, 1]^d).
NORMS = ("linf", "l2", "l1")
#: Gradient-masking checks a suite runs for an attack (``robustvit.attacks.checks``): ``model`` (randomised / softmax
#: output, zero gradients), ``more_steps`` (robust accuracy rising with 2× steps), ``blackbox`` (Square stronger).
MASKING_CHECKS = ("model", "more_steps", "blackbox")


def canonical_norm(norm: str) -> str:
    """``linf`` / ``l2`` / ``l1`` for the spellings people write (``Linf``, ``inf``, ``l_inf``, ``2``, ``1``, …)."""
    text = str(norm).lower()
    return {"l_inf": "linf", "inf": "linf", "2": "l2", "1": "l1"}.get(text, text)


def project_l1_box(x: torch.Tensor, delta: torch.Tensor, eps: float | torch.Tensor) -> torch.Tensor:
    """The Euclidean projection of ``delta`` onto {d : ‖d‖₁ ≤ ε, 0 ≤ x + d ≤ 1}, per sample (Croce & Hein 2021,
    "Mind the box", arXiv:2103.01208, Lemma 3.2).

    ``d_i = sign(δ_i) · clip(|δ_i| − λ, 0, r_i)``, ``r_i`` the room to the box in the direction of ``sign(δ_i)``,
    λ = 0 if the box-clipped δ lies in the ball, else the λ > 0 where ‖d‖₁ = ε: ‖d(λ)‖₁ is piecewise linear with
    breakpoints ``max(|δ_i| − r_i, 0)`` and ``|δ_i|``, so one sort and cumulative sums give λ in closed form. A last
    rescaling absorbs the rounding of those sums (‖d‖₁ ≤ ε up to the rounding of the final sum).

    Args:
        x: the centres in [0, 1], (N, …).
        delta: the perturbations to project, shaped like ``x``.
        eps: the radius, a number or (N,).

    Returns:
        The projected perturbations, shaped like ``delta``.

    Example:
        >>> x = torch.tensor([[0.5, 0.9, 0.1]])
        >>> project_l1_box(x, torch.tensor([[0.6, 0.3, -0.05]]), 0.4)   # box: d₁ ≤ 0.5, d₂ ≤ 0.1; λ = 0.25
        tensor([[0.3500, 0.0500, -0.0000]])
    """
    xf, d = x.flatten(1), delta.flatten(1)
    e = (eps if isinstance(eps, torch.Tensor) else torch.tensor(float(eps))).to(d).expand(x.shape[0])
    a = d.abs()
    room = torch.where(d >= 0, 1 - xf, xf).clamp_min(0)
    phi0 = torch.minimum(a, room).sum(1)                                  # ‖d(0)‖₁: the box clip
    pts, order = torch.cat(((a - room).clamp_min(0), a), 1).sort(1)
    slope = torch.cat((torch.ones_like(a), -torch.ones_like(a)), 1).gather(1, order).cumsum(1)
    drop = (slope[:, :-1] * (pts[:, 1:] - pts[:, :-1])).cumsum(1)
    phi = torch.cat((phi0[:, None], phi0[:, None] - drop), 1)             # ‖d‖₁ at each breakpoint, non-increasing
    j = ((phi > e[:, None]).sum(1, keepdim=True) - 1).clamp(0, pts.shape[1] - 1)
    lam = pts.gather(1, j) + (phi.gather(1, j) - e[:, None]) / slope.gather(1, j).clamp_min(1)
    lam = torch.where(phi0[:, None] > e[:, None], lam, torch.zeros_like(lam))
    out = torch.sign(d) * torch.minimum((a - lam).clamp_min(0), room)
    norm = out.abs().sum(1, keepdim=True)
    out = out * torch.where(norm > e[:, None], e[:, None] / norm.clamp_min(1e-30), torch.ones_like(norm))
    return out.view_as(delta)


def lp_norm(d: torch.Tensor, norm: str) -> torch.Tensor:
    """Per-sample L∞, L2 or L1 norm (N,) of a batch of any shape."""
    flat = d.flatten(1)
    if norm == "linf":
        return flat.abs().amax(1)
    return flat.norm(dim=1) if norm == "l2" else flat.abs().sum(1)


class Attack:
    """Base class: the options every attack takes, the call protocol and the shared helpers."""

    name: ClassVar[str] = ""
    #: Whether the output is projected onto the ε-ball around x (False for e.g. spatial attacks).
    bounded: ClassVar[bool] = True
    #: Norms the attack supports (L1: the attacks with an L1 algorithm, APGD, FAB, Square, AutoAttack).
    norms: ClassVar[tuple[str, ...]] = ("linf", "l2")
    #: Other spellings the registry resolves to ``name`` (e.g. the hyphenated ``patch-fool``).
    aliases: ClassVar[tuple[str, ...]] = ()
    #: Options of a tiny, fast run (capabilities and the contract tests).
    smoke: ClassVar[dict[str, Any]] = {}
    #: Whether the attack looks inside the model (the ViT probe), so it applies to ViTs only.
    requires_probe: ClassVar[bool] = False
    #: ``robustvit demo``'s specs of the attack's suite: (default plan, quick plan); None: not in the demo.
    demo: ClassVar[tuple[tuple[str, ...], tuple[str, ...]] | None] = None
    #: The gradient-masking checks that apply to it (a subset of :data:`MASKING_CHECKS`).
    masking_checks: ClassVar[tuple[str, ...]] = ("model", "blackbox")

    @dataclass
    class Options:
        eps: Eps = option(8 / 255, min=0, help="perturbation budget ε, a number or a fraction such as 8/255")
        norm: str = option("linf", help="threat model: linf, l2 or l1")
        targeted: bool = option(False, help="move towards a target class (y holds the targets) instead of away "
                                            "from the true one")
        seed: int = option(0, help="seed of the attack's random starts and draws")

    def __init__(self, model: nn.Module, **options: Any) -> None:
        self.model = model
        self.opts: Any = parse_options(type(self).Options, options, what=f"attack {self.name!r}")
        self.eps = float(self.opts.eps) if self.opts.eps is not None else None
        self.norm = canonical_norm(self.opts.norm)
        if self.norm not in self.norms:
            raise RobustvitError(f"attack {self.name!r} does not support norm {self.norm!r}; use one of "
                                 f"{', '.join(self.norms)}")
        self.targeted, self.seed = bool(self.opts.targeted), int(self.opts.seed)
        self._calls = 0

    def settings(self) -> dict[str, Any]:
        """Each option as it applies (defaults resolved, e.g. PGD's step size 2.5·ε/steps): the attribute of the
        same name where the attack sets one, else the option's value."""
        return {f.name: self.__dict__.get(f.name, getattr(self.opts, f.name)) for f in dataclasses.fields(self.opts)}

    # ---- public API -------------------------------------------------------------------------
    def __call__(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Attack a batch: the model in eval mode (every submodule's mode restored after), :meth:`perturb`, then
        the result clipped to [0, 1] and, for ``bounded`` attacks, projected onto the ε-ball around ``x``.

        Args:
            x: clean images in [0, 1].
            y: the true labels, or the target classes when ``targeted=True``.

        Returns:
            The adversarial images (detached; no gradient is left on the model's parameters).

        Shape:
            - x: :math:`(N, 3, H, W)` float in [0, 1].
            - y: :math:`(N,)` integer class indices.
            - Output: :math:`(N, 3, H, W)`, the dtype and device of ``x``.

        Example:
            >>> net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, 10)).eval()
            >>> x, y = torch.rand(4, 3, 8, 8), torch.tensor([0, 1, 2, 3])
            >>> x_adv = create_attack("fgsm", net, eps="8/255")(x, y)
            >>> x_adv.shape, bool((x_adv - x).abs().max() <= 8 / 255 + 1e-6)
            (torch.Size([4, 3, 8, 8]), True)
        """
        check_images(x, name="attack input")
        if y.shape != (x.shape[0],):
            raise RobustvitError(f"labels must have shape ({x.shape[0]},), got {tuple(y.shape)}")
        x, y = x.detach(), y.detach().to(x.device).long()
        with eval_mode(self.model), torch.enable_grad():
            x_adv = self.perturb(x, y)
        self._calls += 1
        return self.project(x, x_adv.detach()) if self.bounded else x_adv.detach().clamp(0, 1)

    def perturb(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The algorithm, which a subclass writes; call the attack (:meth:`__call__`) rather than this.

        Args:
            x: clean images in [0, 1], detached.
            y: long labels (or targets) on the device of ``x``.

        Returns:
            Adversarial images; ``__call__`` clips and projects them, so this may return points outside the ball.

        Shape:
            - x: :math:`(N, 3, H, W)`.
            - y: :math:`(N,)`.
            - Output: :math:`(N, 3, H, W)`.

        Example:
            >>> class Noise(Attack):          # uniform noise in the ε-ball (left unregistered here)
            ...     name = "noise_example"
            ...     def perturb(self, x, y):
            ...         return self.random_start(x, self.generator(x.device))
            >>> net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, 10)).eval()
            >>> x = torch.rand(2, 3, 8, 8)
            >>> x_adv = Noise(net, eps=0.1)(x, torch.zeros(2, dtype=torch.long))
            >>> bool((x_adv - x).abs().max() <= 0.1 + 1e-6)
            True
        """
        raise NotImplementedError

    def memory_factor(self, num_classes: int) -> int:
        """Roughly how many images' worth of a forward and backward pass's memory one attacked image takes
        (batched restarts, one input gradient per class): an evaluation divides its forward micro-batch by it."""
        return 1

    # ---- helpers for subclasses -------------------------------------------------------------
    def generator(self, device: torch.device) -> torch.Generator:
        """A generator seeded from ``seed`` and the call count: repeated calls draw new numbers,
        a fresh attack object with the same seed replays them exactly."""
        return make_generator(self.seed * 1_000_003 + self._calls, device)

    def project(self, x: torch.Tensor, x_adv: torch.Tensor, eps: float | torch.Tensor | None = None) -> torch.Tensor:
        """Project ``x_adv`` onto the ε-ball around ``x`` (in ``self.norm``) and onto [0, 1] (L1: the exact
        projection onto their intersection, :func:`project_l1_box`)."""
        eps = self.eps if eps is None else eps
        e = eps.view(-1, 1, 1, 1) if isinstance(eps, torch.Tensor) else eps
        if self.norm == "linf":      # clamp to the box [x − ε, x + ε]: x + ε·sign(g) stays bit-exact (as torchattacks)
            return torch.clamp(x_adv, x - e, x + e).clamp_(0, 1)
        if self.norm == "l1":
            return (x + project_l1_box(x, x_adv - x, eps)).clamp_(0, 1)
        delta = x_adv - x
        norms = delta.flatten(1).norm(dim=1).clamp_min(1e-12).view(-1, 1, 1, 1)
        return (x + delta * torch.clamp(e / norms, max=1.0)).clamp(0, 1)

    def linf_box(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-pixel bounds (lo, hi) of the L∞ ball ∩ [0, 1]: ``x_adv.clamp(lo, hi)`` projects in one
        kernel (computed once per attack; used by the iterative L∞ attacks' hot loops)."""
        return (x - self.eps).clamp_(min=0), (x + self.eps).clamp_(max=1)

    def random_start(self, x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        """A uniform random point of the ε-ball around x (L∞: U(−ε, ε); L2 and L1: uniform in the ball), clipped
        to [0, 1]."""
        if self.norm == "linf":
            delta = (torch.rand(x.shape, generator=gen, device=x.device, dtype=x.dtype) * 2 - 1) * self.eps
        elif self.norm == "l1":      # signed exponentials over their sum with one extra: uniform in the L1 ball
            e = torch.empty((x.shape[0], x[0].numel() + 1), device=x.device, dtype=x.dtype).exponential_(generator=gen)
            sign = torch.randint(0, 2, x.shape, generator=gen, device=x.device).to(x.dtype) * 2 - 1
            delta = sign * (e[:, :-1] / e.sum(1, keepdim=True)).view_as(x) * self.eps
        else:
            d = torch.randn(x.shape, generator=gen, device=x.device, dtype=x.dtype)
            d = d / d.flatten(1).norm(dim=1).clamp_min(1e-12).view(-1, 1, 1, 1)
            r = torch.rand((x.shape[0], 1, 1, 1), generator=gen, device=x.device, dtype=x.dtype) ** (1.0 / x[0].numel())
            delta = d * r * self.eps
        return (x + delta).clamp(0, 1)

    def loss_and_grad(self, x_adv: torch.Tensor, y: torch.Tensor,
                      loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per-sample loss (N,), the gradient of the batch-*mean* loss w.r.t. ``x_adv`` and the logits; the sign
        is flipped for targeted attacks, so subclasses always ascend. The mean (as torchattacks and Madry et al.'s
        code) keeps FGSM/PGD bit-identical to torchattacks: the sign of a gradient entry that is zero up to
        rounding depends on the scale the backward pass runs at."""
        x_adv = x_adv.detach().requires_grad_(True)
        logits = self.model(x_adv)
        loss = (loss_fn or ce_loss)(logits, y)
        loss = -loss if self.targeted else loss
        grad, = torch.autograd.grad(loss.mean(), x_adv)
        return loss.detach(), grad.detach(), logits.detach()

    @torch.no_grad()
    def predict(self, x: torch.Tensor) -> torch.Tensor:
        """Logits of the model for ``x`` without building a graph."""
        return self.model(x)

    def success(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Boolean (N,): misclassified (untargeted) or classified as the target ``y`` (targeted)."""
        pred = logits.argmax(1)
        return pred == y if self.targeted else pred != y

    def __repr__(self) -> str:
        return f"{type(self).__name__}(eps={self.eps:.6g}, norm={self.norm!r}, targeted={self.targeted}, seed={self.seed})"


ATTACKS: Registry[type[Attack]] = Registry("attack", package="robustvit.attacks", hint="see `robustvit list attacks`")
register_attack = ATTACKS.register


def list_attacks(pattern: str | None = None) -> list[str]:
    """The registered attack names (aliases left out), sorted.

    Args:
        pattern: a shell-style filter such as ``"apgd*"``; None: every attack.

    Returns:
        The names :func:`create_attack` and ``robustvit eval --suite NAME`` take.

    Example:
        >>> list_attacks("apgd*")
        ['apgd_ce', 'apgd_dlr', 'apgd_t']
    """
    return ATTACKS.list(pattern)


def create_attack(name: str, model: nn.Module, **kwargs: Any) -> Attack:
    """Build a registered attack on ``model``.

    Args:
        name: a name from :func:`list_attacks` or an alias (``"patch-fool"``).
        model: a classifier taking images in [0, 1] (e.g. from ``create_model``); the attack switches it to
            eval mode while it runs.
        kwargs: the attack's ``Options`` (``robustvit list attacks --options``), e.g. ``eps``, ``norm``, PGD's
            ``steps``; spec strings are typed (``eps="4/255"``); an unknown key or bad value raises ``RobustvitError``.

    Returns:
        The attack: call it as ``attack(x, y)`` (:meth:`Attack.__call__`).

    Shape:
        - x: :math:`(N, 3, H, W)` float in [0, 1]; y: :math:`(N,)` labels (targets when ``targeted=True``).
        - Output: :math:`(N, 3, H, W)`, within ε of ``x`` in ``norm`` for bounded attacks.

    Example:
        >>> model = create_model("vit_cifar_micro", num_classes=10)
        >>> atk = create_attack("pgd", model, eps="4/255", steps=2)
        >>> atk.settings()["step_size"] == 2.5 * (4 / 255) / 2
        True
        >>> x, y = torch.rand(2, 3, 32, 32), torch.tensor([3, 7])
        >>> x_adv = atk(x, y)
        >>> x_adv.shape, bool((x_adv - x).abs().max() <= 4 / 255 + 1e-6)
        (torch.Size([2, 3, 32, 32]), True)
    """
    return ATTACKS.get(name)(model, **kwargs)


def attack_options(name: str) -> list[dict[str, Any]]:
    """Each option of an attack — name, type, default, help — for ``robustvit list attacks --options``."""
    return describe(get_attack_class(name).Options)


def get_attack_class(name: str) -> type[Attack]:
    """The class registered under ``name`` (raises the usual unknown-name error)."""
    return ATTACKS.get(name)


def attack_keywords(name_or_cls: str | type[Attack]) -> set[str]:
    """The keywords an attack takes: its option names."""
    cls = get_attack_class(name_or_cls) if isinstance(name_or_cls, str) else name_or_cls
    return set(option_names(cls.Options))
