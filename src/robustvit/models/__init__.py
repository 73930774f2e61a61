"""Models: ``create_model`` (timm names, robustvit's own architectures, checkpoint folders), the
``Normalized`` wrapper with its ``ModelSpec``, checkpoints, and the ViT probe."""

from robustvit.models.factory import (create_model, is_checkpoint_dir, list_models, load_checkpoint,
                                      save_checkpoint)
from robustvit.models import segmenter as _segmenter  # noqa: F401  (registers segmentation_net with timm)
from robustvit.models.spec import ModelSpec
from robustvit.models.wrapper import Normalized

__all__ = ["ModelSpec", "Normalized", "create_model", "is_checkpoint_dir", "list_models", "load_checkpoint",
           "save_checkpoint"]
