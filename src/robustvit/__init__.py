"""robustvit: evaluate, explain and harden the robustness of Vision Transformers (and CNN baselines).

The contract (see DESIGN.md): images are float tensors in [0, 1] of shape (N, 3, H, W); normalisation
lives inside the model wrapper; every random operation takes a seed or a ``torch.Generator``.
"""

import os

# Large CPU tensors (a batch of 224-px images is tens of MB) are fresh mmap'd memory on every allocation, and
# faulting it in 4 KB pages costs more than the arithmetic of most corruptions and attack steps. PyTorch backs
# large CPU allocations with transparent huge pages when THP_MEM_ALLOC_ENABLE=1 (read at the first large
# allocation): 3-5x faster allocation (docs/benchmarks.md). Set THP_MEM_ALLOC_ENABLE=0 to opt out.
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

__version__ = "0.1.0"

from robustvit.errors import RobustvitError  # noqa: E402

__all__ = ["RobustvitError", "__version__"]
