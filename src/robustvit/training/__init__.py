"""Training: the loop (``train``), its config, recipes, pluggable (robust) losses
(:mod:`robustvit.training.losses`), ε schedules, batched augmentation and fine-tuning (``finetune``). The names
below load their module on first use, so that ``robustvit train --help`` imports no torch or timm.
"""

from __future__ import annotations

import importlib
from typing import Any

#: Public name → the module that defines it.
EXPORTS = {
    "TrainConfig": "robustvit.training.config",
    **dict.fromkeys(("TrainingLoss", "create_loss", "list_losses", "parse_loss_options", "register_loss"),
                    "robustvit.training.losses"),
    **dict.fromkeys(("Recipe", "get_recipe", "list_recipes", "register_recipe"), "robustvit.training.recipes"),
    "train": "robustvit.training.trainer",
}


def __getattr__(name: str) -> Any:
    if name in EXPORTS:
        return getattr(importlib.import_module(EXPORTS[name]), name)
    raise AttributeError(f"module 'robustvit.training' has no attribute {name!r}")


__all__ = sorted(EXPORTS)
