"""Training: the loop (``train``), its config, recipes (typed sets of config fields), pluggable (robust)
losses (the package :mod:`robustvit.training.losses`), ε schedules, batched augmentation and fine-tuning
(``finetune``)."""

from robustvit.training.config import TrainConfig
from robustvit.training.losses import TrainingLoss, create_loss, list_losses, parse_loss_options, register_loss
from robustvit.training.recipes import Recipe, get_recipe, list_recipes, register_recipe
from robustvit.training.trainer import train

__all__ = ["Recipe", "TrainConfig", "TrainingLoss", "create_loss", "get_recipe", "list_losses", "list_recipes",
           "parse_loss_options", "register_loss", "register_recipe", "train"]
