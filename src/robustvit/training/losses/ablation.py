"""``ablation``: the base classifier of derandomized smoothing, trained with cross-entropy on images of which one
column band (or block) of ``size`` pixels is kept, at a position drawn per batch (Levine & Feizi, arXiv:2002.10733;
Salman et al., arXiv:2110.07719, whose ViTs also drop the fully ablated tokens: ``tokens=auto`` does so where
:class:`robustvit.certify.AblatedModel` can). A 6-channel network (``--model-kwargs '{"in_chans": 6}'``) trains on
Levine & Feizi's encoding (x and 1 − x, 0 where ablated)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch
from torch import nn

from robustvit.certify.ablation import ABLATIONS, Ablation, AblatedModel
from robustvit.options import option
from robustvit.training.losses.base import LossOutput, TrainingLoss, classification_loss, register_loss


@register_loss
class AblationLoss(TrainingLoss):
    """Ablation as augmentation, at the band the smoothed classifier is certified with."""

    name = "ablation"
    soft_targets = True
    smoke: ClassVar[dict[str, Any]] = {"size": 4}
    counts_calls = True

    @dataclass
    class Options:
        ablation: Literal[ABLATIONS] = option("column", help="column (full-height band) or block (square)")
        size: int = option(4, min=1, help="retained band width in pixels of the training images")
        tokens: Literal["auto", "drop", "zero_fill"] = option("auto", help="drop the ablated ViT tokens (auto: where "
                                                                        "it applies) or zero-fill the pixels")
        encoding: Literal["auto", "rgb", "levine_feizi"] = option("auto", help="rgb (3 channels) or levine_feizi "
                                                                  "(6 channels); auto: what the network takes")
        label_smoothing: float = option(0.0, min=0, max=1, help="label smoothing of hard targets")
        seed: int = option(0, help="seed of the ablation positions")

    def __init__(self, options: object = None, **kwargs: object) -> None:
        super().__init__(options, **kwargs)
        self.band = Ablation(self.options.ablation, self.options.size)
        self._ablated: tuple[int, AblatedModel] | None = None

    def ablated(self, model: nn.Module) -> AblatedModel:
        if self._ablated is None or self._ablated[0] != id(model):
            self._ablated = (id(model), AblatedModel(model, self.options.tokens, self.options.encoding))
        return self._ablated[1]

    def forward(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, epoch: int) -> LossOutput:
        gen = self.seeded_generator(self.options.seed, "ablation")
        h, w = x.shape[-2:]
        starts = self.band.positions(h, w)
        pos = starts[torch.randint(len(starts), (1,), generator=gen)]
        logits = self.ablated(model)(x, self.band.keep(pos, h, w))[0]          # the mask on the CPU: no device read
        return classification_loss(logits, y, self.options.label_smoothing), logits, None

    def resolved(self) -> dict[str, object]:
        if self._ablated is None:
            return {}
        ablated = self._ablated[1]
        return {"tokens": ablated.mode, "encoding": ablated.encoding,
                **({"tokens_note": ablated.note} if ablated.note else {})}
