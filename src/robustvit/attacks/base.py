"""The attack base class and registry (one attack per module, torchattacks-style).

Every attack maps a batch of images ``x`` (float (N, 3, H, W) in [0, 1]) and labels ``y`` (N,) — or
target classes when ``targeted=True`` — to adversarial images of the same shape, dtype and device.
The base class does everything that is not the algorithm:

* puts the model in eval mode for the attack and restores its mode afterwards;
* checks inputs, parses ε (``4/255`` as float or string), seeds a generator per call;
* clips the result to [0, 1] and projects it onto the ε-ball (``bounded`` attacks), so
  ``‖x_adv − x‖ ≤ ε`` holds for every output;
* never leaves gradients on the model's parameters.

A subclass sets ``name`` (snake_case; older spellings in ``aliases``) and writes ``perturb(x, y)``.

**Options, one way:** an attack's options are its constructor's keyword arguments (following ``**kwargs`` up
the class hierarchy), so every default is stated once, in the signature. ``Attack.Options`` is the
``robustvit.options`` dataclass derived from that signature on first use (``int``/``float``/``bool``/``str``
annotations keep their type, ``eps``/``step_size`` and ``float | str`` read fractions such as ``4/255``, other
annotations pass values through); :func:`create_attack` parses its keywords with it, so ``steps="20"`` from a
spec string becomes 20 and an unknown key or bad value is a one-line error naming it and the valid options.
Only the keywords given reach the constructor: its own defaults and checks apply. Example::

    atk = create_attack("pgd", model, eps="4/255", steps=10)
    x_adv = atk(x, y)
    create_attack("patch-fool", vit)     # the hyphenated spellings are aliases of patch_fool, apgd_ce, …
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import types
import typing
from collections.abc import Callable
from typing import Any, ClassVar, Union

import torch
import torch.nn.functional as F
from torch import nn

from robustvit.errors import RobustvitError
from robustvit.options import Eps, describe, parse_options
from robustvit.registry import Registry, accepted_keywords
from robustvit.utils import check_images, make_generator, parse_eps

NORMS = ("linf", "l2")
#: Keywords read as budgets (floats that also take fractions such as ``4/255``).
EPS_KEYWORDS = ("eps", "step_size")


def _option_type(name: str, hint: Any) -> Any:
    """The options-dataclass type of a constructor keyword annotated ``hint`` (``Any`` when not a plain value)."""
    union = typing.get_origin(hint) in (Union, types.UnionType)
    args = typing.get_args(hint) if union else (hint,)
    core = [a for a in args if a is not type(None)]
    if float in core and (str in core or name in EPS_KEYWORDS):
        tp: Any = Eps
    elif len(core) == 1 and core[0] in (int, float, bool, str):
        tp = core[0]
    else:
        return Any
    return tp | None if type(None) in args else tp


#: The help line of each attack keyword for ``robustvit list attacks --options`` (a keyword's meaning is the same
#: in every attack that takes it; the papers' names in brackets).
OPTION_HELP: dict[str, str] = {
    "eps": "perturbation budget ε, a number or a fraction such as 8/255",
    "norm": "threat model: linf or l2",
    "targeted": "move towards a target class instead of away from the true one",
    "seed": "seed of the attack's random starts and draws",
    "steps": "iterations",
    "restarts": "random restarts; an image counts as robust only if it survives all",
    "step_size": "step per iteration (a number or a fraction; default: the attack's rule)",
    "random_start": "start from a random point of the ε-ball",
    "rho": "APGD: fraction of successful steps below which the step size halves at a checkpoint (ρ)",
    "momentum": "APGD: momentum α of the update",
    "eot_iter": "gradients averaged per step (expectation over transformation, for randomised models)",
    "n_target_classes": "target classes tried, the most likely wrong ones first",
    "loss": "the loss the attack ascends (ce, dlr, …)",
    "n_queries": "black-box queries per image",
    "p_init": "Square: initial fraction of the image a square covers",
    "rescale_schedule": "Square: rescale the p schedule to n_queries (as AutoAttack does)",
    "alpha_max": "FAB: largest step towards the original image (α_max)",
    "eta": "FAB: overshoot factor of the projection (η)",
    "beta": "FAB: backward step weight (β)",
    "batch_restarts": "run the restarts as one batch (faster; the same result)",
    "batch_size": "images per forward pass",
    "version": "AutoAttack version: standard, plus, rand or custom (attacks=)",
    "attacks": "the members to run, joined by + (default: the version's)",
    "member_kwargs": "keywords passed to the members",
    "skip_missing": "skip members that do not apply instead of refusing",
    "run_checks": "AutoAttack's own checks of the model (randomness, softmax output, …)",
    "verbose": "print each member's progress",
    "translations": "spatial: translations tried per axis",
    "rotations": "spatial: rotations tried",
    "max_translation": "spatial: largest shift in pixels (default: the papers' range scaled to the image, ±3 px at 32 px)",
    "max_rotation": "spatial: largest rotation in degrees",
    "num_patches": "Patch-Fool: patches attacked",
    "attn_weight": "Patch-Fool: weight of the attention-aware loss (0: cross-entropy only)",
    "attn_block": "Patch-Fool: block whose attention chooses the patch",
    "selection": "Patch-Fool: how the patch is chosen (attn, saliency or random)",
    "scoring": "Patch-Fool: return the final iterate (the reference's) or the best one",
}


def options_from_signature(cls: type) -> type:
    """The options dataclass of ``cls``: one field per keyword of its constructor and its parents' (through
    ``**kwargs``), with the constructor's defaults; the first class in the MRO that names a keyword wins."""
    specs: dict[str, tuple[Any, Any]] = {}
    for klass in cls.__mro__:
        fn = klass.__dict__.get("__init__")
        if klass is object:
            break
        if fn is None:
            continue
        try:
            hints = typing.get_type_hints(fn)
        except Exception:   # an annotation that does not resolve: pass that constructor's values through
            hints = {}
        params = list(inspect.signature(fn).parameters.values())
        for p in params:
            if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name not in ("self", "model") \
                    and p.name not in specs:
                specs[p.name] = (_option_type(p.name, hints.get(p.name, Any)), p.default)
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            break
    fields = []
    for name, (tp, default) in specs.items():
        meta = {"help": OPTION_HELP.get(name, "")}
        if default is inspect.Parameter.empty:
            fields.append((name, tp, dataclasses.field(metadata=meta)))
        elif isinstance(default, (list, dict, set)):
            fields.append((name, tp, dataclasses.field(default_factory=lambda d=default: copy.deepcopy(d),
                                                       metadata=meta)))
        else:
            fields.append((name, tp, dataclasses.field(default=default, metadata=meta)))
    return dataclasses.make_dataclass(f"{cls.__name__}Options", fields)


class _DerivedOptions:
    """``SomeAttack.Options``: the dataclass :func:`options_from_signature` derives, built once per class."""

    def __get__(self, obj: Any, owner: type) -> type:
        if "_options" not in owner.__dict__:
            owner._options = options_from_signature(owner)   # type: ignore[attr-defined]
        return owner.__dict__["_options"]


class Attack:
    """Base class. Common keywords: ``eps``, ``norm`` ("linf"/"l2"), ``targeted``, ``seed``."""

    name: ClassVar[str] = ""
    #: Whether the output is projected onto the ε-ball around x (False for e.g. spatial attacks).
    bounded: ClassVar[bool] = True
    #: Norms the attack supports.
    norms: ClassVar[tuple[str, ...]] = NORMS
    #: Other spellings the registry resolves to ``name`` (e.g. the hyphenated ``patch-fool``).
    aliases: ClassVar[tuple[str, ...]] = ()
    #: Options of a tiny, fast run (capabilities and the contract tests).
    smoke: ClassVar[dict[str, Any]] = {}
    #: Whether the attack looks inside the model (the ViT probe), so it applies to ViTs only.
    requires_probe: ClassVar[bool] = False
    #: The options dataclass, derived from the constructor's keywords (see the module docstring).
    Options: ClassVar[type] = _DerivedOptions()   # type: ignore[assignment]

    def __init__(self, model: nn.Module, *, eps: float | str = 8 / 255, norm: str = "linf",
                 targeted: bool = False, seed: int = 0) -> None:
        self.model = model
        self.eps = parse_eps(eps)
        norm = str(norm).lower()
        norm = {"l_inf": "linf", "inf": "linf", "2": "l2"}.get(norm, norm)
        if norm not in self.norms:
            raise RobustvitError(f"attack {self.name!r} does not support norm {norm!r}; use one of {', '.join(self.norms)}")
        self.norm = norm
        self.targeted = bool(targeted)
        self.seed = int(seed)
        self._calls = 0

    # ---- public API -------------------------------------------------------------------------
    def __call__(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        check_images(x, name="attack input")
        if y.shape != (x.shape[0],):
            raise RobustvitError(f"labels must have shape ({x.shape[0]},), got {tuple(y.shape)}")
        x = x.detach()
        y = y.detach().to(x.device).long()
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.enable_grad():
                x_adv = self.perturb(x, y)
        finally:
            self.model.train(was_training)
        self._calls += 1
        return self.project(x, x_adv.detach()) if self.bounded else x_adv.detach().clamp(0, 1)

    def perturb(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The algorithm: return adversarial images for clean ``x`` (model already in eval mode)."""
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
        """Project ``x_adv`` onto the ε-ball around ``x`` (in ``self.norm``) and onto [0, 1]."""
        eps = self.eps if eps is None else eps
        e = eps.view(-1, 1, 1, 1) if isinstance(eps, torch.Tensor) else eps
        if self.norm == "linf":      # clamp to the box [x − ε, x + ε]: x + ε·sign(g) stays bit-exact (as torchattacks)
            return torch.clamp(x_adv, x - e, x + e).clamp_(0, 1)
        delta = x_adv - x
        norms = delta.flatten(1).norm(dim=1).clamp_min(1e-12).view(-1, 1, 1, 1)
        return (x + delta * torch.clamp(e / norms, max=1.0)).clamp(0, 1)

    def linf_box(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-pixel bounds (lo, hi) of the L∞ ball ∩ [0, 1]: ``x_adv.clamp(lo, hi)`` projects in one
        kernel (computed once per attack; used by the iterative L∞ attacks' hot loops)."""
        return (x - self.eps).clamp_(min=0), (x + self.eps).clamp_(max=1)

    def random_start(self, x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        """A uniform random point of the ε-ball around x (L∞: U(−ε, ε); L2: uniform in the ball)."""
        if self.norm == "linf":
            delta = (torch.rand(x.shape, generator=gen, device=x.device, dtype=x.dtype) * 2 - 1) * self.eps
        else:
            d = torch.randn(x.shape, generator=gen, device=x.device, dtype=x.dtype)
            d = d / d.flatten(1).norm(dim=1).clamp_min(1e-12).view(-1, 1, 1, 1)
            r = torch.rand((x.shape[0], 1, 1, 1), generator=gen, device=x.device, dtype=x.dtype) ** (1.0 / x[0].numel())
            delta = d * r * self.eps
        return (x + delta).clamp(0, 1)

    def loss_and_grad(self, x_adv: torch.Tensor, y: torch.Tensor,
                      loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per-sample loss (N,), the gradient of the batch-*mean* loss w.r.t. ``x_adv`` and the logits.

        The loss is *maximised* by untargeted attacks; for targeted ones the sign is flipped here so
        that subclasses always ascend. The mean (per-sample gradients / N, as torchattacks and Madry et
        al.'s code) keeps FGSM/PGD bit-identical to torchattacks: the sign of a gradient entry that is zero
        up to rounding depends on the scale the backward pass runs at. Only its direction is used.
        """
        x_adv = x_adv.detach().requires_grad_(True)
        logits = self.model(x_adv)
        fn = loss_fn or (lambda z, t: F.cross_entropy(z, t, reduction="none"))
        loss = fn(logits, y)
        if self.targeted:
            loss = -loss
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
    """Registered attack names, optionally filtered by a shell-style pattern such as ``"apgd*"``."""
    return ATTACKS.list(pattern)


def create_attack(name: str, model: nn.Module, **kwargs: Any) -> Attack:
    """Build a registered attack: ``create_attack("pgd", model, eps="4/255", steps=10)``; ``name`` may be an
    alias (``"patch-fool"``). The keywords are parsed with the attack's ``Options`` (strings from a spec are
    typed; an unknown key or a bad value is a one-line error) and only those given reach the constructor."""
    cls = ATTACKS.get(name)
    opts = parse_options(cls.Options, kwargs, what=f"attack {ATTACKS.canonical(name)!r}")
    return cls(model, **{k: getattr(opts, k) for k in (str(k).replace("-", "_") for k in kwargs)})


def attack_options(name: str) -> list[dict[str, Any]]:
    """Each option of an attack — name, type, default, help — for ``robustvit list attacks --options``."""
    return describe(get_attack_class(name).Options)


def get_attack_class(name: str) -> type[Attack]:
    """The class registered under ``name`` (raises the usual unknown-name error)."""
    return ATTACKS.get(name)


def attack_keywords(name_or_cls: str | type[Attack]) -> set[str]:
    """The keyword arguments an attack's constructor accepts (following ``**kwargs`` up the MRO)."""
    cls = get_attack_class(name_or_cls) if isinstance(name_or_cls, str) else name_or_cls
    return (accepted_keywords(cls) or set()) - {"model"}
