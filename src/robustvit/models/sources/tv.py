"""``tv:NAME``: a torchvision detector (:mod:`robustvit.models.detection`; the ``det_*`` suites)."""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from robustvit.errors import RobustvitError
from robustvit.models.sources import register_model_source


@register_model_source("tv", "a torchvision detector: tv:fasterrcnn_resnet50_fpn (random weights get the data's "
                             "class count; --pretrained: COCO)")
def build_detector(name: str, *, pretrained: bool, weights: str | None, model_dir: str | None,
                   num_classes: Callable[[], int | None]) -> nn.Module:
    from robustvit.models.detection import create_detector

    if weights is not None:
        raise RobustvitError(f"--weights does not apply to the torchvision detector tv:{name}; use --pretrained")
    if model_dir is not None:
        raise RobustvitError(f"--model-dir does not apply to the torchvision detector tv:{name}")
    return create_detector(name, pretrained=pretrained, num_classes=None if pretrained else num_classes())
