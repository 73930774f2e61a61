"""Per-epoch ε schedules for adversarial training: ``constant``, or ``linear`` warm-up as in Debenedetti's light
recipe (arXiv:2209.07399): ε_e = e / period · ε for e < period (so epoch 0 trains on clean images), then ε.

>>> eps_at(0, 4 / 255, "linear", 4), eps_at(2, 4 / 255, "linear", 4) * 255, eps_at(9, 4 / 255, "linear", 4) * 255
(0.0, 2.0, 4.0)
"""

from __future__ import annotations

from typing import Literal, get_args

from robustvit.errors import RobustvitError

#: The ε schedules (the type of the ``eps_schedule`` options).
EpsSchedule = Literal["constant", "linear"]


def eps_at(epoch: int, eps: float, schedule: EpsSchedule = "constant", period: float = 0) -> float:
    """ε for a 0-based ``epoch`` under ``schedule`` with a warm-up of ``period`` epochs."""
    if schedule not in get_args(EpsSchedule):
        raise RobustvitError(f"unknown eps schedule {schedule!r}; use one of {', '.join(get_args(EpsSchedule))}")
    if schedule == "constant" or period <= 0 or epoch >= period:
        return float(eps)
    return float(eps) * epoch / period
