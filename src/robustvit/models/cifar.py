"""robustvit's own small architectures for 32×32 inputs, registered into timm's registry.

* ``vit_cifar_micro`` / ``_tiny`` / ``_small``: timm ``VisionTransformer`` instances (Dosovitskiy et al.,
  arXiv:2010.11929) with 4×4 patches; ``vit_cifar_demo``: ``vit_cifar_micro`` on a convolutional stem (Xiao et al.,
  arXiv:2106.14881).
* ``resnet_cifar18``: CIFAR ResNet-18 (He et al., arXiv:1512.03385): 3×3 stem, no max-pool, four stages of two basic
  blocks (64-128-256-512 channels × ``width_mult``).
"""

from __future__ import annotations

from typing import Any

import torch
from timm.layers import PatchEmbed
from timm.models import register_model
from timm.models.vision_transformer import VisionTransformer
from torch import nn

CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2470, 0.2435, 0.2616)


def _cfg(**kw: Any) -> dict[str, Any]:
    return {"num_classes": 10, "input_size": (3, 32, 32), "mean": CIFAR_MEAN, "std": CIFAR_STD,
            "crop_pct": 1.0, "interpolation": "bilinear", "first_conv": "patch_embed.proj",
            "classifier": "head", **kw}


def _drop_timm_cfg(kwargs: dict[str, Any]) -> dict[str, Any]:
    """timm.create_model passes its pretrained-cfg keywords to every entry point; ours ignore them."""
    return {k: v for k, v in kwargs.items() if k not in ("pretrained_cfg", "pretrained_cfg_overlay", "cache_dir")}


def _vit(pretrained: bool, defaults: dict[str, Any], **kwargs: Any) -> VisionTransformer:
    if pretrained:
        raise RuntimeError("robustvit's CIFAR architectures have no pretrained weights; train one with "
                           "`robustvit train` and load it with checkpoint=DIR")
    args = {"img_size": 32, "patch_size": 4, "num_classes": 10, **defaults, **_drop_timm_cfg(kwargs)}
    model = VisionTransformer(**args)
    model.pretrained_cfg = _cfg(num_classes=args["num_classes"], input_size=(3, args["img_size"], args["img_size"]))
    return model


@register_model
def vit_cifar_tiny(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    """ViT-Ti width (192, 3 heads) for 32×32 images, 6 blocks, MLP ratio 2, 4×4 patches (~1.8 M params)."""
    return _vit(pretrained, {"embed_dim": 192, "depth": 6, "num_heads": 3, "mlp_ratio": 2.0}, **kwargs)


@register_model
def vit_cifar_micro(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    """Width 128, 4 heads, 4 blocks, MLP ratio 2, 4×4 patches, global average pooling instead of a CLS token
    (Beyer et al., arXiv:2205.01580: trains faster from scratch on small data) (~0.55 M params)."""
    return _vit(pretrained, {"embed_dim": 128, "depth": 4, "num_heads": 4, "mlp_ratio": 2.0,
                             "class_token": False, "global_pool": "avg"}, **kwargs)


class ConvStemPatchEmbed(PatchEmbed):
    """A convolutional stem (Xiao et al., arXiv:2106.14881): ``log2(patch)`` 3×3 stride-2 convs (BatchNorm, ReLU),
    widths ``stem_width · 2^i``, then a 1×1 ``proj``; the same token grid and attributes as timm's ``PatchEmbed``."""

    def __init__(self, img_size: int = 32, patch_size: int = 4, in_chans: int = 3, embed_dim: int = 128,
                 stem_width: int = 32, bias: bool = True, **kwargs: Any) -> None:
        super().__init__(img_size=img_size, patch_size=patch_size, in_chans=in_chans, embed_dim=embed_dim,
                         bias=bias, **kwargs)
        n = patch_size.bit_length() - 1
        if patch_size < 2 or 2 ** n != patch_size:
            raise ValueError(f"a conv stem needs a power-of-2 patch size, got {patch_size}")
        layers: list[nn.Module] = []
        c = in_chans
        for i in range(n):
            w = stem_width * 2 ** i
            layers += [nn.Conv2d(c, w, 3, 2, 1, bias=False), nn.BatchNorm2d(w), nn.ReLU(inplace=True)]
            c = w
        self.stem = nn.Sequential(*layers)
        self.proj = nn.Conv2d(c, embed_dim, 1, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.proj(self.stem(x))
        return self.norm(x.flatten(2).transpose(1, 2) if self.flatten else x)


@register_model
def vit_cifar_demo(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    """The CPU-demo ViT: ``vit_cifar_micro``'s transformer on a ``ConvStemPatchEmbed`` stem."""
    return _vit(pretrained, {"embed_dim": 128, "depth": 4, "num_heads": 4, "mlp_ratio": 2.0,
                             "class_token": False, "global_pool": "avg", "embed_layer": ConvStemPatchEmbed},
                **kwargs)


@register_model
def vit_cifar_small(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    """ViT-S width (384, 6 heads) for 32×32 images, 8 blocks, MLP ratio 4, 4×4 patches (~14 M params)."""
    return _vit(pretrained, {"embed_dim": 384, "depth": 8, "num_heads": 6, "mlp_ratio": 4.0}, **kwargs)


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.act = nn.ReLU(inplace=True)
        self.shortcut = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.act(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.act(out + self.shortcut(x))


class CifarResNet(nn.Module):
    """ResNet for small images; exposes timm's ``forward_features``/``forward_head``/``reset_classifier``."""

    def __init__(self, layers: tuple[int, ...] = (2, 2, 2, 2), num_classes: int = 10, width_mult: float = 1.0,
                 in_chans: int = 3, drop_rate: float = 0.0, **_: Any) -> None:
        super().__init__()
        widths = [max(4, int(round(w * width_mult))) for w in (64, 128, 256, 512)]
        self.stem = nn.Sequential(nn.Conv2d(in_chans, widths[0], 3, 1, 1, bias=False), nn.BatchNorm2d(widths[0]),
                                  nn.ReLU(inplace=True))
        stages, cin = [], widths[0]
        for i, (w, n) in enumerate(zip(widths, layers)):
            blocks = [BasicBlock(cin if j == 0 else w, w, (1 if i == 0 else 2) if j == 0 else 1) for j in range(n)]
            stages.append(nn.Sequential(*blocks))
            cin = w
        self.stages = nn.Sequential(*stages)
        self.num_features = cin
        self.num_classes = num_classes
        self.drop = nn.Dropout(drop_rate)
        self.fc = nn.Linear(cin, num_classes) if num_classes > 0 else nn.Identity()
        self.pretrained_cfg = _cfg(num_classes=num_classes, first_conv="stem.0", classifier="fc")

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        return self.stages(self.stem(x))

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        x = self.drop(x.mean((2, 3)))
        return x if pre_logits else self.fc(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))

    def get_classifier(self) -> nn.Module:
        return self.fc

    def reset_classifier(self, num_classes: int, global_pool: str | None = None) -> None:
        self.num_classes = num_classes
        self.fc = nn.Linear(self.num_features, num_classes) if num_classes > 0 else nn.Identity()


@register_model
def resnet_cifar18(pretrained: bool = False, **kwargs: Any) -> CifarResNet:
    """CIFAR ResNet-18 (3×3 stem, no max-pool); ``width_mult`` scales every stage's channels."""
    if pretrained:
        raise RuntimeError("resnet_cifar18 has no pretrained weights; train one with `robustvit train`")
    return CifarResNet((2, 2, 2, 2), **_drop_timm_cfg(kwargs))
