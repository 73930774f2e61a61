"""``robustvit finetune``: train a model that starts from other weights (a checkpoint folder or, with
``pretrained``, the architecture's published weights) with model surgery from
:mod:`robustvit.models.finetune` — a new zero-initialised head when the class count changes, a new input
resolution (position embeddings resampled, ``pos_embed_interp`` bicubic or linear), a new patch size, the run's
``drop_path``/``model_kwargs`` on top of a checkpoint's own settings — and
any training loss (adversarial fine-tuning: ``--loss trades`` or ``--recipe trades_finetune``).

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
