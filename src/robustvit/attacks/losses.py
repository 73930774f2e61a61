"""Per-sample attack losses on logits ``z`` (N, K) and labels (N,), to *maximise*: cross-entropy, DLR, targeted DLR.

* DLR, "Difference of Logits Ratio" (Croce & Hein 2020, arXiv:2003.01690, Eq. 5):
  ``−(z_y − max_{i≠y} z_i) / (z_π1 − z_π3)``, π the logits sorted in decreasing order; invariant to shifting and
  rescaling the logits, so not fooled by saturated softmax outputs.
* Targeted DLR (ibid., Eq. 6): ``−(z_y − z_t) / (z_π1 − (z_π3 + z_π4)/2)``; needs ≥ 4 classes.

Example::

    >>> z = torch.tensor([[3.0, 1.0, 0.0, -1.0]])
    >>> dlr_loss(z, torch.tensor([0]))        # −(3 − 1) / (3 − 0)
    tensor([-0.6667])
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from robustvit.errors import RobustvitError

#: Added to the DLR denominators, as in the reference implementation.
DLR_EPS = 1e-12

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def ce_loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-sample cross-entropy (N,)."""
    return F.cross_entropy(logits, y, reduction="none")


def dlr_loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Untargeted DLR loss (N,); needs at least 3 classes."""
    _need_classes(logits, 3, "DLR")
    z_sorted, idx = logits.sort(dim=1)
    z_y = logits.gather(1, y[:, None]).squeeze(1)
    other = torch.where(idx[:, -1] == y, z_sorted[:, -2], z_sorted[:, -1])  # max_{i≠y} z_i
    return -(z_y - other) / (z_sorted[:, -1] - z_sorted[:, -3] + DLR_EPS)


def dlr_targeted_loss(logits: torch.Tensor, y: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Targeted DLR loss (N,) towards ``target``; maximising it raises z_target above z_y. Needs ≥ 4 classes."""
    _need_classes(logits, 4, "targeted DLR")
    z_sorted = logits.sort(dim=1).values
    z_y = logits.gather(1, y[:, None]).squeeze(1)
    z_t = logits.gather(1, target[:, None]).squeeze(1)
    return -(z_y - z_t) / (z_sorted[:, -1] - 0.5 * (z_sorted[:, -3] + z_sorted[:, -4]) + DLR_EPS)


def ce_targeted_loss(logits: torch.Tensor, y: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Negative cross-entropy towards ``target`` (N,): maximising it makes the model predict ``target``."""
    return -F.cross_entropy(logits, target, reduction="none")


UNTARGETED_LOSSES: dict[str, LossFn] = {"ce": ce_loss, "dlr": dlr_loss}


def get_loss(name: str) -> LossFn:
    """An untargeted loss by name ("ce" or "dlr")."""
    try:
        return UNTARGETED_LOSSES[name]
    except KeyError:
        raise RobustvitError(f"unknown attack loss {name!r}; choose from {', '.join(UNTARGETED_LOSSES)}") from None


def _need_classes(logits: torch.Tensor, k: int, what: str) -> None:
    if logits.shape[1] < k:
        raise RobustvitError(f"the {what} loss needs at least {k} classes, the model has {logits.shape[1]}; "
                             "use the cross-entropy loss (e.g. apgd_ce) instead")
