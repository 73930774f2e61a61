"""torchvision detection models (Faster R-CNN, RetinaNet, FCOS, SSD, …) behind robustvit's image contract.

torchvision's detectors take a *list* of [0, 1] images of any sizes and normalise and resize them inside, which is
robustvit's contract already; :class:`Detector` adds ``spec``/``weights``, input checks and eval mode. Boxes are in
the input's pixels, ``[x0, y0, x1, y1]``; ``labels`` are COCO category ids for COCO-trained models.
``pretrained=False`` builds random weights offline (their mAP means nothing).

>>> det = create_detector("fasterrcnn_mobilenet_v3_large_320_fpn", num_classes=3)
>>> det.spec.num_classes
3
>>> out = det([torch.rand(3, 64, 80)])       # seconds on a CPU; doctest: +SKIP
>>> sorted(out[0])                            # doctest: +SKIP
['boxes', 'labels', 'scores']
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from robustvit.errors import RobustvitError
from robustvit.models.spec import ModelSpec
from robustvit.utils import eval_mode


def list_detectors() -> list[str]:
    """torchvision's detection architectures (``torchvision.models.list_models(module=…detection)``)."""
    import torchvision

    return sorted(torchvision.models.list_models(module=torchvision.models.detection))


class Detector(nn.Module):
    """A torchvision detector that takes [0, 1] images (a list of (3, H, W) or a batch (N, 3, H, W)) and returns
    one dict per image: ``boxes`` (m, 4) ``[x0, y0, x1, y1]`` pixels, ``labels`` (m,), ``scores`` (m,)."""

    def __init__(self, net: nn.Module, spec: ModelSpec, weights: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.model, self.spec = net, spec
        self.weights = weights or {"pretrained": False, "source": "random"}

    @property
    def net(self) -> nn.Module:
        """The torchvision model, as ``Normalized.net``."""
        return self.model

    def forward(self, images: list[torch.Tensor] | torch.Tensor) -> list[dict[str, torch.Tensor]]:
        ims = list(images)
        for im in ims:
            if im.ndim != 3 or im.shape[0] != 3 or not im.is_floating_point():
                raise RobustvitError(f"detector input must be float (3, H, W) images in [0, 1], got "
                                     f"{tuple(im.shape)} {im.dtype}")
        with eval_mode(self.model):      # torchvision detectors need targets in train mode
            return self.model(ims)


def create_detector(name: str, *, pretrained: bool = False, num_classes: int | None = None,
                    **kwargs: Any) -> Detector:
    """torchvision detection model ``name`` (``fasterrcnn_resnet50_fpn``, …): ``pretrained``, its default COCO
    weights (91 category ids); else random weights for ``num_classes`` (default 91, 0 = background)."""
    import torchvision

    names = list_detectors()
    if name not in names:
        from robustvit.errors import unknown_name

        raise unknown_name("detector", name, names, "a torchvision detection model name")
    if pretrained:
        if num_classes not in (None, 91):
            raise RobustvitError("pretrained torchvision detectors have the 91 COCO category ids; drop num_classes")
        args: dict[str, Any] = {"weights": "DEFAULT", **kwargs}
    else:
        args = {"weights": None, "weights_backbone": None, "num_classes": int(num_classes or 91), **kwargs}
    try:
        net = torchvision.models.get_model(name, **args)
    except (TypeError, ValueError) as e:
        raise RobustvitError(f"cannot build detector {name} ({e})") from None
    k = int(num_classes or 91)
    size = int(getattr(getattr(net, "transform", None), "min_size", (800,))[0])
    spec = ModelSpec(architecture=f"tv:{name}", num_classes=k, input_size=(3, size, size), mean=(0.0, 0.0, 0.0),
                     std=(1.0, 1.0, 1.0), family="detector", kwargs={"num_classes": k} if not pretrained else {})
    weights = {"pretrained": bool(pretrained), "source": f"torchvision:{name}" if pretrained else "random"}
    return Detector(net.eval(), spec, weights)


__all__ = ["Detector", "create_detector", "list_detectors"]
