"""Semantic segmentation on any timm backbone: a light head on the last block's features, logits at the input
resolution.

ViTs: the last block's patch tokens laid back on their grid; CNNs (and NHWC maps): the last stage's feature map
(``forward_features``). The SETR-naive head (Zheng et al., arXiv:2012.15840): 1×1 conv → BatchNorm → ReLU → 1×1 conv,
then bilinear upsampling; ``head="linear"`` is one 1×1 conv (Segmenter's linear decoder, arXiv:2105.05633).
Registered with timm as ``segmentation_net``, so a checkpoint folder loads with ``create_model``.

>>> m = create_segmenter("vit_cifar_micro", num_classes=3)
>>> m(torch.rand(2, 3, 32, 32)).shape
torch.Size([2, 3, 32, 32])
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import timm
import torch
import torch.nn.functional as F
from timm.models import register_model
from torch import nn

from robustvit.errors import RobustvitError
from robustvit.models.cifar import _drop_timm_cfg
from robustvit.models.factory import create_model, spec_from_timm
from robustvit.models.wrapper import Normalized

ARCHITECTURE = "segmentation_net"
HEADS = ("setr_naive", "linear")


class SegmentationNet(nn.Module):
    """A timm backbone (classifier head removed) and a light segmentation head → (N, K, H, W) logits."""

    def __init__(self, backbone: str, num_classes: int, head: str = "setr_naive", head_channels: int = 256,
                 pretrained: bool = False, **backbone_kwargs: Any) -> None:
        super().__init__()
        if head not in HEADS:
            raise RobustvitError(f"unknown segmentation head {head!r}; use {' or '.join(HEADS)}")
        if num_classes < 2:
            raise RobustvitError(f"segmentation needs at least 2 classes, got {num_classes}")
        self.backbone_name, self.head_name = backbone, head
        self.backbone = create_model(backbone, pretrained=pretrained, num_classes=0, **backbone_kwargs).net
        c = int(self.backbone.num_features)
        if head == "linear":
            self.head = nn.Sequential(nn.Conv2d(c, num_classes, 1))
        else:
            self.head = nn.Sequential(nn.Conv2d(c, head_channels, 1, bias=False), nn.BatchNorm2d(head_channels),
                                      nn.ReLU(inplace=True), nn.Conv2d(head_channels, num_classes, 1))
        self.num_classes = num_classes
        self.pretrained_cfg = dict(getattr(self.backbone, "pretrained_cfg", None) or {})

    def feature_map(self, x: torch.Tensor) -> torch.Tensor:
        """The last block's features as a map (N, C, h, w)."""
        f = self.backbone.forward_features(x)
        c = int(self.backbone.num_features)
        if f.ndim == 3:                                   # tokens (N, T, C): drop CLS/register tokens
            f = f[:, int(getattr(self.backbone, "num_prefix_tokens", 0)):]
            ps = getattr(getattr(self.backbone, "patch_embed", None), "patch_size", None)
            if ps is None:
                raise RobustvitError(f"{self.backbone_name} returns tokens without a patch_embed.patch_size")
            ph, pw = (ps, ps) if isinstance(ps, int) else ps
            h, w = x.shape[-2] // ph, x.shape[-1] // pw
            if h * w != f.shape[1]:
                raise RobustvitError(f"{self.backbone_name}: {f.shape[1]} patch tokens do not fill a {h}×{w} grid")
            return f.transpose(1, 2).reshape(f.shape[0], c, h, w)
        if f.ndim == 4 and f.shape[1] != c and f.shape[-1] == c:   # NHWC (Swin, some ConvNeXt variants)
            f = f.permute(0, 3, 1, 2)
        if f.ndim != 4:
            raise RobustvitError(f"{self.backbone_name}.forward_features gives shape {tuple(f.shape)}, not a map")
        return f

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.head(self.feature_map(x))
        return F.interpolate(logits, size=x.shape[-2:], mode="bilinear", align_corners=False)


@register_model
def segmentation_net(pretrained: bool = False, **kwargs: Any) -> SegmentationNet:
    """timm entry point: ``backbone``, ``num_classes``, ``head``, ``head_channels``, other keywords to the backbone;
    ``pretrained`` loads the backbone's pretrained weights."""
    kwargs = _drop_timm_cfg(kwargs)
    if "backbone" not in kwargs:
        raise RobustvitError("segmentation_net needs backbone=NAME (a timm model)")
    return SegmentationNet(pretrained=pretrained, **kwargs)


def create_segmenter(backbone: str, num_classes: int, *, head: str = "setr_naive", head_channels: int = 256,
                     pretrained: bool = False, **backbone_kwargs: Any) -> Normalized:
    """A segmentation model on ``backbone`` in robustvit's wrapper: [0, 1] images in, (N, K, H, W) logits out."""
    kwargs = {"backbone": backbone, "num_classes": int(num_classes), "head": head, "head_channels": int(head_channels),
              **backbone_kwargs}
    net = timm.create_model(ARCHITECTURE, pretrained=pretrained, **kwargs)
    spec = replace(spec_from_timm(backbone, net.backbone, dict(backbone_kwargs)), architecture=ARCHITECTURE,
                   num_classes=int(num_classes), kwargs=kwargs)
    model = Normalized(net, spec)
    model.weights = {"pretrained": bool(pretrained), "source": f"timm:{backbone} backbone" if pretrained else "random"}
    return model


def is_segmenter(model: nn.Module) -> bool:
    """Whether ``model`` (a wrapper or a bare network) is a :class:`SegmentationNet`."""
    return isinstance(getattr(model, "net", model), SegmentationNet)


__all__ = ["ARCHITECTURE", "HEADS", "SegmentationNet", "create_segmenter", "is_segmenter", "segmentation_net"]
