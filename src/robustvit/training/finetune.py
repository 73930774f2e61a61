"""``robustvit finetune``: train from other weights (a checkpoint folder or, with ``pretrained``, published
weights) with the surgery of :mod:`robustvit.models.finetune` (new head, resolution, patch size) and any loss.

Example::

    robustvit finetune --model vit_base_patch16_224 --pretrained --data cifar10:train --img-size 32 \\
        --patch-size 4 --recipe trades_finetune --out runs/vitb-cifar
"""

from __future__ import annotations

from pathlib import Path

from robustvit.errors import RobustvitError
from robustvit.models import is_checkpoint_dir
from robustvit.training.config import TrainConfig
from robustvit.training.trainer import train


def finetune(cfg: TrainConfig, resume: bool = False, progress: bool = True) -> Path:
    """Fine-tune ``cfg.model`` (checkpoint folder, or a timm name with ``pretrained``) on ``cfg.data``."""
    if not (is_checkpoint_dir(cfg.model) or cfg.pretrained):
        raise RobustvitError(f"finetune starts from weights: give a checkpoint folder as --model or pass --pretrained "
                             f"({cfg.model!r} is neither); use `robustvit train` to train from scratch")
    return train(cfg, resume=resume, progress=progress)
