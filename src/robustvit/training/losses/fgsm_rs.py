"""``fgsm_rs``: FGSM with random start (Wong et al., "Fast is better than free", arXiv:2001.03994;
locuslab/fast_adversarial): x + U(−ε, ε), one signed-gradient step of 1.25·ε, projection; cross-entropy on x_adv.
The references attack in train mode (``attack_mode=train``); the default is eval mode, as the other losses."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from robustvit.training.losses.adversarial import AdversarialOptions
from robustvit.training.losses.base import register_loss
from robustvit.training.losses.pgd_at import PGDAT


@register_loss(aliases=("fgsm-rs",))
class FGSMRS(PGDAT):
    """FGSM-RS: ``step_size`` overrides 1.25·ε."""

    name = "fgsm_rs"
    step_rule = 1.25

    @dataclass
    class Options(AdversarialOptions):
        attack_steps: ClassVar[int] = 1     # one step: not an option
