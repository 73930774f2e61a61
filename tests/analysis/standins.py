"""A FAN-like stand-in model (token mixer with ``forward_with_attention``) for probe and analysis tests."""

import torch
from torch import nn


class StandInAttention(nn.Module):
    """A FAN-like token mixer exposing ``forward_with_attention(x, mask=None) -> (out, attn)``."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.num_heads, self.qkv, self.proj = heads, nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward_with_attention(self, x, mask=None):
        B, N, C = x.shape
        q, k, v = self.qkv(x).reshape(B, N, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        logits = q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5
        if mask is not None:
            logits = logits.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else logits + mask
        a = logits.softmax(-1)
        return self.proj((a @ v).transpose(1, 2).reshape(B, N, C)), a

    def forward(self, x):
        return self.forward_with_attention(x)[0]


class StandInBlock(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.norm1, self.attn = nn.LayerNorm(dim), StandInAttention(dim, heads)
        self.norm2, self.mlp = nn.LayerNorm(dim), nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
        self.gamma1 = nn.Parameter(torch.ones(dim))
        self.gamma2 = nn.Parameter(torch.ones(dim))

    def forward(self, x, H=None, W=None):
        x = x + self.gamma1 * self.attn(self.norm1(x))
        return x + self.gamma2 * self.mlp(self.norm2(x))


class StandInPatchEmbed(nn.Module):
    def __init__(self, dim: int, patch: int) -> None:
        super().__init__()
        self.patch_size, self.proj = (patch, patch), nn.Conv2d(3, dim, patch, patch)

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2)


class StandInFAN(nn.Module):
    """No CLS in the blocks, no ``_pos_embed``: what the ViT probe cannot run, the block probe can."""

    def __init__(self, dim: int = 32, depth: int = 3, heads: int = 2, patch: int = 4, num_classes: int = 5) -> None:
        super().__init__()
        self.patch_embed = StandInPatchEmbed(dim, patch)
        self.blocks = nn.ModuleList([StandInBlock(dim, heads) for _ in range(depth)])
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x):
        h = self.patch_embed(x)
        for b in self.blocks:
            h = b(h, 4, 4)
        return self.head(h.mean(1))


def stand_in_fan():
    from robustvit.models import ModelSpec, Normalized

    torch.manual_seed(0)
    spec = ModelSpec(architecture="standin_fan", num_classes=5, input_size=(3, 16, 16), family="fan", patch_size=4)
    return Normalized(StandInFAN(), spec).eval()


