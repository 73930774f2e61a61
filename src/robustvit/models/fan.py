"""FAN — Fully Attentional Networks (Zhou et al., "Understanding the Robustness in Vision Transformers",
ICML 2022, arXiv:2204.12451), registered in timm's registry.

A FAN-ViT: a conv patch embedding (``log2(patch)`` 3×3 stride-2 convs, BatchNorm, GELU between), XCiT's Fourier
position features added once, blocks ``x + drop_path(γ1·TokenMixing(LN x))`` (self-attention over tokens) then
``x + drop_path(γ2·ChannelProcessing(LN x))`` (efficient channel attention), and a class-attention head (the CLS
token joins after the last block: two CaiT class-attention blocks, LayerNorm, linear). Hybrids replace the patch
embedding by two ConvNeXt stages (stride 8) and a 2×2 stride-2 projection.

Layout for the probe and the analyses: ``patch_embed`` → (N, P, D) tokens with ``grid_size``/``patch_size``;
``_pos_embed``; ``blocks`` of ``FANBlock`` (``norm1``, ``attn``, ``ls1``, ``drop_path1``, ``norm2``, ``mlp``,
``ls2``, ``drop_path2``); ``norm`` is the identity; ``forward_head`` runs class attention, ``head_norm``, ``head``;
``num_prefix_tokens = 0``. ``TokenMixing`` runs fused SDPA and has ``forward_with_attention(x, mask)``.

Deviations from NVlabs/FAN (same maths): one ``qkv`` (D→3D) linear instead of q and kv; LayerScale in ``ls1``/``ls2``
instead of ``gamma1``/``gamma2``; the channel-attention temperature is (heads,), not (heads, 1, 1), still
weight-decayed (``weight_decay_vectors()``; ``pos_embed.token_projection`` is decayed too, as ``no_weight_decay()``
lists exact names only); a patch-4 embedding uses widths D/2, D (NVlabs: D/4, D). As in NVlabs, the MLP on v has no
activation outside its depth-wise conv branch.

>>> import timm
>>> m = timm.create_model("fan_cifar_tiny")
>>> m(torch.rand(2, 3, 32, 32)).shape
torch.Size([2, 10])
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
from timm.layers import DropPath, LayerNorm2d, LayerScale, trunc_normal_
from timm.models import register_model
from timm.models.convnext import ConvNeXtStage
from timm.models.xcit import ClassAttentionBlock, PositionalEncodingFourier
from torch import nn

from robustvit.errors import RobustvitError
from robustvit.models.cifar import _cfg as _cifar_cfg
from robustvit.models.cifar import _drop_timm_cfg
from robustvit.models.layers import masked_softmax

Grid = tuple[int, int]


def _grid(num_tokens: int, hw: Grid | None) -> Grid:
    """The token grid: ``hw`` when given, else the square grid of ``num_tokens`` tokens."""
    if hw is not None:
        return int(hw[0]), int(hw[1])
    side = math.isqrt(num_tokens)
    if side * side != num_tokens:
        raise RobustvitError(f"FAN cannot infer the token grid of {num_tokens} tokens; pass hw=(H, W) "
                             "(non-square inputs must go through the model's own forward)")
    return side, side


class ConvPatchEmbed(nn.Module):
    """``log2(patch_size)`` 3×3 stride-2 convs (BatchNorm after each, GELU between), widths D/2^(n-1) … D."""

    def __init__(self, img_size: int = 224, patch_size: int = 16, in_chans: int = 3, embed_dim: int = 768) -> None:
        super().__init__()
        n = int(math.log2(patch_size)) if patch_size >= 2 else 0
        if n < 1 or 2 ** n != patch_size:
            raise RobustvitError(f"FAN's conv patch embedding needs a patch size that is a power of 2 (≥ 2), "
                                 f"got {patch_size}")
        layers: list[nn.Module] = []
        cin = in_chans
        for i in range(n):
            d = embed_dim // 2 ** (n - 1 - i)
            if i:
                layers.append(nn.GELU())
            layers.append(nn.Sequential(nn.Conv2d(cin, d, 3, 2, 1, bias=False), nn.BatchNorm2d(d)))
            cin = d
        self.proj = nn.Sequential(*layers)
        self.img_size = (img_size, img_size)
        self.patch_size = (patch_size, patch_size)
        self.grid_size = (math.ceil(img_size / patch_size),) * 2
        self.num_patches = self.grid_size[0] * self.grid_size[1]

    def forward_grid(self, x: torch.Tensor) -> tuple[torch.Tensor, Grid]:
        x = self.proj(x)
        return x.flatten(2).transpose(1, 2), (x.shape[2], x.shape[3])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_grid(x)[0]


class HybridEmbed(nn.Module):
    """FAN-Hybrid stem: ConvNeXt stem and two stages (Liu et al., arXiv:2201.03545), a 2×2 stride-2 projection."""

    def __init__(self, img_size: int = 224, in_chans: int = 3, embed_dim: int = 384,
                 depths: tuple[int, int] = (3, 3), dims: tuple[int, int] = (128, 256)) -> None:
        super().__init__()
        norm2d, norm_cl = partial(LayerNorm2d, eps=1e-6), partial(nn.LayerNorm, eps=1e-6)
        stem = nn.Sequential(nn.Conv2d(in_chans, dims[0], 4, 4), norm2d(dims[0]))
        stages = nn.Sequential(
            ConvNeXtStage(dims[0], dims[0], stride=1, depth=depths[0], ls_init_value=1e-6,
                          norm_layer=norm2d, norm_layer_cl=norm_cl),
            ConvNeXtStage(dims[0], dims[1], stride=2, depth=depths[1], ls_init_value=1e-6,
                          norm_layer=norm2d, norm_layer_cl=norm_cl))
        self.backbone = nn.Sequential(stem, stages)
        self.proj = nn.Conv2d(dims[1], embed_dim, 2, 2)
        self.img_size = (img_size, img_size)
        self.patch_size = (16, 16)
        self.grid_size = (img_size // 16,) * 2
        self.num_patches = self.grid_size[0] * self.grid_size[1]
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                trunc_normal_(m.weight, std=0.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)

    def forward_grid(self, x: torch.Tensor) -> tuple[torch.Tensor, Grid]:
        x = self.proj(self.backbone(x))
        return x.flatten(2).transpose(1, 2), (x.shape[2], x.shape[3])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_grid(x)[0]


class TokenMixing(nn.Module):
    """Multi-head self-attention over tokens (fused SDPA); ``forward_with_attention`` also returns the map."""

    def __init__(self, dim: int, num_heads: int = 8, qkv_bias: bool = True, attn_drop: float = 0.0,
                 proj_drop: float = 0.0) -> None:
        super().__init__()
        if dim % num_heads:
            raise RobustvitError(f"FAN width {dim} is not divisible by {num_heads} heads")
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim ** -0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.q_norm = nn.Identity()   # timm Attention's attribute set, so code written for timm ViTs runs
        self.k_norm = nn.Identity()
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def _qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        B, N, _ = x.shape
        return self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)

    def _out(self, o: torch.Tensor) -> torch.Tensor:
        B, _, N, _ = o.shape
        return self.proj_drop(self.proj(o.transpose(1, 2).reshape(B, N, -1)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self._qkv(x)
        o = F.scaled_dot_product_attention(q, k, v, dropout_p=self.attn_drop.p if self.training else 0.0)
        return self._out(o)

    def forward_with_attention(self, x: torch.Tensor, mask: torch.Tensor | None = None
                               ) -> tuple[torch.Tensor, torch.Tensor]:
        """(out, (N, heads, T, T) softmax map); ``mask``: bool (True = may attend) or additive, broadcastable."""
        q, k, v = self._qkv(x)
        attn = masked_softmax((q * self.scale) @ k.transpose(-2, -1), mask)
        return self._out(self.attn_drop(attn) @ v), attn


class DWConv(nn.Module):
    """Depth-wise 3×3 conv → GELU → BatchNorm → depth-wise 3×3 conv on a token grid."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(dim, dim, 3, padding=1, groups=dim)
        self.act = nn.GELU()
        self.bn = nn.BatchNorm2d(dim)
        self.conv2 = nn.Conv2d(dim, dim, 3, padding=1, groups=dim)

    def forward(self, x: torch.Tensor, hw: Grid) -> torch.Tensor:
        B, N, C = x.shape
        x = x.transpose(1, 2).reshape(B, C, hw[0], hw[1])
        x = self.conv2(self.bn(self.act(self.conv1(x))))
        return x.flatten(2).transpose(1, 2)


class DWMlp(nn.Module):
    """The MLP on v: fc1 (D → hidden), x + γ·DWConv(x), fc2 (hidden → D)."""

    def __init__(self, dim: int, hidden: int, drop: float = 0.0) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.dwconv = DWConv(hidden)
        self.gamma = nn.Parameter(torch.ones(hidden))
        self.fc2 = nn.Linear(hidden, dim)
        self.drop = nn.Dropout(drop)

    def forward(self, x: torch.Tensor, hw: Grid) -> torch.Tensor:
        x = self.fc1(x)
        x = x + self.drop(self.gamma * self.dwconv(x, hw))
        return self.drop(self.fc2(x))


class ChannelProcessing(nn.Module):
    """Efficient channel attention (FAN, Sec. 3.3): gate ⊙ LayerNorm(DWMlp(x)), no output projection.

    q = Linear(x), k = x, per head, softmax over tokens; k̄ = k averaged over a head's channels; gate =
    sigmoid(qᵀ k̄) · temperature (per head)."""

    def __init__(self, dim: int, num_heads: int = 8, qkv_bias: bool = True, mlp_ratio: float = 4.0,
                 attn_drop: float = 0.0, drop: float = 0.0) -> None:
        super().__init__()
        if dim % num_heads:
            raise RobustvitError(f"FAN width {dim} is not divisible by {num_heads} heads")
        self.num_heads = num_heads
        self.temperature = nn.Parameter(torch.ones(num_heads))
        self.q = nn.Linear(dim, dim, bias=qkv_bias)
        self.mlp_v = DWMlp(dim, int(dim * mlp_ratio), drop)
        self.norm_v = nn.LayerNorm(dim)
        self.attn_drop = nn.Dropout(attn_drop)

    def channel_gate(self, x: torch.Tensor) -> torch.Tensor:
        """(N, heads, D/heads) gate in (0, temperature)."""
        B, T, C = x.shape
        q = self.q(x).reshape(B, T, self.num_heads, -1).softmax(dim=1)
        k = x.reshape(B, T, self.num_heads, -1).softmax(dim=1).mean(-1)            # (B, T, heads)
        return torch.einsum("bthc,bth->bhc", q, k).sigmoid() * self.temperature[:, None]

    def forward(self, x: torch.Tensor, hw: Grid | None = None) -> torch.Tensor:
        B, T, C = x.shape
        gate = self.attn_drop(self.channel_gate(x)).reshape(B, 1, C)
        return gate * self.norm_v(self.mlp_v(x, _grid(T, hw)))


class FANBlock(nn.Module):
    """Pre-norm FAN block: token mixing then channel processing, each with LayerScale and drop-path."""

    def __init__(self, dim: int, num_heads: int, mlp_ratio: float = 4.0, qkv_bias: bool = True, drop: float = 0.0,
                 attn_drop: float = 0.0, drop_path: float = 0.0, eta: float = 1.0) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = TokenMixing(dim, num_heads, qkv_bias, attn_drop, drop)
        self.ls1 = LayerScale(dim, eta)
        self.drop_path1 = DropPath(drop_path) if drop_path > 0 else nn.Identity()
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = ChannelProcessing(dim, num_heads, qkv_bias, mlp_ratio, attn_drop, drop)
        self.ls2 = LayerScale(dim, eta)
        self.drop_path2 = DropPath(drop_path) if drop_path > 0 else nn.Identity()

    def forward(self, x: torch.Tensor, hw: Grid | None = None) -> torch.Tensor:
        x = x + self.drop_path1(self.ls1(self.attn(self.norm1(x))))
        return x + self.drop_path2(self.ls2(self.mlp(self.norm2(x), hw)))


class FAN(nn.Module):
    """FAN-ViT, or FAN-Hybrid with ``hybrid_depths``; the same ``drop_path_rate`` in every block, as NVlabs/FAN."""

    def __init__(self, img_size: int = 224, patch_size: int = 16, in_chans: int = 3, num_classes: int = 1000,
                 embed_dim: int = 384, depth: int = 12, num_heads: int = 8, mlp_ratio: float = 4.0,
                 qkv_bias: bool = True, drop_rate: float = 0.0, attn_drop_rate: float = 0.0,
                 drop_path_rate: float = 0.0, eta: float = 1.0, cls_attn_layers: int = 2, tokens_norm: bool = True,
                 hybrid_depths: tuple[int, int] | None = None, head_init_scale: float = 1.0) -> None:
        super().__init__()
        if isinstance(img_size, (tuple, list)):
            if img_size[0] != img_size[1]:
                raise RobustvitError(f"FAN is built for square images; got img_size={tuple(img_size)}")
            img_size = int(img_size[0])
        self.num_classes = num_classes
        self.num_features = self.embed_dim = embed_dim
        self.num_prefix_tokens = 0   # the CLS token joins only in the class-attention head
        if hybrid_depths is None:
            self.patch_embed: ConvPatchEmbed | HybridEmbed = ConvPatchEmbed(img_size, patch_size, in_chans, embed_dim)
        else:
            self.patch_embed = HybridEmbed(img_size, in_chans, embed_dim, tuple(hybrid_depths))
        self.pos_embed = PositionalEncodingFourier(hidden_dim=32, dim=embed_dim)
        self.pos_drop = nn.Dropout(drop_rate)
        self.blocks = nn.Sequential(*[
            FANBlock(embed_dim, num_heads, mlp_ratio, qkv_bias, drop_rate, attn_drop_rate, drop_path_rate, eta)
            for _ in range(depth)])
        self.norm = nn.Identity()
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        norm = partial(nn.LayerNorm, eps=1e-6)
        self.cls_attn_blocks = nn.ModuleList([
            ClassAttentionBlock(embed_dim, num_heads, mlp_ratio, qkv_bias=qkv_bias, proj_drop=drop_rate,
                                attn_drop=attn_drop_rate, norm_layer=norm, eta=eta, tokens_norm=tokens_norm)
            for _ in range(cls_attn_layers)])
        self.head_norm = norm(embed_dim)
        self.head_drop = nn.Dropout(drop_rate)
        self.head = nn.Linear(embed_dim, num_classes) if num_classes > 0 else nn.Identity()
        self._init_weights(head_init_scale)

    def _init_weights(self, head_init_scale: float) -> None:
        trunc_normal_(self.cls_token, std=0.02)
        for name, m in self.named_modules():
            if name.startswith("patch_embed"):
                continue
            if isinstance(m, nn.Linear):
                trunc_normal_(m.weight, std=0.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, DWConv):
                for conv in (m.conv1, m.conv2):   # fan-out init: N(0, 2 / (k·k·out/groups))
                    nn.init.normal_(conv.weight, 0.0, math.sqrt(2.0 / 9.0))
                    nn.init.zeros_(conv.bias)
        if isinstance(self.head, nn.Linear):
            with torch.no_grad():
                self.head.weight.mul_(head_init_scale)
                self.head.bias.mul_(head_init_scale)

    @torch.jit.ignore
    def no_weight_decay(self) -> set[str]:
        """Exact names without weight decay, as NVlabs/FAN (``pos_embed`` matches no parameter)."""
        return {"pos_embed", "cls_token"}

    @torch.jit.ignore
    def weight_decay_vectors(self) -> set[str]:
        """1-D parameters decayed all the same: the temperatures, (heads, 1, 1) in NVlabs/FAN, so decayed there."""
        return {f"blocks.{i}.mlp.temperature" for i in range(len(self.blocks))}

    def get_classifier(self) -> nn.Module:
        return self.head

    def reset_classifier(self, num_classes: int, global_pool: str | None = None) -> None:
        self.num_classes = num_classes
        self.head = nn.Linear(self.num_features, num_classes) if num_classes > 0 else nn.Identity()

    def _pos_embed(self, x: torch.Tensor, hw: Grid | None = None) -> torch.Tensor:
        """Add the Fourier position features (computed for the token grid; nothing to interpolate)."""
        h, w = _grid(x.shape[1], hw)
        pos = self.pos_embed(1, h, w).to(x.dtype).flatten(2).transpose(1, 2)
        return self.pos_drop(x + pos)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """(N, P, D) patch tokens after the last FAN block (before class attention)."""
        x, hw = self.patch_embed.forward_grid(x)
        x = self._pos_embed(x, hw)
        for blk in self.blocks:
            x = blk(x, hw)
        return self.norm(x)

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        """Class-attention pooling of (N, P, D) tokens (CaiT, arXiv:2103.17239), LayerNorm, classifier."""
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        for blk in self.cls_attn_blocks:
            x = blk(x)
        x = self.head_drop(self.head_norm(x)[:, 0])
        return x if pre_logits else self.head(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))


def _imagenet_cfg(num_classes: int, img_size: int) -> dict[str, Any]:
    return {"num_classes": num_classes, "input_size": (3, img_size, img_size), "mean": IMAGENET_DEFAULT_MEAN,
            "std": IMAGENET_DEFAULT_STD, "crop_pct": 1.0, "interpolation": "bicubic",
            "first_conv": "patch_embed.proj.0.0", "classifier": "head"}


def _fan(name: str, pretrained: bool, defaults: dict[str, Any], kwargs: dict[str, Any], cifar: bool = False) -> FAN:
    if pretrained:
        raise RuntimeError(f"{name} has no pretrained weights in timm's hub; load converted NVlabs/FAN weights "
                           "with checkpoint=FILE or train one with `robustvit train`")
    args = {**defaults, **_drop_timm_cfg(kwargs)}
    if cifar:
        args = {"img_size": 32, "patch_size": 4, "num_classes": 10, **args}
    model = FAN(**args)
    n, size = args.get("num_classes", 1000), args.get("img_size", 224)
    first = "patch_embed.backbone.0.0" if args.get("hybrid_depths") else "patch_embed.proj.0.0"
    model.pretrained_cfg = (_cifar_cfg(num_classes=n, input_size=(3, size, size), first_conv=first) if cifar
                            else {**_imagenet_cfg(n, size), "first_conv": first})
    return model


@register_model
def fan_tiny_12_p16_224(pretrained: bool = False, **kwargs: Any) -> FAN:
    """FAN-T-ViT: 12 blocks, width 192, 4 heads (7.3 M params)."""
    return _fan("fan_tiny_12_p16_224", pretrained, {"embed_dim": 192, "depth": 12, "num_heads": 4}, kwargs)


@register_model
def fan_small_12_p16_224(pretrained: bool = False, **kwargs: Any) -> FAN:
    """FAN-S-ViT: 12 blocks, width 384, 8 heads (28.0 M params)."""
    return _fan("fan_small_12_p16_224", pretrained, {"embed_dim": 384, "depth": 12, "num_heads": 8}, kwargs)


@register_model
def fan_base_18_p16_224(pretrained: bool = False, **kwargs: Any) -> FAN:
    """FAN-B-ViT: 18 blocks, width 448, 8 heads (54.0 M params)."""
    return _fan("fan_base_18_p16_224", pretrained, {"embed_dim": 448, "depth": 18, "num_heads": 8}, kwargs)


@register_model
def fan_large_24_p16_224(pretrained: bool = False, **kwargs: Any) -> FAN:
    """FAN-L-ViT: 24 blocks, width 480, 10 heads (80.5 M params)."""
    return _fan("fan_large_24_p16_224", pretrained, {"embed_dim": 480, "depth": 24, "num_heads": 10}, kwargs)


@register_model
def fan_tiny_8_p4_hybrid(pretrained: bool = False, **kwargs: Any) -> FAN:
    """FAN-T-Hybrid: ConvNeXt stages (3, 3) at 128/256, then 8 FAN blocks, width 192, 8 heads (7.4 M)."""
    return _fan("fan_tiny_8_p4_hybrid", pretrained,
                {"embed_dim": 192, "depth": 8, "num_heads": 8, "hybrid_depths": (3, 3)}, kwargs)


@register_model
def fan_small_12_p4_hybrid(pretrained: bool = False, **kwargs: Any) -> FAN:
    """FAN-S-Hybrid: ConvNeXt stages (3, 3), 10 FAN blocks (NVlabs's name says 12), width 384, 8 heads (26.3 M)."""
    return _fan("fan_small_12_p4_hybrid", pretrained,
                {"embed_dim": 384, "depth": 10, "num_heads": 8, "hybrid_depths": (3, 3)}, kwargs)


@register_model
def fan_base_16_p4_hybrid(pretrained: bool = False, **kwargs: Any) -> FAN:
    """FAN-B-Hybrid: ConvNeXt stages (3, 3), then 16 FAN blocks, width 448, 8 heads (50.4 M)."""
    return _fan("fan_base_16_p4_hybrid", pretrained,
                {"embed_dim": 448, "depth": 16, "num_heads": 8, "hybrid_depths": (3, 3)}, kwargs)


@register_model
def fan_large_16_p4_hybrid(pretrained: bool = False, **kwargs: Any) -> FAN:
    """FAN-L-Hybrid: ConvNeXt (3, 5), 22 FAN blocks (the name says 16), width 480, 10 heads, head × 0.001 (76.8 M)."""
    return _fan("fan_large_16_p4_hybrid", pretrained,
                {"embed_dim": 480, "depth": 22, "num_heads": 10, "hybrid_depths": (3, 5), "head_init_scale": 1e-3},
                kwargs)


@register_model
def fan_cifar_micro(pretrained: bool = False, **kwargs: Any) -> FAN:
    """32×32 FAN matching ``vit_cifar_micro``'s size: width 128, 4 blocks, 4 heads, MLP ratio 2, 4×4 patches."""
    return _fan("fan_cifar_micro", pretrained, {"embed_dim": 128, "depth": 4, "num_heads": 4, "mlp_ratio": 2.0},
                kwargs, cifar=True)


@register_model
def fan_cifar_tiny(pretrained: bool = False, **kwargs: Any) -> FAN:
    """32×32 FAN-T width (192, 4 heads), 6 blocks, MLP ratio 2, 4×4 patches (two stride-2 convs)."""
    return _fan("fan_cifar_tiny", pretrained, {"embed_dim": 192, "depth": 6, "num_heads": 4, "mlp_ratio": 2.0},
                kwargs, cifar=True)


@register_model
def fan_cifar_small(pretrained: bool = False, **kwargs: Any) -> FAN:
    """32×32 FAN-S width (384, 8 heads), 8 blocks, MLP ratio 4, 4×4 patches."""
    return _fan("fan_cifar_small", pretrained, {"embed_dim": 384, "depth": 8, "num_heads": 8}, kwargs, cifar=True)
