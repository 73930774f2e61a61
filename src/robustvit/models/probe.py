"""The ViT probe: per-block tokens and attention maps, and forwards with parts removed or masked.

Supports timm ``VisionTransformer`` models (ViT, DeiT, DeiT-III, robustvit's ``vit_cifar_*``) built from
pre-norm blocks (``norm1 → attn → ls1``, ``norm2 → mlp → ls2``). The probe runs the blocks itself with an
explicit (non-fused) attention, so the softmax maps exist only while probing and the model is untouched.

Used by the analyses of Bhojanapalli et al. 2021 (arXiv:2103.14586) — layer correlation, lesion study
(drop a block / its attention / its MLP), restricted attention (masks) — and by attention distance
(Dosovitskiy et al., arXiv:2010.11929) and attention stability (AFAT).

>>> probe = ViTProbe(create_model("vit_cifar_tiny"))
>>> out = probe.run(torch.rand(2, 3, 32, 32), attentions=True)
>>> len(out.tokens), out.attentions[0].shape    # per block: (N, heads, T, T)
(6, torch.Size([2, 3, 65, 65]))
>>> probe.run(x, remove={0: "attn", 3: "block"}).logits   # lesion
>>> probe.run(x, attn_mask=mask).logits                    # (T, T) bool, True = may attend
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from robustvit.errors import RobustvitError
from robustvit.models.wrapper import Normalized

SUPPORTED = "timm VisionTransformer models (vit_*, deit_*, deit3_*, vit_cifar_*)"
REMOVE_MODES = ("block", "attn", "mlp")


@dataclass
class ProbeOutput:
    logits: torch.Tensor
    tokens: list[torch.Tensor] = field(default_factory=list)       # per block: (N, T, D) block outputs
    attentions: list[torch.Tensor] = field(default_factory=list)   # per block: (N, heads, T, T)


class ViTProbe:
    """Run a ViT block by block. ``model``: a ``Normalized`` wrapper or a bare timm ViT (then inputs
    are passed to it as they are)."""

    def __init__(self, model: nn.Module) -> None:
        self.wrapper = model if isinstance(model, Normalized) else None
        self.net = model.net if isinstance(model, Normalized) else model
        net = self.net
        blocks = getattr(net, "blocks", None)
        ok = (hasattr(net, "patch_embed") and hasattr(net, "_pos_embed") and isinstance(blocks, nn.Sequential)
              and len(blocks) > 0 and all(hasattr(b, a) for b in blocks for a in ("norm1", "attn", "norm2", "mlp"))
              and all(hasattr(b.attn, "qkv") for b in blocks))
        if not ok:
            raise RobustvitError(f"the ViT probe does not support {type(net).__name__}; it supports {SUPPORTED}")
        self.blocks: nn.Sequential = blocks
        self.num_blocks = len(blocks)
        self.num_heads = int(blocks[0].attn.num_heads)
        self.num_prefix_tokens = int(getattr(net, "num_prefix_tokens", 1))
        grid = getattr(net.patch_embed, "grid_size", None)
        self.grid_size = tuple(int(g) for g in grid) if grid is not None else None
        ps = getattr(net.patch_embed, "patch_size", None)
        self.patch_size = int(ps[0] if isinstance(ps, (tuple, list)) else ps) if ps is not None else None

    @property
    def num_tokens(self) -> int:
        assert self.grid_size is not None
        return self.num_prefix_tokens + self.grid_size[0] * self.grid_size[1]

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise (if wrapped), patch-embed, add positions/prefix tokens: (N, T, D)."""
        net = self.net
        if self.wrapper is not None:
            x = (x - self.wrapper.mean.to(x.dtype)) / self.wrapper.std.to(x.dtype)
        h = net.patch_embed(x)
        h = net._pos_embed(h)
        h = net.patch_drop(h) if hasattr(net, "patch_drop") else h
        return net.norm_pre(h) if hasattr(net, "norm_pre") else h

    def head(self, h: torch.Tensor) -> torch.Tensor:
        return self.net.forward_head(self.net.norm(h))

    def run(self, x: torch.Tensor, *, tokens: bool = True, attentions: bool = False,
            remove: dict[int, str] | None = None,
            attn_mask: torch.Tensor | dict[int, torch.Tensor] | None = None) -> ProbeOutput:
        """Forward ``x`` block by block.

        ``remove``: {block index: "block" | "attn" | "mlp"} — the removed part is skipped and the residual
        passes through. ``attn_mask``: bool (T, T) / (N, heads, T, T) (True = may attend) or an additive
        float mask, for every block, or a dict {block index: mask} for some blocks.
        """
        remove = dict(remove or {})
        for i, mode in remove.items():
            if not 0 <= i < self.num_blocks or mode not in REMOVE_MODES:
                raise RobustvitError(f"remove={{{i}: {mode!r}}} is invalid; blocks are 0..{self.num_blocks - 1} "
                                     f"and modes {', '.join(REMOVE_MODES)}")
        out = ProbeOutput(logits=torch.empty(0))
        h = self.embed(x)
        for i, blk in enumerate(self.blocks):
            mode = remove.get(i)
            mask = attn_mask.get(i) if isinstance(attn_mask, dict) else attn_mask
            if mode != "block":
                if mode != "attn":
                    a_out, a_map = self._attention(blk.attn, blk.norm1(h), mask, attentions)
                    h = h + blk.drop_path1(blk.ls1(a_out))
                    if attentions:
                        out.attentions.append(a_map)
                elif attentions:
                    out.attentions.append(torch.zeros(h.shape[0], self.num_heads, h.shape[1], h.shape[1], device=h.device))
                if mode != "mlp":
                    h = h + blk.drop_path2(blk.ls2(blk.mlp(blk.norm2(h))))
            elif attentions:
                out.attentions.append(torch.zeros(h.shape[0], self.num_heads, h.shape[1], h.shape[1], device=h.device))
            if tokens:
                out.tokens.append(h)
        out.logits = self.head(h)
        return out

    @staticmethod
    def _attention(attn: nn.Module, x: torch.Tensor, mask: torch.Tensor | None,
                   keep_map: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """timm's attention with an explicit softmax map (same maths as its non-fused path)."""
        B, N, _ = x.shape
        heads = attn.num_heads
        gate = attn.gate(x).sigmoid() if getattr(attn, "gate", None) is not None else None
        qkv = attn.qkv(x).reshape(B, N, 3, heads, -1).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        q, k = attn.q_norm(q), attn.k_norm(k)
        logits = (q * attn.scale) @ k.transpose(-2, -1)
        if mask is not None:
            mask = mask.to(logits.device)
            if mask.dtype == torch.bool:
                logits = logits.masked_fill(~mask, float("-inf"))
            else:
                logits = logits + mask.to(logits.dtype)
        a = logits.softmax(dim=-1)
        a = attn.attn_drop(a)
        o = (a @ v).transpose(1, 2).reshape(B, N, -1)
        o = attn.norm(o) if hasattr(attn, "norm") else o
        if gate is not None:
            o = o * gate
        o = attn.proj_drop(attn.proj(o))
        return o, (a if keep_map else None)

    def patch_positions(self) -> torch.Tensor:
        """(P, 2) centre of each patch in pixels (row, col), in token order (prefix tokens excluded)."""
        assert self.grid_size is not None and self.patch_size is not None
        gh, gw = self.grid_size
        r, c = torch.meshgrid(torch.arange(gh), torch.arange(gw), indexing="ij")
        return (torch.stack([r.flatten(), c.flatten()], 1).float() + 0.5) * self.patch_size


def is_probeable(model: nn.Module) -> bool:
    try:
        ViTProbe(model)
        return True
    except RobustvitError:
        return False
