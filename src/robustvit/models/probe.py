"""The ViT probe: per-block tokens and attention maps, and forwards with parts removed or masked.

``ViTProbe`` supports timm ``VisionTransformer`` models (ViT, DeiT, DeiT-III, robustvit's ``vit_cifar_*``)
built from pre-norm blocks (``norm1 → attn → ls1``, ``norm2 → mlp → ls2``); an attention module may instead
expose ``forward_with_attention(x, mask=None) -> (out, attn)`` (FAN's token mixing). The probe runs the
blocks itself with an explicit (non-fused) attention, so the softmax maps exist only while probing and the
model is untouched; ``run(..., start=(i, h))`` resumes from the input ``h`` of block ``i`` (reuse of work).

``BlockProbe`` covers the other families through temporary hooks on the model's own forward: XCiT and Swin
(blocks with ``attn``/``mlp``; fused attention is switched off only during a run and restored), FAN, and
CNNs (timm ResNets / ConvNeXt, robustvit's ``resnet_cifar18``: residual blocks, stage outputs).
``make_probe(model)`` picks the right one.

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
              and all(hasattr(b.attn, "qkv") or hasattr(b.attn, "forward_with_attention") for b in blocks))
        if not ok:
            raise RobustvitError(f"the ViT probe does not support {type(net).__name__}; it supports {SUPPORTED}")
        self.blocks: nn.Sequential = blocks
        self.num_blocks = len(blocks)
        self.num_heads = int(getattr(blocks[0].attn, "num_heads", 1))
        self.family = "vit"
        self.remove_modes = REMOVE_MODES
        self.can_start = True
        self.stages = [list(range(self.num_blocks))]
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
            attn_mask: torch.Tensor | dict[int, torch.Tensor] | None = None,
            start: tuple[int, torch.Tensor] | None = None) -> ProbeOutput:
        """Forward ``x`` block by block.

        ``remove``: {block index: "block" | "attn" | "mlp"} — the removed part is skipped and the residual
        passes through. ``attn_mask``: bool (T, T) / (N, heads, T, T) (True = may attend) or an additive
        float mask, for every block, or a dict {block index: mask} for some blocks. ``start=(i, h)``: skip
        the embedding and blocks before ``i``; ``h`` is block ``i``'s input (``tokens`` then lists blocks
        ``i..L-1`` only; ``x`` is ignored and may be None).
        """
        remove = dict(remove or {})
        for i, mode in remove.items():
            if not 0 <= i < self.num_blocks or mode not in REMOVE_MODES:
                raise RobustvitError(f"remove={{{i}: {mode!r}}} is invalid; blocks are 0..{self.num_blocks - 1} "
                                     f"and modes {', '.join(REMOVE_MODES)}")
        out = ProbeOutput(logits=torch.empty(0))
        first, h = (0, self.embed(x)) if start is None else start
        for i, blk in enumerate(self.blocks):
            if i < first:
                continue
            mode = remove.get(i)
            mask = attn_mask.get(i) if isinstance(attn_mask, dict) else attn_mask
            if mode != "block":
                if mode != "attn":
                    a_out, a_map = self._attention(blk.attn, blk.norm1(h), mask, attentions)
                    h = h + _branch(blk, 1, a_out)
                    if attentions:
                        out.attentions.append(a_map)
                elif attentions:
                    out.attentions.append(torch.zeros(h.shape[0], self.num_heads, h.shape[1], h.shape[1], device=h.device))
                if mode != "mlp":
                    h = h + _branch(blk, 2, blk.mlp(blk.norm2(h)))
            elif attentions:
                out.attentions.append(torch.zeros(h.shape[0], self.num_heads, h.shape[1], h.shape[1], device=h.device))
            if tokens:
                out.tokens.append(h)
        out.logits = self.head(h)
        return out

    @staticmethod
    def _attention(attn: nn.Module, x: torch.Tensor, mask: torch.Tensor | None,
                   keep_map: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """timm's attention with an explicit softmax map (same maths as its non-fused path), or the module's
        own ``forward_with_attention(x, mask=mask)`` when it has one (FAN)."""
        if hasattr(attn, "forward_with_attention"):
            o, a = attn.forward_with_attention(x, mask=mask)
            return o, (a if keep_map else None)
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


def _branch(blk: nn.Module, i: int, y: torch.Tensor) -> torch.Tensor:
    """A residual branch's output after its LayerScale (``ls{i}`` module or ``gamma{i}`` tensor) and drop-path."""
    ls = getattr(blk, f"ls{i}", None)
    if ls is not None:
        y = ls(y)
    elif isinstance(getattr(blk, f"gamma{i}", None), torch.Tensor):
        y = getattr(blk, f"gamma{i}") * y
    dp = getattr(blk, f"drop_path{i}", None) or getattr(blk, "drop_path", None)
    return dp(y) if dp is not None else y


# ---------------------------------------------------------------------------------------------------------
# BlockProbe: the other families, through temporary hooks on the model's own forward
# ---------------------------------------------------------------------------------------------------------
BLOCK_PROBE_SUPPORTS = ("XCiT, Swin (v1), FAN (attention with forward_with_attention), timm ResNets / ConvNeXt "
                        "and resnet_cifar18")


def find_blocks(net: nn.Module) -> tuple[str, list[nn.Module], list[list[int]]]:
    """(kind, blocks in order, block indices per stage) of a network; kind is "transformer", "swin" or "cnn"."""
    layers = getattr(net, "layers", None)
    if isinstance(layers, (nn.Sequential, nn.ModuleList)) and len(layers) and all(hasattr(l, "blocks") for l in layers):
        return "swin", *_stages([list(l.blocks) for l in layers])
    stages = getattr(net, "stages", None)
    if isinstance(stages, (nn.Sequential, nn.ModuleList)) and len(stages):
        if all(hasattr(s, "blocks") for s in stages):
            return "cnn", *_stages([list(s.blocks) for s in stages])
        if all(isinstance(s, nn.Sequential) for s in stages):
            return "cnn", *_stages([list(s) for s in stages])
    if all(isinstance(getattr(net, f"layer{i}", None), nn.Sequential) for i in range(1, 5)):
        return "cnn", *_stages([list(getattr(net, f"layer{i}")) for i in range(1, 5)])
    blocks = getattr(net, "blocks", None)
    if isinstance(blocks, (nn.Sequential, nn.ModuleList)) and len(blocks):
        return "transformer", *_stages([list(blocks)])
    return "none", [], []


def _stages(groups: list[list[nn.Module]]) -> tuple[list[nn.Module], list[list[int]]]:
    blocks, stages = [], []
    for g in groups:
        stages.append(list(range(len(blocks), len(blocks) + len(g))))
        blocks += g
    return blocks, [s for s in stages if s]


def attention_module(blk: nn.Module) -> nn.Module | None:
    """A block's token-mixing attention: a submodule with ``forward_with_attention``, else ``blk.attn``."""
    for m in blk.modules():
        if m is not blk and hasattr(m, "forward_with_attention"):
            return m
    return getattr(blk, "attn", None)


class BlockProbe:
    """Per-block outputs, attention maps and removals for models that ``ViTProbe`` does not run itself.

    Representations are (N, T, D): transformer tokens, Swin's (N, H, W, C) and a CNN's (N, C, H, W) as
    (N, H·W, C). Attention maps: FAN's from ``forward_with_attention`` (N, heads, T, T); others from the
    input of ``attn.attn_drop`` with fused attention off during the run — XCiT's cross-covariance maps are
    (N, heads, C/heads, C/heads), Swin's windowed maps (N, heads, windows·w², w²); every row sums to 1.
    Removal (Bhojanapalli et al., arXiv:2103.14586): a transformer block returns its input, its attention
    or MLP branch returns zeros (the residual passes through); a CNN residual block keeps only its shortcut
    and final activation (Veit et al., arXiv:1605.06431). Masks need ``forward_with_attention``.
    """

    def __init__(self, model: nn.Module) -> None:
        self.wrapper = model if isinstance(model, Normalized) else None
        self.model = model
        self.net = model.net if isinstance(model, Normalized) else model
        self.kind, self.blocks, self.stages = find_blocks(self.net)
        if not self.blocks:
            raise RobustvitError(f"no probe supports {type(self.net).__name__}; supported: {SUPPORTED}, "
                                 f"{BLOCK_PROBE_SUPPORTS}")
        self.num_blocks = len(self.blocks)
        self.attn_modules = [None if self.kind == "cnn" else attention_module(b) for b in self.blocks]
        has_branches = self.kind != "cnn" and all(a is not None and hasattr(b, "mlp")
                                                  for a, b in zip(self.attn_modules, self.blocks))
        self.remove_modes = REMOVE_MODES if has_branches else ("block",)
        self.can_start = False
        self.maskable = self.kind != "cnn" and all(hasattr(a, "forward_with_attention") for a in self.attn_modules)
        a0 = self.attn_modules[0]
        self.num_heads = int(getattr(a0, "num_heads", 1)) if a0 is not None else 0
        if self.maskable:
            self.family = "fan"
        elif self.kind == "transformer" and type(a0).__name__ == "XCA":
            self.family = "xcit"
        else:
            self.family = "swin" if self.kind == "swin" else ("cnn" if self.kind == "cnn" else "other")
        spec = getattr(model, "spec", None)
        ps = getattr(getattr(self.net, "patch_embed", None), "patch_size", None) or getattr(spec, "patch_size", None)
        self.patch_size = int(ps[0] if isinstance(ps, (tuple, list)) else ps) if ps else None
        size = spec.image_size if spec is not None else None
        self.grid_size = (size // self.patch_size,) * 2 if size and self.patch_size and self.kind == "transformer" else None
        self.num_prefix_tokens = 0

    @property
    def num_tokens(self) -> int:
        assert self.grid_size is not None
        return self.grid_size[0] * self.grid_size[1]

    def _tokens(self, y: torch.Tensor | tuple) -> torch.Tensor:
        y = y[0] if isinstance(y, (tuple, list)) else y
        if y.ndim == 4:
            return y.flatten(2).transpose(1, 2) if self.kind == "cnn" else y.flatten(1, 2)
        return y

    def run(self, x: torch.Tensor, *, tokens: bool = True, attentions: bool = False,
            remove: dict[int, str] | None = None,
            attn_mask: torch.Tensor | dict[int, torch.Tensor] | None = None) -> ProbeOutput:
        """The model's own forward with temporary hooks; same arguments as ``ViTProbe.run``."""
        remove = dict(remove or {})
        for i, mode in remove.items():
            if not 0 <= i < self.num_blocks or mode not in self.remove_modes:
                raise RobustvitError(f"remove={{{i}: {mode!r}}} is invalid; blocks are 0..{self.num_blocks - 1} "
                                     f"and modes {', '.join(self.remove_modes)}")
        if attn_mask is not None and not self.maskable:
            raise RobustvitError(f"attention masks need token attention (ViT, DeiT, FAN); {type(self.net).__name__} "
                                 "has none that takes a mask")
        out = ProbeOutput(logits=torch.empty(0))
        maps: dict[int, torch.Tensor] = {}
        handles, restore = [], []
        try:
            for i, blk in enumerate(self.blocks):
                mode = remove.get(i)
                if mode == "block":
                    handles.append(blk.register_forward_hook(self._skip_hook(blk)))
                elif mode is not None:
                    part = self.attn_modules[i] if mode == "attn" else blk.mlp
                    handles.append(part.register_forward_hook(_zero_hook))
                if tokens:
                    handles.append(blk.register_forward_hook(
                        lambda m, a, y, i=i: out.tokens.append(self._tokens(y))))
                mask = attn_mask.get(i) if isinstance(attn_mask, dict) else attn_mask
                am = self.attn_modules[i]
                if am is None or mode in ("block", "attn"):
                    continue
                if hasattr(am, "forward_with_attention"):
                    if attentions or mask is not None:
                        restore.append(_override_forward(am, i, mask, maps if attentions else None))
                elif attentions:
                    restore.append(_capture_attn_drop(am, i, maps, handles))
            out.logits = self.model(x)
        finally:
            for h in handles:
                h.remove()
            for undo in reversed(restore):
                undo()
        if attentions:
            n = x.shape[0]
            for i in range(self.num_blocks):
                a = maps.get(i)
                if a is not None and self.kind == "swin":   # (N·windows, heads, w², w²) → (N, heads, windows·w², w²)
                    a = a.view(n, -1, *a.shape[1:]).transpose(1, 2).flatten(2, 3)
                out.attentions.append(a if a is not None else torch.zeros(0))
        return out

    def _skip_hook(self, blk: nn.Module):  # noqa: ANN202
        if self.kind != "cnn":
            return lambda m, args, y: args[0]
        sc = getattr(blk, "downsample", None) or getattr(blk, "shortcut", None)
        act = next((getattr(blk, a) for a in ("act3", "act2", "act") if isinstance(getattr(blk, a, None), nn.Module)), None)

        def hook(m: nn.Module, args: tuple, y: torch.Tensor) -> torch.Tensor:
            s = sc(args[0]) if sc is not None else args[0]
            return act(s.clone()) if act is not None else s
        return hook


def _zero_hook(m: nn.Module, args: tuple, y: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(y)


def _override_forward(am: nn.Module, i: int, mask: torch.Tensor | None, maps: dict | None):  # noqa: ANN202
    """Temporarily route ``am``'s forward through ``forward_with_attention`` (with ``mask``); returns the undo."""
    had = "forward" in am.__dict__
    old = am.__dict__.get("forward")

    def forward(x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        kwargs.pop("mask", None)
        o, a = am.forward_with_attention(x, *args, mask=mask, **kwargs)
        if maps is not None:
            maps[i] = a
        return o
    am.forward = forward

    def undo() -> None:
        if had:
            am.forward = old
        else:
            del am.forward
    return undo


def _capture_attn_drop(am: nn.Module, i: int, maps: dict, handles: list):  # noqa: ANN202
    """Switch fused attention off (restored by the returned undo) and record the softmax map entering
    ``attn_drop`` (identity in eval mode)."""
    drop = getattr(am, "attn_drop", None)
    if drop is None:
        raise RobustvitError(f"cannot read attention maps of {type(am).__name__} (no attn_drop)")
    fused = getattr(am, "fused_attn", None)
    if fused is not None:
        am.fused_attn = False
    handles.append(drop.register_forward_hook(lambda m, args, y: maps.__setitem__(i, args[0])))

    def undo() -> None:
        if fused is not None:
            am.fused_attn = fused
    return undo


def make_probe(model: nn.Module) -> ViTProbe | BlockProbe:
    """``ViTProbe`` for timm ViT/DeiT models, else ``BlockProbe`` (XCiT, Swin, FAN, CNNs)."""
    try:
        return ViTProbe(model)
    except RobustvitError:
        return BlockProbe(model)


def is_probeable(model: nn.Module) -> bool:
    try:
        ViTProbe(model)
        return True
    except RobustvitError:
        return False
