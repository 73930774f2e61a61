"""robustvit: evaluate, explain and harden the robustness of Vision Transformers (and CNN baselines).

The contract (see DESIGN.md): images are float tensors in [0, 1] of shape (N, 3, H, W); normalisation
lives inside the model wrapper; every random operation takes a seed or a ``torch.Generator``.
"""

__version__ = "0.1.0"

from robustvit.errors import RobustvitError  # noqa: E402

__all__ = ["RobustvitError", "__version__"]
