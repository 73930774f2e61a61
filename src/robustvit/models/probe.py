"""The ViT probe: per-block tokens and attention maps, and forwards with parts removed or masked.

``ViTProbe`` re-runs a ViT block by block with an explicit (non-fused) attention, so the softmax maps exist only
while probing and the model is untouched; ``run(..., start=(i, h))`` resumes from the input ``h`` of block ``i``.
It reproduces exactly (1e-4 relative in float32), with the map that really multiplies the values:

* ``VisionTransformer`` (ViT, DeiT, DeiT-III, ``vit_cifar_*``, hybrids): pre-norm ``Block`` (LayerScale, qk-norm,
  scale-norm, gated attention) or post-norm ``ResPostBlock``; CLS or none, registers, ``no_embed_class``,
  ``norm_pre``, any head of timm's ``forward_head`` (token / average / attention pooling, ``fc_norm``);
* ``VisionTransformerDistilled`` (CLS + distillation token, the two heads averaged);
* ``ParallelScalingBlock`` (ViT-22B: one fused input projection; attention or MLP removable when their output
  projections are separate) and ``ParallelThingsBlock`` (maps concatenated: ``heads = num_parallel · num_heads``);
* ``Beit`` (relative position bias, q/v biases, ``gamma_1``/``gamma_2``); ``Eva`` (EVA-02: rotary embedding on the
  patch tokens, SwiGLU, ``EvaBlock`` / ``EvaBlockPostNorm``);
* ``Cait``: self-attention blocks then the class-attention head; the reported map is the one after the
  post-softmax head mixing ``proj_w`` (rows need not sum to 1), no CLS among the probed tokens, and masks are
  refused (talking heads mix the heads after the softmax, so a mask would not stay a mask);
* robustvit's ``FAN`` (token mixing through ``forward_with_attention(x, mask=None) -> (out, attn)``).

**The probe checks itself**: ``verify(x)`` runs the model's own forward with hooks on its blocks and fused attention
off (maps read at ``attn_drop``) and compares block outputs, maps and logits (‖a − b‖ / ‖b‖ ≤ 1e-4); a mismatch
raises ``RobustvitError`` naming the first differing block. It runs once on the first batch of each input size.
Other block, attention or model classes are refused at construction.

Logits are always ``wrapper(x)`` (normalisation and class map). ``has_class_token``, ``num_prefix_tokens``,
``num_registers`` and ``patch_tokens`` describe the probed tokens; ``patch_size`` is pixels per token (a hybrid's
``patch_embed.patch_size`` counts cells of its CNN feature map).

``BlockProbe`` covers the other families through temporary hooks on the model's own forward (exact by
construction): XCiT, Swin, ``VisionTransformerRelPos``, ConViT (patch tokens only), FAN-like models and CNNs (timm
ResNets / ConvNeXt, ``resnet_cifar18``). It refuses in one line what it cannot do. ``make_probe(model)`` picks
``ViTProbe`` when it is exact (checked on a seeded batch at once), else ``BlockProbe``.

Used by Bhojanapalli et al. 2021 (arXiv:2103.14586: layer correlation, lesions, restricted attention), attention
distance (Dosovitskiy et al., arXiv:2010.11929) and attention stability (AFAT).

>>> probe = ViTProbe(create_model("vit_cifar_tiny"))
>>> x = torch.rand(2, 3, 32, 32)
>>> out = probe.run(x, attentions=True)
>>> len(out.tokens), out.attentions[0].shape    # per block: (N, heads, T, T)
(6, torch.Size([2, 3, 65, 65]))
>>> probe.run(x, remove={0: "attn", 3: "block"}).logits.shape   # lesion
torch.Size([2, 10])
>>> mask = torch.ones(65, 65, dtype=torch.bool).tril()           # (T, T) bool, True = may attend
>>> probe.run(x, attn_mask=mask).logits.shape
torch.Size([2, 10])
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from robustvit.errors import RobustvitError
from robustvit.models.layers import masked_softmax
from robustvit.models.wrapper import Normalized, inference_settings

SUPPORTED = ("timm VisionTransformer models (vit_*, deit_*, deit3_*, vit_cifar_*; pre-norm, post-norm and parallel "
             "blocks), VisionTransformerDistilled, Beit, Eva, Cait and robustvit's FAN")
REMOVE_MODES = ("block", "attn", "mlp")
#: relative error ‖a − b‖ / ‖b‖ the self-check allows (float32; half precision gets HALF_TOLERANCE)
TOLERANCE = 1e-4
HALF_TOLERANCE = 2e-2


@dataclass
class ProbeOutput:
    logits: torch.Tensor
    tokens: list[torch.Tensor] = field(default_factory=list)       # per block: (N, T, D) block outputs
    attentions: list[torch.Tensor] = field(default_factory=list)   # per block: (N, heads, T, T)


@functools.cache
def _classes() -> dict[str, Any]:
    """timm's classes the probe reproduces (imported lazily; absent ones are skipped)."""
    import importlib

    out: dict[str, Any] = {}
    for mod, names in (("timm.models.vision_transformer", ("VisionTransformer", "Block", "ResPostBlock",
                                                           "ParallelScalingBlock", "ParallelThingsBlock")),
                       ("timm.layers", ("Attention",)),
                       ("timm.models.deit", ("VisionTransformerDistilled",)),
                       ("timm.models.beit", ("Beit", "Block", "Attention")),
                       ("timm.models.eva", ("Eva", "EvaBlock", "EvaBlockPostNorm", "EvaAttention")),
                       ("timm.models.cait", ("Cait", "LayerScaleBlock", "TalkingHeadAttn"))):
        try:
            m = importlib.import_module(mod)
        except ImportError:
            continue
        for n in names:
            if hasattr(m, n):
                out[f"{mod.rsplit('.', 1)[-1]}.{n}"] = getattr(m, n)
    from robustvit.models import fan
    out["fan.FAN"], out["fan.FANBlock"] = fan.FAN, fan.FANBlock
    return out


def _is(obj: Any, *keys: str) -> bool:
    """``obj`` is exactly one of timm's classes ``keys`` (subclasses may change the maths: not accepted)."""
    cls = _classes()
    return any(type(obj) is cls.get(k) for k in keys)


def _rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    """‖a − b‖ / ‖b‖ in float64 (inf for different shapes)."""
    a, b = a.detach().double(), b.detach().double()
    if a.shape != b.shape:
        return float("inf")
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


class _Tokens:
    """What both probes share: the token layout they report (``num_prefix_tokens``, then a ``grid_size`` grid) and
    the check of ``remove``."""

    num_prefix_tokens: int
    grid_size: tuple[int, int] | None
    num_blocks: int
    remove_modes: tuple[str, ...]

    def _check_remove(self, remove: dict[int, str] | None) -> dict[int, str]:
        """``remove`` as a dict, refused in one line when it names an unknown block or mode."""
        remove = dict(remove or {})
        for i, mode in remove.items():
            if not 0 <= i < self.num_blocks or mode not in self.remove_modes:
                raise RobustvitError(f"remove={{{i}: {mode!r}}} is invalid; blocks are 0..{self.num_blocks - 1} "
                                     f"and modes {', '.join(self.remove_modes)}")
        return remove

    @property
    def num_tokens(self) -> int:
        assert self.grid_size is not None
        return self.num_prefix_tokens + self.grid_size[0] * self.grid_size[1]

    @property
    def patch_tokens(self) -> slice:
        """The patch tokens of a probed sequence: ``tokens[:, probe.patch_tokens]``."""
        return slice(self.num_prefix_tokens, None)


class ViTProbe(_Tokens):
    """Run a ViT block by block. ``model``: a ``Normalized`` wrapper or a bare timm ViT (then inputs
    are passed to it as they are). ``check``: verify against the model's own forward on the first batch of
    each input size (see :meth:`verify`)."""

    def __init__(self, model: nn.Module, *, check: bool = True) -> None:
        self.wrapper = model if isinstance(model, Normalized) else None
        self.model = model
        self.net = net = getattr(self.wrapper, "net", model)
        self.arch = ("vit" if _is(net, "vision_transformer.VisionTransformer", "deit.VisionTransformerDistilled")
                     else "beit" if _is(net, "beit.Beit") else "eva" if _is(net, "eva.Eva")
                     else "cait" if _is(net, "cait.Cait") else "fan" if _is(net, "fan.FAN") else None)
        blocks = getattr(net, "blocks", None)
        if self.arch is None or not isinstance(blocks, (nn.Sequential, nn.ModuleList)) or not len(blocks) \
                or not hasattr(net, "patch_embed"):
            raise RobustvitError(f"the ViT probe does not support {type(net).__name__}; it supports {SUPPORTED}")
        if self.arch == "eva" and (getattr(net, "dynamic_img_size", False)
                                   or getattr(net, "patch_drop", None) is not None):
            raise RobustvitError(f"the ViT probe does not support {type(net).__name__} with dynamic_img_size or patch "
                                 "dropout (their rotary embedding depends on the input); use make_probe")
        self.kinds = [self._block_kind(b, i) for i, b in enumerate(blocks)]
        self.blocks, self.num_blocks = blocks, len(blocks)
        self.num_heads = self._heads(blocks[0], self.kinds[0])
        self.family = "fan" if self.arch == "fan" else "vit"
        fused_out = any(k == "parallel_scaling" and b.out_proj is not None for k, b in zip(self.kinds, blocks))
        self.remove_modes = ("block",) if fused_out else REMOVE_MODES
        self.can_start = True
        self.maskable = self.arch != "cait"
        #: whether every attention map row is a softmax distribution (CaiT mixes heads after the softmax)
        self.softmax_maps = self.arch != "cait"
        self.stages = [list(range(self.num_blocks))]
        if self.arch in ("cait", "fan"):   # the class token joins only in the class-attention blocks (the head)
            self.has_class_token, self.num_prefix_tokens, self.num_registers = False, 0, 0
        else:
            self.has_class_token = getattr(net, "cls_token", None) is not None
            self.num_prefix_tokens = int(getattr(net, "num_prefix_tokens", int(self.has_class_token)))
            reg = getattr(net, "reg_token", None)
            self.num_registers = int(reg.shape[1]) if isinstance(reg, torch.Tensor) else 0
        grid = getattr(net.patch_embed, "grid_size", None)
        self.grid_size = tuple(int(g) for g in grid) if grid is not None else None
        ps = getattr(net.patch_embed, "patch_size", None)
        self.patch_size = int(ps[0] if isinstance(ps, (tuple, list)) else ps) if ps is not None else None
        img = getattr(net.patch_embed, "img_size", None)
        img = img[0] if isinstance(img, (tuple, list)) else img
        if img and self.grid_size and int(img) % self.grid_size[0] == 0:
            # pixels per token: a hybrid's patch_size counts cells of its CNN stem's feature map
            self.patch_size = int(img) // self.grid_size[0]
        self.check = check
        self._verified: set[tuple[int, ...]] = set()
        self._failure: str | None = None

    # ---- what the probe supports ------------------------------------------------------------------
    def _block_kind(self, blk: nn.Module, i: int) -> str:
        def refuse(what: str) -> RobustvitError:
            return RobustvitError(f"the ViT probe does not support {type(self.net).__name__}: block {i} "
                                  f"({type(blk).__name__}) has {what}; use make_probe (hooks on the model's own "
                                  "forward)")

        if "forward" in blk.__dict__:
            raise refuse("a replaced forward")
        if _is(blk, "vision_transformer.ParallelScalingBlock"):
            return "parallel_scaling"
        if _is(blk, "vision_transformer.ParallelThingsBlock"):
            for br in blk.attns:
                self._check_attention(br.attn, refuse)
            return "parallel_things"
        allowed = {"vit": ("vision_transformer.Block", "vision_transformer.ResPostBlock"),
                   "beit": ("beit.Block",), "eva": ("eva.EvaBlock", "eva.EvaBlockPostNorm"),
                   "cait": ("cait.LayerScaleBlock",), "fan": ("fan.FANBlock",)}[self.arch]
        if not _is(blk, *allowed):
            raise refuse("an unsupported block type")
        self._check_attention(blk.attn, refuse)
        return "post" if _is(blk, "vision_transformer.ResPostBlock", "eva.EvaBlockPostNorm") else "pre"

    def _check_attention(self, attn: nn.Module, refuse: Callable[[str], RobustvitError]) -> None:
        if hasattr(attn, "forward_with_attention"):
            return
        if "forward" in attn.__dict__:
            raise refuse("an attention with a replaced forward")
        ok = {"vit": ("layers.Attention",), "beit": ("beit.Attention",), "eva": ("eva.EvaAttention",),
              "cait": ("cait.TalkingHeadAttn",), "fan": ()}[self.arch]
        if not _is(attn, *ok):
            raise refuse(f"an unsupported attention ({type(attn).__name__})")
        if self.arch == "eva" and (attn.q_proj is not None and attn.qkv is not None):
            raise refuse("an unsupported attention layout")

    @staticmethod
    def _heads(blk: nn.Module, kind: str) -> int:
        if kind == "parallel_scaling":
            return int(blk.num_heads)
        if kind == "parallel_things":
            return int(sum(getattr(b.attn, "num_heads", 1) for b in blk.attns))
        return int(getattr(blk.attn, "num_heads", 1))

    # ---- embedding and head -----------------------------------------------------------------------
    def embed(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise (if wrapped), patch-embed, add positions/prefix tokens: (N, T, D); the first batch of each input
        size is verified first."""
        if self.check and (self._failure is not None or tuple(x.shape[2:]) not in self._verified):
            self.verify(x)
        return self._embed(x)

    def _embed(self, x: torch.Tensor) -> torch.Tensor:
        net = self.net
        if self.wrapper is not None:
            x = self.wrapper.network_input(x)
        h = net.patch_embed(x)
        if self.arch == "vit":
            h = net._pos_embed(h)
            h = net.patch_drop(h) if hasattr(net, "patch_drop") else h
            return net.norm_pre(h) if hasattr(net, "norm_pre") else h
        if self.arch == "beit":
            h = torch.cat((net.cls_token.expand(h.shape[0], -1, -1), h), dim=1)
            if net.pos_embed is not None:
                h = h + net.pos_embed
            return net.pos_drop(h)
        if self.arch == "eva":
            h, _ = net._pos_embed(h)
            return net.norm_pre(h)
        if self.arch == "fan":
            return net._pos_embed(h)
        h = h + net.pos_embed          # cait
        return net.pos_drop(h)

    def head(self, h: torch.Tensor) -> torch.Tensor:
        """Final norm and the model's own head, then the wrapper's class map: ``wrapper(x)``'s logits."""
        net = self.net
        if self.arch == "cait" and getattr(net, "blocks_token_only", None) is not None:
            if hasattr(net, "forward_cls"):
                h = net.forward_cls(h)
            else:
                cls = net.cls_token.expand(h.shape[0], -1, -1)
                for blk in net.blocks_token_only:
                    cls = blk(h, cls)
                h = torch.cat((cls, h), dim=1)
        logits = net.forward_head(net.norm(h))
        index = getattr(self.wrapper, "class_index", None)
        if index is not None:        # the wrapper's class map (Normalized.forward)
            logits = logits[:, index].amax(-1)
        return logits

    def _context(self) -> dict[str, Any]:
        """Per-run inputs of the blocks that do not depend on the image (BEiT's shared bias, EVA's rope)."""
        net = self.net
        if self.arch == "beit":
            return {"shared": net.rel_pos_bias() if getattr(net, "rel_pos_bias", None) is not None else None}
        if self.arch == "eva":
            rope = None
            if net.rope is not None:
                rope = (net.rope.get_embed() if hasattr(net.rope, "feat_shape")
                        else net.rope.get_embed(shape=net.patch_embed.grid_size))
            return {"rope": rope, "mixed": bool(getattr(net, "rope_mixed", False))}
        return {}

    # ---- the run ----------------------------------------------------------------------------------
    def run(self, x: torch.Tensor | None, *, tokens: bool = True, attentions: bool = False,
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
        remove = self._check_remove(remove)
        if attn_mask is not None and not self.maskable:
            raise RobustvitError(f"attention masks are not defined for {type(self.net).__name__} (talking-heads "
                                 "attention mixes heads after the softmax)")
        if start is None and x is None:
            raise RobustvitError("ViTProbe.run needs images x or start=(block, tokens)")
        return self._run(x, tokens, attentions, remove, attn_mask, start)

    def _run(self, x: torch.Tensor | None, tokens: bool, attentions: bool, remove: dict[int, str],
             attn_mask: Any, start: tuple[int, torch.Tensor] | None) -> ProbeOutput:
        out = ProbeOutput(logits=torch.empty(0))
        first, h = (0, self.embed(x)) if start is None else start
        ctx = self._context()
        for i in range(first, self.num_blocks):
            if self.arch == "eva" and ctx["mixed"] and ctx["rope"] is not None:
                ctx = {**ctx, "block_rope": ctx["rope"][i]}
            mode = remove.get(i)
            mask = attn_mask.get(i) if isinstance(attn_mask, dict) else attn_mask
            a_map = None
            if mode != "block":
                h, a_map = self._block(self.blocks[i], self.kinds[i], h, mask, attentions, mode, ctx)
            if attentions:
                out.attentions.append(a_map if a_map is not None else
                                      h.new_zeros(h.shape[0], self.num_heads, h.shape[1], h.shape[1]))
            if tokens:
                out.tokens.append(h)
        out.logits = self.head(h)
        return out

    def _block(self, blk: nn.Module, kind: str, h: torch.Tensor, mask: Any, keep: bool, mode: str | None,
               ctx: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One block's output and attention map (None when its attention is removed)."""
        a_map = None
        if kind == "parallel_scaling":
            return self._parallel_scaling(blk, h, mask, keep, mode)
        if kind == "parallel_things":
            if mode != "attn":
                outs, maps = [], []
                for br in blk.attns:
                    o, a = self._attention(br.attn, br.norm(h), mask, keep, ctx)
                    outs.append(br.drop_path(br.ls(o)))
                    maps.append(a)
                h = h + torch.stack(outs).sum(dim=0)
                a_map = torch.cat(maps, 1) if keep else None
            if mode != "mlp":
                h = h + torch.stack([ffn(h) for ffn in blk.ffns]).sum(dim=0)
            return h, a_map
        if kind == "post":                         # x + drop_path(norm1(attn(x))), x + drop_path(norm2(mlp(x)))
            if mode != "attn":
                o, a_map = self._attention(blk.attn, h, mask, keep, ctx)
                h = h + _drop_path(blk, 1, blk.norm1(o))
            if mode != "mlp":
                h = h + _drop_path(blk, 2, blk.norm2(blk.mlp(h)))
            return h, a_map
        if mode != "attn":                           # pre-norm
            o, a_map = self._attention(blk.attn, blk.norm1(h), mask, keep, ctx)
            h = h + _drop_path(blk, 1, _scale(blk, 1, o))
        if mode != "mlp":
            h = h + _drop_path(blk, 2, _scale(blk, 2, blk.mlp(blk.norm2(h))))
        return h, a_map

    def _parallel_scaling(self, blk: nn.Module, h: torch.Tensor, mask: Any, keep: bool,
                          mode: str | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """timm's ``ParallelScalingBlock`` (Dehghani et al. 2023, arXiv:2302.05442)."""
        B, N, C = h.shape
        y = blk.in_proj(blk.in_norm(h))
        x_mlp, q, k, v = torch.split(y, blk.in_split, dim=-1)
        if blk.mlp_bias is not None:
            x_mlp = x_mlp + blk.mlp_bias
        q = blk.q_norm(q.view(B, N, blk.num_heads, blk.head_dim)).transpose(1, 2)
        k = blk.k_norm(k.view(B, N, blk.num_heads, blk.head_dim)).transpose(1, 2)
        v = v.view(B, N, blk.num_heads, blk.head_dim).transpose(1, 2)
        a = masked_softmax((q * blk.scale) @ k.transpose(-2, -1), mask)
        a = blk.attn_drop(a)
        x_attn = (a @ v).transpose(1, 2).reshape(B, N, C)
        x_mlp = blk.mlp_drop(blk.mlp_act(x_mlp))
        if blk.out_proj is not None:
            y = blk.out_proj(torch.cat((x_attn, x_mlp), dim=-1))
        elif mode == "attn":
            y = blk.mlp_out_proj(x_mlp)
        elif mode == "mlp":
            y = blk.attn_out_proj(x_attn)
        else:
            y = blk.attn_out_proj(x_attn) + blk.mlp_out_proj(x_mlp)
        return h + blk.drop_path(blk.ls(y)), (a if keep and mode != "attn" else None)

    def _attention(self, attn: nn.Module, x: torch.Tensor, mask: Any, keep: bool,
                   ctx: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The attention's output and map by timm's non-fused maths, or its ``forward_with_attention`` (FAN)."""
        if hasattr(attn, "forward_with_attention"):
            o, a = attn.forward_with_attention(x, mask=mask)
            return o, (a if keep else None)
        B, N, C = x.shape
        heads = attn.num_heads
        if self.arch == "cait":                     # talking heads (Shazeer et al. 2020, arXiv:2003.02436)
            qkv = attn.qkv(x).reshape(B, N, 3, heads, C // heads).permute(2, 0, 3, 1, 4)
            q, k, v = qkv[0] * attn.scale, qkv[1], qkv[2]
            logits = attn.proj_l((q @ k.transpose(-2, -1)).permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
            a = attn.proj_w(logits.softmax(dim=-1).permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
            a = attn.attn_drop(a)
            o = (a @ v).transpose(1, 2).reshape(B, N, C)
            return attn.proj_drop(attn.proj(o)), (a if keep else None)
        gate = attn.gate(x).sigmoid() if getattr(attn, "gate", None) is not None else None
        if self.arch == "eva" and getattr(attn, "qkv", None) is None:        # separate q, k, v projections
            q, k, v = (proj(x).reshape(B, N, heads, -1).transpose(1, 2)
                       for proj in (attn.q_proj, attn.k_proj, attn.v_proj))
        else:
            q_bias = attn.q_bias if self.arch in ("beit", "eva") else None
            if q_bias is None:
                qkv = attn.qkv(x)
            elif attn.qkv_bias_separate:
                qkv = attn.qkv(x) + torch.cat((q_bias, attn.k_bias, attn.v_bias))
            else:
                qkv = F.linear(x, weight=attn.qkv.weight, bias=torch.cat((q_bias, attn.k_bias, attn.v_bias)))
            q, k, v = qkv.reshape(B, N, 3, heads, -1).permute(2, 0, 3, 1, 4).unbind(0)
        if self.arch != "beit":
            q, k = attn.q_norm(q), attn.k_norm(k)
        if self.arch == "eva":
            rope = ctx.get("block_rope", ctx.get("rope"))
            if rope is not None:
                from timm.layers import apply_rot_embed_cat
                npt, half = attn.num_prefix_tokens, getattr(attn, "rotate_half", False)
                q = torch.cat([q[:, :, :npt], apply_rot_embed_cat(q[:, :, npt:], rope, half=half)], 2).type_as(v)
                k = torch.cat([k[:, :, :npt], apply_rot_embed_cat(k[:, :, npt:], rope, half=half)], 2).type_as(v)
        logits = (q * attn.scale) @ k.transpose(-2, -1)
        if self.arch == "beit":
            if attn.relative_position_bias_table is not None:
                logits = logits + attn._get_rel_pos_bias()
            if ctx.get("shared") is not None:
                logits = logits + ctx["shared"]
        a = attn.attn_drop(masked_softmax(logits, mask))
        o = (a @ v).transpose(1, 2).reshape(B, N, -1)
        o = attn.norm(o) if isinstance(getattr(attn, "norm", None), nn.Module) else o
        if gate is not None:
            o = o * gate
        o = attn.proj_drop(attn.proj(o))
        return o, (a if keep else None)

    # ---- the self-check ---------------------------------------------------------------------------
    def verify(self, x: torch.Tensor) -> dict[str, float]:
        """:meth:`_verify` with the model computing in float32 (the tolerance is float32's)."""
        with inference_settings(self.model, precision="fp32"):
            return self._verify(x)

    def _verify(self, x: torch.Tensor) -> dict[str, float]:
        """Compare block outputs, attention maps (fused attention off, read at ``attn_drop``) and logits with the
        model's own forward on ``x`` (at most 4 images, eval mode): the largest relative errors, or a one-line
        ``RobustvitError``. Modes and fused-attention flags are restored."""
        if self._failure is not None:
            raise RobustvitError(self._failure)
        x = x[:4].detach()
        self._verified.add(tuple(x.shape[2:]))
        modes = {m: m.training for m in self.model.modules()}
        real_blocks: list[torch.Tensor | None] = [None] * self.num_blocks
        real_maps: dict[int, list[torch.Tensor]] = {}
        handles, fused = [], []

        def release() -> None:
            """Remove the hooks and restore the fused-attention flags."""
            for h in handles:
                h.remove()
            for src, f in fused:
                src.fused_attn = f
            handles.clear()
            fused.clear()

        try:
            self.model.eval()
            for i, blk in enumerate(self.blocks):
                handles.append(blk.register_forward_hook(
                    lambda m, a, y, i=i: real_blocks.__setitem__(i, y)))
                for src in _map_sources(blk, self.kinds[i]):
                    if hasattr(src, "fused_attn"):
                        fused.append((src, src.fused_attn))
                        src.fused_attn = False
                    handles.append(src.attn_drop.register_forward_hook(
                        lambda m, a, y, i=i: real_maps.setdefault(i, []).append(a[0])))
            with torch.no_grad(), torch.autocast(x.device.type, enabled=False):   # compare in the model's dtype
                real_logits = self.model(x)
                release()
                mine = self._run(None, True, True, {}, None, (0, self._embed(x)))
        finally:
            release()
            for m, t in modes.items():
                m.training = t
        dtype = real_logits.dtype if real_logits.is_floating_point() else torch.float32
        tol = TOLERANCE if dtype in (torch.float32, torch.float64) else HALF_TOLERANCE
        errors = {"blocks": 0.0, "attention": 0.0, "logits": 0.0}
        name = type(self.net).__name__
        for i in range(self.num_blocks):
            real = real_blocks[i]
            real = real[0] if isinstance(real, tuple) else real
            err = float("inf") if real is None else _rel_err(mine.tokens[i], real)
            errors["blocks"] = max(errors["blocks"], err)
            if err > tol:
                self._fail(f"the ViT probe does not reproduce {name}: block {i} ({type(self.blocks[i]).__name__}) "
                           f"differs from the model's own forward by {err:.2e} relative (> {tol:g}); the probe does "
                           "not support this block type — use make_probe (hooks on the model's own forward)")
            if i in real_maps and len(real_maps[i]) == len(_map_sources(self.blocks[i], self.kinds[i])):
                err = _rel_err(mine.attentions[i], torch.cat(real_maps[i], 1))
                errors["attention"] = max(errors["attention"], err)
                if err > tol:
                    self._fail(f"the ViT probe does not reproduce {name}: the attention map of block {i} "
                               f"({type(self.blocks[i]).__name__}) differs from the model's by {err:.2e} relative "
                               f"(> {tol:g}); the probe does not support this attention type — use make_probe")
        err = _rel_err(mine.logits, real_logits)
        errors["logits"] = err
        if err > tol:
            self._fail(f"the ViT probe does not reproduce {name}: its logits differ from the model's (wrapper's) "
                       f"forward by {err:.2e} relative (> {tol:g}) while every block matches; the probe does not "
                       "support this head — use make_probe (hooks on the model's own forward)")
        return errors

    def _fail(self, msg: str) -> None:
        self._failure = msg
        raise RobustvitError(msg)


def _map_sources(blk: nn.Module, kind: str) -> list[nn.Module]:
    """The modules whose ``attn_drop`` input is the block's real attention map (in head order)."""
    if kind == "parallel_scaling":
        return [blk]
    if kind == "parallel_things":
        return [b.attn for b in blk.attns if hasattr(b.attn, "attn_drop")]
    a = getattr(blk, "attn", None)
    return [a] if a is not None and hasattr(a, "attn_drop") and not hasattr(a, "forward_with_attention") else []


def _scale(blk: nn.Module, i: int, y: torch.Tensor) -> torch.Tensor:
    """A residual branch after its LayerScale: ``ls{i}`` module, or ``gamma_{i}`` / ``gamma{i}`` tensor."""
    ls = getattr(blk, f"ls{i}", None)
    if ls is not None:
        return ls(y)
    g = getattr(blk, f"gamma_{i}", None)
    if g is None:
        g = getattr(blk, f"gamma{i}", None)
    return g * y if isinstance(g, torch.Tensor) else y


def _drop_path(blk: nn.Module, i: int, y: torch.Tensor) -> torch.Tensor:
    dp = getattr(blk, f"drop_path{i}", None) or getattr(blk, "drop_path", None)
    return dp(y) if dp is not None else y


# ---------------------------------------------------------------------------------------------------------
# BlockProbe: the other families, through temporary hooks on the model's own forward
# ---------------------------------------------------------------------------------------------------------
BLOCK_PROBE_SUPPORTS = ("XCiT, Swin (v1), VisionTransformerRelPos, FAN (attention with forward_with_attention), "
                        "timm ResNets / ConvNeXt and resnet_cifar18")


def find_blocks(net: nn.Module) -> tuple[str, list[nn.Module], list[list[int]]]:
    """(kind, blocks in order, block indices per stage) of a network; kind is "transformer", "swin" or "cnn"."""
    layers = getattr(net, "layers", None)
    if isinstance(layers, (nn.Sequential, nn.ModuleList)) and len(layers) and all(hasattr(x, "blocks")
                                                                                  for x in layers):
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


class BlockProbe(_Tokens):
    """Per-block outputs, attention maps and removals for models that ``ViTProbe`` does not run itself.

    Representations are (N, T, D) (Swin's and CNNs' maps flattened). Attention maps: FAN's from
    ``forward_with_attention``; others read at ``attn.attn_drop`` with fused attention off — XCiT's (N, heads,
    C/heads, C/heads), Swin's (N, heads, windows·w², w²). Removal (Bhojanapalli et al., arXiv:2103.14586): a block
    returns its input, an attention or MLP branch zeros; a CNN residual block keeps its shortcut and final
    activation (Veit et al., arXiv:1605.06431). Masks need ``forward_with_attention``.
    """

    def __init__(self, model: nn.Module) -> None:
        self.wrapper = model if isinstance(model, Normalized) else None
        self.model = model
        self.net = getattr(self.wrapper, "net", model)
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
        self.softmax_maps = True
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
        tokens_grid = size and self.patch_size and self.kind == "transformer"
        self.grid_size = (size // self.patch_size,) * 2 if tokens_grid else None
        # prefix tokens inside the blocks: none where the class token joins after them (XCiT, CaiT, FAN)
        late_cls = any(hasattr(self.net, a) for a in ("cls_attn_blocks", "blocks_token_only"))
        # ConViT: its CLS joins after the local (GPSA) blocks; the probe reports the patch tokens of every block
        self._strip_cls = (self.kind == "transformer" and hasattr(self.net, "local_up_to_layer")
                           and getattr(self.net, "cls_token", None) is not None and self.grid_size is not None)
        inside = self.kind == "transformer" and not late_cls and not self._strip_cls
        self.num_prefix_tokens = int(getattr(self.net, "num_prefix_tokens", 0) or 0) if inside else 0
        self.has_class_token = (inside and self.num_prefix_tokens > 0
                                and getattr(self.net, "cls_token", None) is not None)
        reg = getattr(self.net, "reg_token", None)
        self.num_registers = int(reg.shape[1]) if inside and isinstance(reg, torch.Tensor) else 0

    def verify(self, x: torch.Tensor) -> dict[str, float]:
        """The hooks run the model's own forward (exact by construction): only the logits are compared, in float32."""
        with torch.no_grad(), inference_settings(self.model, precision="fp32"):
            err = _rel_err(self.run(x[:8], tokens=False).logits, self.model(x[:8]))
        if err > TOLERANCE:
            raise RobustvitError(f"the block probe's forward of {type(self.net).__name__} differs from the model's "
                                 f"by {err:.2e} relative; the model's forward is not deterministic")
        return {"logits": err}

    def _tokens(self, y: torch.Tensor | tuple) -> torch.Tensor:
        y = y[0] if isinstance(y, (tuple, list)) else y
        if y.ndim == 4:
            return y.flatten(2).transpose(1, 2) if self.kind == "cnn" else y.flatten(1, 2)
        if self._strip_cls and y.shape[1] == self.grid_size[0] * self.grid_size[1] + 1:
            return y[:, 1:]
        return y

    def run(self, x: torch.Tensor, *, tokens: bool = True, attentions: bool = False,
            remove: dict[int, str] | None = None,
            attn_mask: torch.Tensor | dict[int, torch.Tensor] | None = None) -> ProbeOutput:
        """The model's own forward with temporary hooks; same arguments as ``ViTProbe.run``."""
        remove = self._check_remove(remove)
        if attentions and any(a is None for a in self.attn_modules):
            i = next(j for j, a in enumerate(self.attn_modules) if a is None)
            raise RobustvitError(f"{type(self.net).__name__} has no attention map to read in block {i} "
                                 f"({type(self.blocks[i]).__name__}: not one attention module per block)")
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
        name = type(blk).__name__

        def refuse(x: torch.Tensor, y: Any) -> None:
            shape = tuple(y[0].shape if isinstance(y, (tuple, list)) else y.shape)
            if not isinstance(x, torch.Tensor) or tuple(x.shape) != shape:
                raise RobustvitError(f"removing a {name} block of {type(self.net).__name__} is undefined: it maps "
                                     f"{tuple(getattr(x, 'shape', ()))} to {shape} and has no shortcut to keep")
        if self.kind != "cnn":
            def skip(m: nn.Module, args: tuple, y: Any) -> Any:
                refuse(args[0], y)
                return args[0] if not isinstance(y, tuple) else (args[0], *y[1:])
            return skip
        sc = getattr(blk, "downsample", None) or getattr(blk, "shortcut", None)
        acts = (getattr(blk, a, None) for a in ("act3", "act2", "act"))
        act = next((a for a in acts if isinstance(a, nn.Module)), None)

        def hook(m: nn.Module, args: tuple, y: torch.Tensor) -> torch.Tensor:
            s = sc(args[0]) if isinstance(sc, nn.Module) else args[0]
            refuse(s, y)
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
    """Switch fused attention off and record the map entering ``attn_drop``; returns the undo."""
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


def probe_input(model: nn.Module, n: int = 2) -> torch.Tensor | None:
    """A seeded (n, 3, S, S) batch in [0, 1] at the model's input size (None when it is unknown)."""
    net = model.net if isinstance(model, Normalized) else model
    size = getattr(getattr(model, "spec", None), "image_size", None)
    if not size:
        img = getattr(getattr(net, "patch_embed", None), "img_size", None)
        size = img[0] if isinstance(img, (tuple, list)) else img
    if not size:
        return None
    p = next(iter(model.parameters()), None)
    dev = p.device if p is not None else torch.device("cpu")
    dt = p.dtype if p is not None and p.is_floating_point() else torch.float32
    x = torch.rand(n, 3, int(size), int(size), generator=torch.Generator().manual_seed(0))
    return x.to(device=dev, dtype=dt)


def _checked_vit_probe(model: nn.Module) -> ViTProbe | None:
    """``ViTProbe(model)`` once it reproduced the model on a seeded probe batch at its input size, else None."""
    try:
        probe = ViTProbe(model)
        x = probe_input(model)
        if x is not None:
            probe.verify(x)
        return probe
    except RobustvitError:
        return None


def make_probe(model: nn.Module) -> ViTProbe | BlockProbe:
    """``ViTProbe`` where it reproduces the model exactly (checked at once on a seeded batch), else ``BlockProbe``."""
    probe = _checked_vit_probe(model)
    return probe if probe is not None else BlockProbe(model)


def is_probeable(model: nn.Module) -> bool:
    """Whether ``ViTProbe`` supports ``model`` and reproduces it (self-check on a seeded probe batch)."""
    return _checked_vit_probe(model) is not None
