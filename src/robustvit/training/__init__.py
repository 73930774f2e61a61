"""Training: the loop (``train``), its config, pluggable losses and batched augmentation."""

from robustvit.training.config import TrainConfig
from robustvit.training.losses import TrainingLoss, create_loss, list_losses, register_loss
from robustvit.training.trainer import train

__all__ = ["TrainConfig", "TrainingLoss", "create_loss", "list_losses", "register_loss", "train"]
