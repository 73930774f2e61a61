"""Model sources: ``--model PREFIX:NAME`` built by the source registered under ``PREFIX``.

A source is a builder ``build(name, *, pretrained, weights, model_dir, num_classes) -> nn.Module`` registered with
:func:`register_model_source` in a module of this package (a new file is a new source). ``name`` follows
``PREFIX:``; ``num_classes`` is a zero-argument function giving the data's class count (None without data; models/
sits below data/). Builders import their optional packages inside. Sources: ``tv:`` torchvision detectors,
``robustbench:`` RobustBench's zoo, ``hf:`` ``transformers`` classifiers (docs/models.md). Any other prefix (a timm
name, a checkpoint folder, timm's ``hf-hub:``) is no source spec.

>>> split_source("robustbench:cifar10/Linf/Standard")
('robustbench', 'cifar10/Linf/Standard')
>>> split_source("vit_small_patch16_224") is None, split_source("hf-hub:timm/vit_tiny_patch16_224") is None
(True, True)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import nn

from robustvit.errors import RobustvitError
from robustvit.registry import Registry


@dataclass(frozen=True)
class ModelSource:
    """A registered source: its prefix (``name``), builder, one-line help and the pip extra it needs."""

    name: str
    build: Callable[..., nn.Module]
    help: str
    extra: str | None = None


MODEL_SOURCES: Registry[ModelSource] = Registry("model source", package="robustvit.models.sources",
                                                hint="see docs/models.md")


def register_model_source(prefix: str, help: str, extra: str | None = None
                          ) -> Callable[[Callable[..., nn.Module]], Callable[..., nn.Module]]:
    """Decorator: register ``fn`` as the builder of ``--model PREFIX:NAME``."""
    def deco(fn: Callable[..., nn.Module]) -> Callable[..., nn.Module]:
        MODEL_SOURCES.add(prefix, ModelSource(prefix, fn, help, extra))
        return fn
    return deco


def split_source(spec: str) -> tuple[str, str] | None:
    """``(prefix, name)`` when ``spec`` is ``PREFIX:NAME`` with a registered prefix, else None."""
    prefix, sep, rest = spec.partition(":")
    if not sep or prefix not in MODEL_SOURCES.list():
        return None
    return prefix, rest


def build_from_source(spec: str, *, pretrained: bool = False, weights: str | None = None,
                      model_dir: str | None = None, num_classes: Callable[[], int | None] | None = None
                      ) -> nn.Module | None:
    """The model of ``PREFIX:NAME`` from its source, or None when ``spec`` names no source."""
    split = split_source(spec)
    if split is None:
        if model_dir is not None:
            raise RobustvitError(f"--model-dir applies to robustbench: and hf: models, not to {spec}")
        return None
    prefix, name = split
    if not name:
        raise RobustvitError(f"--model {spec} names no model after '{prefix}:'; see docs/models.md")
    return MODEL_SOURCES.get(prefix).build(name, pretrained=pretrained, weights=weights, model_dir=model_dir,
                                           num_classes=num_classes or (lambda: None))


def missing_package(package: str, extra: str, what: str) -> RobustvitError:
    """The one-line error for an optional package that is not installed."""
    return RobustvitError(f"{what} needs the {package} package; pip install 'robustvit[{extra}]'"
                          + (" and pip install --no-deps robustbench" if extra == "robustbench" else ""))


__all__ = ["MODEL_SOURCES", "ModelSource", "build_from_source", "missing_package", "register_model_source",
           "split_source"]
