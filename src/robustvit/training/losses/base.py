"""The training-loss base class, its registry and shared helpers. A loss is called as ``loss_fn(model, x, y,
epoch) -> (loss, clean_logits, adv_logits_or_None)`` (the interface of Debenedetti's light-recipe code,
dedeswim/vits-robustness-torch); it declares its options as a dataclass ``Options`` (:mod:`robustvit.options`),
which ``create_loss(name, **options)`` parses with one-line errors.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from robustvit.options import NoOptions, option_names, parse_options
from robustvit.registry import Registry
from robustvit.utils import derive_seed

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
    """Base class: subclasses set ``name`` (snake_case), declare ``Options`` and implement ``forward``. The
    trainer calls ``after_step()`` after every optimizer step (AFAT's corruption model steps there) and logs
    ``metrics()`` (averaged over the epoch's steps). ``soft_targets``: whether the loss takes (N, K) soft targets
    (MixUp/CutMix); ``counts_calls``: whether it keeps a ``calls`` buffer (:meth:`seeded_generator`)."""

    name = ""
    Options: type = NoOptions
    soft_targets = False
    counts_calls = False

    def __init__(self, options: Any = None, **kwargs: Any) -> None:
        super().__init__()
        if options is not None and kwargs:
            raise TypeError("pass either an Options instance or keywords, not both")
        self.options = options if options is not None else parse_options(
            type(self).Options, kwargs, what=f"training loss {self.name!r}")
        if self.counts_calls:
            self.register_buffer("calls", torch.zeros((), dtype=torch.long))   # saved: a resume replays the draws

    def forward(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, epoch: int) -> LossOutput:  # noqa: D102
        raise NotImplementedError

    def setup(self, model: nn.Module) -> None:
        """Hook run once with the model before training (and before a checkpoint's state is loaded)."""

    def after_step(self) -> None:
        """Hook run after the classifier's optimizer step."""

    def metrics(self) -> dict[str, float]:
        return {}

    def resolved(self) -> dict[str, Any]:
        """Choices the loss made itself in ``setup`` (MPP's corruption ``space``), for ``results.json``."""
        return {}

    def seeded_generator(self, seed: int, what: str, device: torch.device | str = "cpu") -> torch.Generator:
        """A generator for this call's random draws, seeded from ``seed``, ``what``, the call counter ``calls``
        (saved with the loss, so a resumed run replays the draws) and the data-parallel rank; counts the call."""
        gen = torch.Generator(device=device)
        gen.manual_seed(derive_seed(seed, what, int(self.calls), _rank()))
        self.calls += 1
        return gen

    def optimized_parameters(self) -> list[tuple[str, nn.Parameter]]:
        """(name, parameter) pairs of this loss that the trainer's optimizer trains with the model (MPP's
        [mask] embedding and head); losses with their own optimizer (AFAT) return none."""
        return []


LOSSES: Registry[type[TrainingLoss]] = Registry("training loss", package="robustvit.training.losses",
                                                 hint="see `robustvit list losses`")


def register_loss(obj: Any = None, *, aliases: tuple[str, ...] = ()) -> Any:
    """Decorator: ``@register_loss`` (the class's ``name``), ``@register_loss("name")``, or
    ``@register_loss(aliases=("pgd-at",))`` for other spellings that resolve to it. Aliases are given here,
    not as a class attribute, so that a subclass registered under another name does not inherit them."""
    def deco(cls: Any, name: str | None = None) -> Any:
        LOSSES.add(name or cls.name, cls, aliases=aliases)
        return cls
    if obj is None:
        return deco
    if isinstance(obj, str):
        return lambda cls: deco(cls, obj)
    return deco(obj)


def _declares_options(cls: type) -> bool:
    return getattr(cls, "Options", NoOptions) is not NoOptions


def list_losses(pattern: str | None = None) -> list[str]:
    """Registered training-loss names (``ce``, ``pgd_at``, ``fgsm_rs``, ``trades``, ``afat``, …)."""
    return LOSSES.list(pattern)


def parse_loss_options(name: str, raw: dict[str, Any] | None = None) -> Any:
    """``raw`` (spec strings such as ``--loss-option beta=6`` or typed values) as the loss's ``Options``."""
    return LOSSES.parse_options(name, raw)


def create_loss(name: str, **kwargs: Any) -> TrainingLoss:
    """Build a registered training loss, e.g. ``create_loss("trades", beta=6, eps="8/255")``."""
    cls = LOSSES.get(name)
    if _declares_options(cls):
        return cls(options=parse_loss_options(name, kwargs))
    return LOSSES.create(name, **kwargs)


def loss_keywords(name: str) -> set[str] | None:
    """Options the loss ``name`` accepts (None: any)."""
    cls = LOSSES.get(name)
    return set(option_names(cls.Options)) if _declares_options(cls) else LOSSES.keywords(name)
