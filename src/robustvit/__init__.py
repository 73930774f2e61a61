"""robustvit: evaluate, explain and harden the robustness of Vision Transformers (and CNN baselines).

The contract (see DESIGN.md): images are float tensors in [0, 1] of shape (N, 3, H, W); normalisation
lives inside the model wrapper; every random operation takes a seed or a ``torch.Generator``.

The Python API (imported lazily; :mod:`robustvit.facade`)::

    robustvit.evaluate(model_or_name, data="synthshapes:test", suites=["clean", "pgd"], out=None, limit=None)
    robustvit.analyze(model_or_name, data="synthshapes:test", analyses=["lesion"], out=None)
    robustvit.train(config_or_none, **fields)

``model_or_name`` is a name, a checkpoint folder or an ``nn.Module`` (normalisation from its timm
``pretrained_cfg``, or ``mean=`` / ``std=``). ``robustvit.evaluate`` is also the evaluation package
(``robustvit.evaluate.runner``, ``robustvit.evaluate.suites``): the package module is callable.
"""

from __future__ import annotations

import types
from typing import Any

from robustvit._version import __version__
from robustvit.errors import RobustvitError


class _CallablePackage(types.ModuleType):
    """``robustvit.evaluate``: the evaluation package, which can be called as :func:`robustvit.facade.evaluate`."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from robustvit.facade import evaluate

        return evaluate(*args, **kwargs)


def _callable_evaluate_package() -> types.ModuleType:
    import robustvit.evaluate as package      # its __init__ imports nothing: cheap

    package.__class__ = _CallablePackage
    return package


evaluate = _callable_evaluate_package()


def analyze(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """Run analyses on a model; see :func:`robustvit.facade.analyze`."""
    from robustvit.facade import analyze as run

    return run(*args, **kwargs)


def train(*args: Any, **kwargs: Any) -> Any:
    """Train a model; see :func:`robustvit.facade.train`."""
    from robustvit.facade import train as run

    return run(*args, **kwargs)


__all__ = ["RobustvitError", "__version__", "analyze", "evaluate", "train"]
