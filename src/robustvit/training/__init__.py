"""Training: the loop (``train``), its config, recipes, pluggable (robust) losses, ε schedules, batched
augmentation and fine-tuning (``finetune``)."""

from robustvit.training.config import TrainConfig
from robustvit.training.losses import TrainingLoss, create_loss, list_losses, register_loss
from robustvit.training.recipes import get_recipe, list_recipes
from robustvit.training.trainer import train

__all__ = ["TrainConfig", "TrainingLoss", "create_loss", "get_recipe", "list_losses", "list_recipes",
           "register_loss", "train"]
