"""robustvit: evaluate, explain and harden the robustness of Vision Transformers (and CNN baselines).

The contract (see DESIGN.md): images are float tensors in [0, 1] of shape (N, 3, H, W); normalisation
lives inside the model wrapper; every random operation takes a seed or a ``torch.Generator``.

The Python API (:mod:`robustvit.facade`, imported on first use)::

    robustvit.evaluate(model_or_name, data="synthshapes:test", suites=["clean", "pgd"], out=None, limit=None)
    robustvit.analyze(model_or_name, data="synthshapes:test", analyses=["lesion"], out=None)
    robustvit.train(config_or_none, **fields)

``model_or_name`` is a name, a checkpoint folder or an ``nn.Module`` (normalisation from its timm
``pretrained_cfg``, or ``mean=`` / ``std=``). The evaluation engine is the package :mod:`robustvit.evaluation`.
"""

from __future__ import annotations

import importlib
from typing import Any

from robustvit._version import __version__
from robustvit.errors import RobustvitError

#: The functions of the Python API, loaded from the facade on first use (``import robustvit`` stays cheap).
API = ("evaluate", "analyze", "train")


def __getattr__(name: str) -> Any:
    if name in API:
        return getattr(importlib.import_module("robustvit.facade"), name)
    raise AttributeError(f"module 'robustvit' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *API])


__all__ = ["RobustvitError", "__version__", *API]
