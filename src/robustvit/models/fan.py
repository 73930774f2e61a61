"""FAN — Fully Attentional Networks (Zhou et al., "Understanding the Robustness in Vision Transformers",
ICML 2022, arXiv:2204.12451), registered in timm's registry.

A FAN block is a pre-norm ViT block whose MLP is replaced by *efficient channel attention*
(``ChannelProcessing``): channels are re-weighted by a gate computed from the tokens' softmax-normalised
queries against a channel-averaged token prototype, and the values pass through an MLP with a depth-wise
3×3 convolution branch. Tokens come from a convolutional patch embedding (3×3 stride-2 convs) plus XCiT-style
Fourier position features; the CLS token joins only after the FAN blocks, in two CaiT class-attention blocks.

=========================  =====  ====  =====  ======================
name                       depth  dim   heads  params (paper → here)
=========================  =====  ====  =====  ======================
``fan_tiny_12_p16_224``    12     192   4      7.3 M
``fan_small_12_p16_224``   12     384   8      28.0 M
``fan_base_18_p16_224``    18     448   8      54.0 M
``fan_large_24_p16_224``   24     480   10     80.5 M
=========================  =====  ====  =====  ======================

Hybrids (``fan_{tiny_8,small_12,base_16,large_16}_p4_hybrid``) replace the patch embedding by two ConvNeXt
stages (dims 128/256, stride 8) and a 2×2 projection. ``fan_cifar_tiny``/``fan_cifar_small`` are 32-px
variants with 4×4 patches (two stride-2 convs) for CIFAR-scale work.

The token-mixing attention exposes ``forward_with_attention(x, mask=None) -> (out, attn)`` with the
(N, heads, T, T) softmax map, so the ViT probe and attention analyses work on FAN; its ordinary forward uses
fused scaled-dot-product attention.

>>> m = timm.create_model("fan_cifar_tiny", num_classes=10)
>>> m(torch.rand(2, 3, 32, 32)).shape
torch.Size([2, 10])
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from timm.layers import DropPath, trunc_normal_
from timm.models import register_model
from torch import nn

from robustvit.models.cifar import CIFAR_MEAN, CIFAR_STD, _drop_timm_cfg

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def _cfg(**kw: Any) -> dict[str, Any]:
    return {"num_classes": 1000, "input_size": (3, 224, 224), "mean": IMAGENET_MEAN, "std": IMAGENET_STD,
            "crop_pct": 0.95, "interpolation": "bicubic", "first_conv": "patch_embed.proj.0.0",
            "classifier": "head", **kw}


class ConvPatchEmbed(nn.Module):
    """Image → tokens by ``log2(patch)`` 3×3 stride-2 convolutions (BN after each, GELU between);
    channels double up to ``dim``: D/8, D/4, D/2, D for patch 16."""

    def __init__(self, patch_size: int = 16, in_chans: int = 3, dim: int = 384) -> None:
        super().__init__()
        n = int(math.log2(patch_size))
        if 2 ** n != patch_size or n < 1:
            raise ValueError(f"ConvPatchEmbed needs a power-of-two patch size, got {patch_size}")
        widths = [dim // 2 ** (n - 1 - i) for i in range(n)]
        layers: list[nn.Module] = []
        cin = in_chans
        for i, w in enumerate(widths):
            layers.append(nn.Sequential(nn.Conv2d(cin, w, 3, 2, 1, bias=False), nn.BatchNorm2d(w)))
            if i < n - 1:
                layers.append(nn.GELU())
            cin = w
        self.proj = nn.Sequential(*layers)
        self.patch_size = (patch_size, patch_size)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, tuple[int, int]]:
        x = self.proj(x)
        return x.flatten(2).transpose(1, 2), (x.shape[2], x.shape[3])


class HybridEmbed(nn.Module):
    """Two ConvNeXt stages (stride 8, dims 128/256; timm's implementation) and a 2×2 projection to ``dim``."""

    def __init__(self, dim: int, in_chans: int = 3) -> None:
        super().__init__()
        from timm.layers import LayerNorm2d
        from timm.models.convnext import ConvNeXtStage

        self.backbone = nn.Sequential(nn.Conv2d(in_chans, 128, 4, 4), LayerNorm2d(128),
                                      ConvNeXtStage(128, 128, stride=1, depth=3, norm_layer=LayerNorm2d),
                                      ConvNeXtStage(128, 256, stride=2, depth=3, norm_layer=LayerNorm2d))
        self.proj = nn.Conv2d(256, dim, 2, 2)
        self.patch_size = (16, 16)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, tuple[int, int]]:
        x = self.proj(self.backbone(x))
        return x.flatten(2).transpose(1, 2), (x.shape[2], x.shape[3])


class FourierPositions(nn.Module):
    """XCiT's positional encoding: sin/cos features (``hidden`` per axis, temperature 10000) of the
    normalised grid coordinates scaled by 2π, projected to ``dim`` by a 1×1 conv (any grid size)."""

    def __init__(self, dim: int, hidden: int = 32, temperature: float = 10000.0) -> None:
        super().__init__()
        self.proj = nn.Conv2d(2 * hidden, dim, 1)
        self.hidden, self.temperature = hidden, temperature

    def forward(self, b: int, h: int, w: int) -> torch.Tensor:
        dev, eps, scale = self.proj.weight.device, 1e-6, 2 * math.pi
        y = torch.arange(1, h + 1, device=dev, dtype=torch.float32)[:, None].expand(h, w) / (h + eps) * scale
        x = torch.arange(1, w + 1, device=dev, dtype=torch.float32)[None, :].expand(h, w) / (w + eps) * scale
        dim_t = torch.arange(self.hidden, device=dev, dtype=torch.float32)
        dim_t = self.temperature ** (2 * torch.div(dim_t, 2, rounding_mode="floor") / self.hidden)
        pos_x, pos_y = x[..., None] / dim_t, y[..., None] / dim_t
        pos_x = torch.stack([pos_x[..., 0::2].sin(), pos_x[..., 1::2].cos()], -1).flatten(2)
        pos_y = torch.stack([pos_y[..., 0::2].sin(), pos_y[..., 1::2].cos()], -1).flatten(2)
        pos = torch.cat([pos_y, pos_x], -1).permute(2, 0, 1)[None]
        return self.proj(pos.to(self.proj.weight.dtype)).expand(b, -1, -1, -1)


class TokenMixing(nn.Module):
    """Multi-head self-attention over tokens (q: D→D, kv: D→2D, output projection)."""

    def __init__(self, dim: int, num_heads: int = 8, qkv_bias: bool = True, attn_drop: float = 0.0,
                 proj_drop: float = 0.0) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.scale = (dim // num_heads) ** -0.5
        self.q = nn.Linear(dim, dim, bias=qkv_bias)
        self.kv = nn.Linear(dim, 2 * dim, bias=qkv_bias)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def _qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b, n, c = x.shape
        q = self.q(x).reshape(b, n, self.num_heads, -1).transpose(1, 2)
        k, v = self.kv(x).reshape(b, n, 2, self.num_heads, -1).permute(2, 0, 3, 1, 4).unbind(0)
        return q, k, v

    def _out(self, o: torch.Tensor) -> torch.Tensor:
        return self.proj_drop(self.proj(o.transpose(1, 2).flatten(2)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self._qkv(x)
        o = F.scaled_dot_product_attention(q, k, v, dropout_p=self.attn_drop.p if self.training else 0.0)
        return self._out(o)

    def forward_with_attention(self, x: torch.Tensor, mask: torch.Tensor | None = None
                               ) -> tuple[torch.Tensor, torch.Tensor]:
        """The same attention with an explicit softmax map (N, heads, T, T); ``mask``: bool (True = may
        attend) or additive float, broadcastable to the map."""
        q, k, v = self._qkv(x)
        logits = (q * self.scale) @ k.transpose(-2, -1)
        if mask is not None:
            mask = mask.to(logits.device)
            logits = logits.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else logits + mask
        a = logits.softmax(-1)
        return self._out(self.attn_drop(a) @ v), a


class DWConvMlp(nn.Module):
    """fc1 (D → hD), plus a depth-wise 3×3 conv branch over the token grid scaled by γ, GELU, fc2."""

    def __init__(self, dim: int, hidden: int, drop: float = 0.0) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.dwconv = nn.Conv2d(hidden, hidden, 3, 1, 1, groups=hidden)
        self.gamma = nn.Parameter(torch.ones(hidden))
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)
        self.drop = nn.Dropout(drop)

    def forward(self, x: torch.Tensor, h: int, w: int) -> torch.Tensor:
        x = self.fc1(x)
        b, n, c = x.shape
        conv = self.dwconv(x.transpose(1, 2).reshape(b, c, h, w)).flatten(2).transpose(1, 2)
        x = self.drop(self.act(x + self.gamma * conv))
        return self.drop(self.fc2(x))


class ChannelProcessing(nn.Module):
    """Efficient channel attention (FAN): gate = sigmoid(softmaxₜ(q)ᵀ · mean_c softmaxₜ(k)) · τ per head
    and channel, applied to the values after an MLP with a depth-wise conv branch and a LayerNorm. Keys and
    values are the input itself; there is no output projection."""

    def __init__(self, dim: int, num_heads: int = 8, mlp_ratio: float = 4.0, qkv_bias: bool = True,
                 attn_drop: float = 0.0, drop: float = 0.0) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.temperature = nn.Parameter(torch.ones(num_heads, 1, 1))
        self.q = nn.Linear(dim, dim, bias=qkv_bias)
        self.mlp_v = DWConvMlp(dim, int(dim * mlp_ratio), drop)
        self.norm_v = nn.LayerNorm(dim, eps=1e-5)
        self.attn_drop = nn.Dropout(attn_drop)

    def forward(self, x: torch.Tensor, h: int, w: int) -> torch.Tensor:
        b, n, c = x.shape
        heads = lambda t: t.reshape(b, n, self.num_heads, c // self.num_heads).transpose(1, 2)  # noqa: E731
        q, k = heads(self.q(x)), heads(x)
        prototype = k.softmax(-2).mean(-1, keepdim=True)                      # (B, heads, N, 1)
        gate = torch.sigmoid(q.softmax(-2).transpose(-1, -2) @ prototype)       # (B, heads, c, 1)
        gate = self.attn_drop(gate * self.temperature)
        v = heads(self.norm_v(self.mlp_v(x, h, w)))                             # (B, heads, N, c)
        return (v * gate.transpose(-1, -2)).transpose(1, 2).reshape(b, n, c)


class FANBlock(nn.Module):
    """x += drop_path(γ₁ · TokenMixing(LN x)); x += drop_path(γ₂ · ChannelProcessing(LN x))."""

    def __init__(self, dim: int, num_heads: int, mlp_ratio: float = 4.0, qkv_bias: bool = True, drop: float = 0.0,
                 attn_drop: float = 0.0, drop_path: float = 0.0, eta: float = 1.0) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = TokenMixing(dim, num_heads, qkv_bias, attn_drop, drop)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = ChannelProcessing(dim, num_heads, mlp_ratio, qkv_bias, attn_drop, drop)
        self.gamma1 = nn.Parameter(eta * torch.ones(dim))
        self.gamma2 = nn.Parameter(eta * torch.ones(dim))
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()
        self.grid: tuple[int, int] = (0, 0)   # set by the model before the blocks run

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop_path(self.gamma1 * self.attn(self.norm1(x)))
        return x + self.drop_path(self.gamma2 * self.mlp(self.norm2(x), *self.grid))


class ClassAttention(nn.Module):
    """CaiT class attention: only the CLS token queries all tokens."""

    def __init__(self, dim: int, num_heads: int, qkv_bias: bool = True) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4).unbind(0)
        o = F.scaled_dot_product_attention(q[:, :, :1], k, v)
        return torch.cat([self.proj(o.transpose(1, 2).flatten(2)), x[:, 1:]], 1)


class ClassAttentionBlock(nn.Module):
    """Class-attention block (CaiT, arXiv:2103.17239) with LayerScale; the MLP acts on the CLS token only,
    the patch tokens are layer-normalised (XCiT's ``tokens_norm``)."""

    def __init__(self, dim: int, num_heads: int, mlp_ratio: float = 4.0, qkv_bias: bool = True, eta: float = 1.0) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = ClassAttention(dim, num_heads, qkv_bias)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        hidden = int(dim * mlp_ratio)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))
        self.gamma1 = nn.Parameter(eta * torch.ones(dim))
        self.gamma2 = nn.Parameter(eta * torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.gamma1 * self.attn(self.norm1(x))
        x = self.norm2(x)
        cls = x[:, :1] + self.gamma2 * self.mlp(x[:, :1])
        return torch.cat([cls, x[:, 1:]], 1)


class FAN(nn.Module):
    """Fully Attentional Network (ViT variant; ``hybrid=True``: ConvNeXt-stage stem)."""

    def __init__(self, img_size: int = 224, patch_size: int = 16, in_chans: int = 3, num_classes: int = 1000,
                 embed_dim: int = 384, depth: int = 12, num_heads: int = 8, mlp_ratio: float = 4.0,
                 qkv_bias: bool = True, drop_rate: float = 0.0, attn_drop_rate: float = 0.0,
                 drop_path_rate: float = 0.0, eta: float = 1.0, cls_attn_layers: int = 2, hybrid: bool = False,
                 **_: Any) -> None:
        super().__init__()
        self.num_classes, self.num_features, self.embed_dim = num_classes, embed_dim, embed_dim
        self.patch_embed = HybridEmbed(embed_dim, in_chans) if hybrid else ConvPatchEmbed(patch_size, in_chans, embed_dim)
        self.patch_embed.grid_size = (img_size // self.patch_embed.patch_size[0],) * 2
        self.pos_embed = FourierPositions(embed_dim)
        self.pos_drop = nn.Dropout(drop_rate)
        self.blocks = nn.Sequential(*[FANBlock(embed_dim, num_heads, mlp_ratio, qkv_bias, drop_rate, attn_drop_rate,
                                               drop_path_rate, eta) for _ in range(depth)])
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.cls_attn_blocks = nn.ModuleList([ClassAttentionBlock(embed_dim, num_heads, mlp_ratio, qkv_bias, eta)
                                              for _ in range(cls_attn_layers)])
        self.norm = nn.LayerNorm(embed_dim, eps=1e-6)
        self.head_drop = nn.Dropout(drop_rate)
        self.head = nn.Linear(embed_dim, num_classes) if num_classes > 0 else nn.Identity()
        trunc_normal_(self.cls_token, std=0.02)
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(m: nn.Module) -> None:
        if isinstance(m, nn.Linear):
            trunc_normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)

    @torch.jit.ignore
    def no_weight_decay(self) -> set[str]:
        return {"cls_token"} | {n for n, _ in self.named_parameters() if n.endswith("temperature")}

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        """Patch tokens with positions (N, H·W, D); sets the token grid on the blocks."""
        tokens, (h, w) = self.patch_embed(x)
        for blk in self.blocks:
            blk.grid = (h, w)
        pos = self.pos_embed(x.shape[0], h, w).flatten(2).transpose(1, 2)
        return self.pos_drop(tokens + pos.to(tokens.dtype))

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        return self.finish(self.blocks(self.embed(x)))

    def finish(self, x: torch.Tensor) -> torch.Tensor:
        """After the FAN blocks: prepend CLS, run the class-attention blocks, final norm."""
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], 1)
        for blk in self.cls_attn_blocks:
            x = blk(x)
        return self.norm(x)

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        x = self.head_drop(x[:, 0])
        return x if pre_logits else self.head(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))

    def get_classifier(self) -> nn.Module:
        return self.head

    def reset_classifier(self, num_classes: int, global_pool: str | None = None) -> None:
        self.num_classes = num_classes
        self.head = nn.Linear(self.embed_dim, num_classes) if num_classes > 0 else nn.Identity()


def _fan(pretrained: bool, defaults: dict[str, Any], cfg: dict[str, Any], **kwargs: Any) -> FAN:
    if pretrained:
        raise RuntimeError("robustvit's FAN has no downloadable weights; load NVlabs/FAN weights converted to this "
                           "layout with weights=FILE, or train one with `robustvit train`")
    args = {**defaults, **_drop_timm_cfg(kwargs)}
    model = FAN(**args)
    size = args.get("img_size", 224)
    model.pretrained_cfg = {**cfg, "num_classes": args.get("num_classes", cfg["num_classes"]),
                            "input_size": (3, size, size)}
    return model


_IMAGENET = _cfg()
_CIFAR = _cfg(num_classes=10, input_size=(3, 32, 32), mean=CIFAR_MEAN, std=CIFAR_STD, crop_pct=1.0,
              interpolation="bilinear")
_HYBRID = _cfg(first_conv="patch_embed.backbone.0")

#: name → (architecture keywords, default cfg); each is registered with timm below.
VARIANTS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "fan_tiny_12_p16_224": ({"depth": 12, "embed_dim": 192, "num_heads": 4}, _IMAGENET),
    "fan_small_12_p16_224": ({"depth": 12, "embed_dim": 384, "num_heads": 8}, _IMAGENET),
    "fan_base_18_p16_224": ({"depth": 18, "embed_dim": 448, "num_heads": 8}, _IMAGENET),
    "fan_large_24_p16_224": ({"depth": 24, "embed_dim": 480, "num_heads": 10}, _IMAGENET),
    "fan_tiny_8_p4_hybrid": ({"depth": 8, "embed_dim": 192, "num_heads": 8, "hybrid": True}, _HYBRID),
    "fan_small_12_p4_hybrid": ({"depth": 10, "embed_dim": 384, "num_heads": 8, "hybrid": True}, _HYBRID),
    "fan_base_16_p4_hybrid": ({"depth": 16, "embed_dim": 448, "num_heads": 8, "hybrid": True}, _HYBRID),
    "fan_large_16_p4_hybrid": ({"depth": 22, "embed_dim": 480, "num_heads": 10, "hybrid": True}, _HYBRID),
    "fan_cifar_tiny": ({"img_size": 32, "patch_size": 4, "num_classes": 10, "depth": 6, "embed_dim": 192,
                        "num_heads": 4, "mlp_ratio": 2.0}, _CIFAR),
    "fan_cifar_small": ({"img_size": 32, "patch_size": 4, "num_classes": 10, "depth": 8, "embed_dim": 384,
                         "num_heads": 8}, _CIFAR),
}


def _entry(name: str) -> Any:
    defaults, cfg = VARIANTS[name]

    def create(pretrained: bool = False, **kwargs: Any) -> FAN:
        return _fan(pretrained, defaults, cfg, **kwargs)

    create.__name__ = create.__qualname__ = name
    create.__doc__ = f"FAN ({', '.join(f'{k}={v}' for k, v in defaults.items())}); Zhou et al. 2022, arXiv:2204.12451."
    create.__module__ = __name__
    return register_model(create)


for _name in VARIANTS:
    globals()[_name] = _entry(_name)
