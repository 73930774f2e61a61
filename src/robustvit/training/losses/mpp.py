"""Masked patch prediction (MPP): the ViT paper's self-supervised pre-training (Dosovitskiy et al.,
arXiv:2010.11929, §4.6 and App. B.1.2).

"We corrupt 50 % of patch embeddings by either replacing their embeddings with a learnable [mask] embedding
(80 %), a random other patch embedding (10 %) or just keeping them as is (10 %)" and predict each corrupted
patch's **3-bit mean colour** (512 classes, index r·64 + g·8 + b) from its output token with a linear head;
the loss is the cross-entropy over the corrupted patches.

A forward hook on ``net.patch_embed`` corrupts the patch embeddings of an unchanged timm ViT, whose own
``forward_features`` runs the rest. Where tokens also see neighbouring pixels (a convolutional stem), a masked
patch's colour would leak through its neighbours, so the corruption is applied to the patches' pixels instead;
``space="auto"`` checks this on the model's ``patch_embed`` (:func:`patch_embed_is_local`).

The [mask] embedding and the head belong to the loss (trained with the model, :meth:`optimized_parameters`;
saved in ``OUT/last/train_state.pt``), so the checkpoint stays a plain timm model that ``robustvit finetune``
takes. Call t's corruption is seeded with (``seed``, ``"mpp"``, t, rank); t is saved, so a resume replays it.

>>> from robustvit.training.losses import create_loss
>>> model, x, y = create_model("vit_cifar_micro", num_classes=10), torch.rand(4, 3, 32, 32), torch.arange(4)
>>> loss_fn = create_loss("mpp")
>>> loss_fn.setup(model)                      # a ViT the probe supports (vit_*, deit_*, vit_cifar_*)
>>> loss, cls_logits, _ = loss_fn(model, x, y, epoch=0)
>>> loss.ndim, cls_logits.shape
(0, torch.Size([4, 10]))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

from robustvit.errors import RobustvitError
from robustvit.models.probe import ViTProbe
from robustvit.options import option
from robustvit.training.losses.base import LossOutput, TrainingLoss, register_loss
from robustvit.utils import eval_mode

KEEP, MASK, RANDOM = 0, 1, 2


@dataclass
class Corruption:
    """Sampled corruption of (N, L) patches: what to predict (kept 10 % included), the action, and for RANDOM the
    flat index into N·L of the replacing patch."""

    corrupted: torch.Tensor   # bool (N, L)
    action: torch.Tensor      # long (N, L)
    source: torch.Tensor      # long (N, L)


def sample_corruption(n: int, length: int, generator: torch.Generator, ratio: float = 0.5, p_mask: float = 0.8,
                      p_random: float = 0.1, device: torch.device | str | None = None) -> Corruption:
    """``round(ratio·L)`` uniformly random patches per image, each replaced by the [mask] embedding with
    probability ``p_mask``, by another patch of the batch (uniform over the other N·L − 1) with ``p_random``, else
    kept."""
    device = device if device is not None else generator.device
    m = int(round(ratio * length))
    order = torch.rand(n, length, generator=generator, device=device).argsort(1)
    corrupted = torch.zeros(n, length, dtype=torch.bool, device=device)
    corrupted.scatter_(1, order[:, :m], True)
    u = torch.rand(n, length, generator=generator, device=device)
    action = torch.where(u < p_mask, MASK, torch.where(u < p_mask + p_random, RANDOM, KEEP))
    action = torch.where(corrupted, action, KEEP)
    total = n * length
    j = torch.randint(0, max(total - 1, 1), (n, length), generator=generator, device=device)
    own = torch.arange(total, device=device).view(n, length)
    source = j + (j >= own).long() if total > 1 else own          # skips the patch itself
    return Corruption(corrupted, action, source)


def apply_corruption(tokens: torch.Tensor, c: Corruption, mask_embedding: torch.Tensor) -> torch.Tensor:
    """Corrupted copy of patch embeddings ``tokens`` (N, L, D); ``mask_embedding`` (D,)."""
    n, length, d = tokens.shape
    swapped = tokens.reshape(n * length, d)[c.source.flatten()].view(n, length, d)
    out = torch.where((c.action == RANDOM)[..., None], swapped, tokens)
    return torch.where((c.action == MASK)[..., None], mask_embedding.to(tokens.dtype).expand_as(tokens), out)


def corrupt_pixels(z: torch.Tensor, c: Corruption, mask_patch: torch.Tensor, patch: int) -> torch.Tensor:
    """Corrupted copy of images ``z`` (N, C, H, W), patch by ``patch``×``patch`` patch in timm's row-major token order:
    :func:`apply_corruption` on the flattened pixels of every patch; ``mask_patch`` (C·patch²,)."""
    n, ch, h, w = z.shape
    gh, gw = h // patch, w // patch
    t = z.reshape(n, ch, gh, patch, gw, patch).permute(0, 2, 4, 1, 3, 5).reshape(n, gh * gw, ch * patch * patch)
    t = apply_corruption(t, c, mask_patch)
    return t.reshape(n, gh, gw, ch, patch, patch).permute(0, 3, 1, 4, 2, 5).reshape(n, ch, h, w)


@torch.no_grad()
def patch_embed_is_local(patch_embed: nn.Module, image_size: tuple[int, int], grid: tuple[int, int],
                         in_chans: int = 3) -> bool:
    """Whether every token of ``patch_embed`` depends on its own patch's pixels only (a patchify projection):
    changing one inner patch's pixels must move no other token. Eval mode (BatchNorm then acts per position)."""
    (h, w), (gh, gw) = image_size, grid
    ph, pw = h // gh, w // gw
    param = next(patch_embed.parameters(), None)
    device = param.device if param is not None else torch.device("cpu")
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, in_chans, h, w, generator=g).to(device)
    r, col = gh // 2, gw // 2
    x2 = x.clone()
    x2[..., r * ph:(r + 1) * ph, col * pw:(col + 1) * pw] += torch.randn(in_chans, ph, pw, generator=g).to(device)
    with eval_mode(patch_embed):
        a, b = (patch_embed(v).reshape(1, gh * gw, -1) for v in (x, x2))
    moved = (a - b).abs().amax(-1)[0] > 1e-6 * (1 + a.abs().amax())
    moved[r * gw + col] = False
    return not bool(moved.any())


def mean_colour_targets(x: torch.Tensor, patch: int, bits: int = 3) -> torch.Tensor:
    """The ``bits``-bit mean colour class (N, L) of every patch of ``x`` (N, 3, H, W) in [0, 1], in timm's
    row-major token order: r·4^bits + g·2^bits + b."""
    levels = 2 ** bits
    mean = F.avg_pool2d(x.float(), patch)                                   # (N, 3, H/p, W/p)
    q = (mean * levels).floor().clamp(0, levels - 1).long()
    idx = (q[:, 0] * levels + q[:, 1]) * levels + q[:, 2]
    return idx.flatten(1)


@register_loss
class MaskedPatchPrediction(TrainingLoss):
    """MPP (ViT paper, App. B.1.2): options ``mask_ratio`` (0.5), ``p_mask`` (0.8), ``p_random`` (0.1),
    ``bits`` (3: 512 colour classes), ``space`` (``auto``: corrupt the patch embeddings where each depends on
    its own patch only, as the paper, else the patches' pixels; ``embedding``; ``pixels``), ``seed``. Returns
    the CE over corrupted patches; the classification logits returned for the trainer's log come from the
    model's (untrained) head on the corrupted input."""

    name = "mpp"
    counts_calls = True

    @dataclass
    class Options:
        mask_ratio: float = option(0.5, min=0, max=1, help="fraction of the patches corrupted (> 0)")
        p_mask: float = option(0.8, min=0, max=1, help="share of the corrupted patches given the [mask] embedding")
        p_random: float = option(0.1, min=0, max=1, help="share given another patch (p_mask + p_random <= 1)")
        bits: int = option(3, min=1, max=4, help="bits per colour channel of the target (3: 512 classes)")
        space: Literal["auto", "embedding", "pixels"] = option("auto", help="where patches are corrupted")
        seed: int = option(0, help="seed of the corruptions")

    def __init__(self, options: Any = None, **kwargs: Any) -> None:
        super().__init__(options, **kwargs)
        o = self.options
        if o.mask_ratio <= 0 or o.p_mask + o.p_random > 1:
            raise RobustvitError(f"training loss 'mpp': need mask_ratio > 0 and p_mask + p_random <= 1, got "
                                 f"mask_ratio={o.mask_ratio}, p_mask={o.p_mask}, p_random={o.p_random}")
        self.space = o.space             # "auto" is resolved by setup()
        self.mask_embedding: nn.Parameter | None = None
        self.head: nn.Linear | None = None
        self._sums = {"correct": 0.0, "n": 0.0}

    def setup(self, model: nn.Module) -> None:
        """Create the [mask] embedding and the 512-way head for ``model``'s width (a ViT the probe supports)."""
        probe = ViTProbe(model)
        net = probe.net
        dim = int(getattr(net, "embed_dim", 0) or getattr(net, "num_features", 0))
        if dim <= 0 or probe.grid_size is None:
            raise RobustvitError("mpp needs a ViT with a fixed patch grid and an embed_dim")
        self.grid, self.num_prefix = probe.grid_size, probe.num_prefix_tokens
        size = tuple(model.spec.input_size[-2:])
        self.patch = size[0] // self.grid[0]
        if self.space == "auto":
            local = patch_embed_is_local(net.patch_embed, size, self.grid, model.spec.input_size[0])
            self.space = "embedding" if local else "pixels"
        if self.mask_embedding is None:
            device = next(model.parameters()).device
            width = dim if self.space == "embedding" else model.spec.input_size[0] * self.patch ** 2
            self.mask_embedding = nn.Parameter(torch.zeros(width, device=device))
            nn.init.trunc_normal_(self.mask_embedding, std=0.02)   # timm's init of the cls token
            self.head = nn.Linear(dim, 2 ** (3 * self.options.bits), device=device)

    def optimized_parameters(self) -> list[tuple[str, nn.Parameter]]:
        assert self.mask_embedding is not None and self.head is not None, "call setup(model) first"
        return [("mpp.mask_token", self.mask_embedding)] + [(f"mpp.head.{n}", p) for n, p in self.head.named_parameters()]

    def corrupt_and_encode(self, model: nn.Module, x: torch.Tensor, c: Corruption) -> torch.Tensor:
        """The model's ``forward_features`` (N, prefix + L, D) on ``x`` with its patches corrupted in ``space``."""
        net = model.net
        z = (x - model.mean.to(x.dtype)) / model.std.to(x.dtype)
        if self.space == "pixels":
            return net.forward_features(corrupt_pixels(z, c, self.mask_embedding, self.patch))
        seen = []

        def hook(module: nn.Module, args: tuple, out: torch.Tensor) -> torch.Tensor:
            shape = out.shape
            tokens = out.reshape(shape[0], -1, shape[-1])      # (N, L, D); NHWC outputs flattened and restored
            if tokens.shape[1] != c.action.shape[1]:
                raise RobustvitError(f"mpp: the patch embedding gave {tokens.shape[1]} tokens, expected "
                                     f"{c.action.shape[1]} ({self.grid[0]}×{self.grid[1]} patches)")
            seen.append(True)
            return apply_corruption(tokens, c, self.mask_embedding).reshape(shape)

        handle = net.patch_embed.register_forward_hook(hook)
        try:
            feats = net.forward_features(z)
        finally:
            handle.remove()
        if not seen:
            raise RobustvitError(f"mpp: {type(net).__name__}.forward_features does not call patch_embed")
        return feats

    def forward(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, epoch: int) -> LossOutput:
        if self.head is None or not hasattr(self, "grid"):
            self.setup(model)
        gh, gw = self.grid
        if x.shape[-2] % gh or x.shape[-1] % gw or x.shape[-2] // gh != x.shape[-1] // gw:
            raise RobustvitError(f"mpp: {tuple(x.shape[-2:])} images do not split into the model's {gh}×{gw} patches")
        if self.space == "pixels" and x.shape[-2] // gh != self.patch:
            raise RobustvitError(f"mpp: {tuple(x.shape[-2:])} images, but the model was set up for "
                                 f"{tuple(model.spec.input_size[-2:])}: train at the model's input size")
        o = self.options
        gen = self.seeded_generator(o.seed, "mpp", x.device)
        c = sample_corruption(len(x), gh * gw, gen, o.mask_ratio, o.p_mask, o.p_random, x.device)
        feats = self.corrupt_and_encode(model, x, c)
        target = mean_colour_targets(x, x.shape[-2] // gh, o.bits)
        logits = self.head(feats[:, self.num_prefix:][c.corrupted])
        loss = F.cross_entropy(logits.float(), target[c.corrupted])
        cls_logits = model.net.forward_head(feats)
        # the classification head takes no part in MPP; 0·sum keeps it in the graph (DistributedDataParallel)
        loss = loss + 0.0 * cls_logits.sum()
        with torch.no_grad():
            self._sums["correct"] += float((logits.argmax(1) == target[c.corrupted]).sum())
            self._sums["n"] += float(c.corrupted.sum())
        return loss, cls_logits.detach(), None

    def metrics(self) -> dict[str, float]:
        s, self._sums = self._sums, {"correct": 0.0, "n": 0.0}
        return {"mpp_acc": s["correct"] / s["n"]} if s["n"] else {}

    def resolved(self) -> dict[str, Any]:
        return {"space": self.space}

    def extra_repr(self) -> str:
        o = self.options
        return f"mask_ratio={o.mask_ratio}, p_mask={o.p_mask}, p_random={o.p_random}, bits={o.bits}, space={self.space}"


__all__ = ["Corruption", "MaskedPatchPrediction", "apply_corruption", "corrupt_pixels", "mean_colour_targets",
           "patch_embed_is_local", "sample_corruption"]
