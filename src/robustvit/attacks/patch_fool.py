"""Patch-Fool: replace the most-attended patch and optimise its pixels to fool a Vision Transformer
(Fu et al., ICLR 2022, "Patch-Fool: Are Vision Transformers Always Robust Against Adversarial
Perturbations?", arXiv:2203.08392; reference code RICE-EIC/Patch-Fool).

The ``num_patches`` patches receiving the most attention in block ``attn_block`` (heads and queries averaged;
or by saliency |∂CE/∂x|, or at random) are **replaced** by δ ~ U(0, 1), optimised with Adam (learning rate decayed
by 0.95 every 10 steps) to *ascend* the CE plus ``attn_weight`` × the attention-aware loss: for every block b in
1 … L/2 − 1, the mean log attention paid to the (first) chosen patch, its gradient combined with the CE's
PCGrad-style. ``eps`` bounds δ in L∞ around x (the paper's "mild" variant); ``scoring="best"`` keeps each image's
last fooling iterate instead of the final one (a stronger attack). The attention maps come from
:class:`robustvit.models.probe.ViTProbe`, so only the ViT families it reproduces exactly are supported.

Deviations from the reference: it works in normalised pixel space with learning rate 0.22; on [0, 1] images the
default is 0.22 × the model's mean normalisation std (the same step in pixels). Its PCGrad divides the projection
by ‖g_CE‖ instead of ‖g_CE‖²; here PCGrad's exact projection (Yu et al. 2020, arXiv:2001.06782).

Example::

    atk = create_attack("patch_fool", vit, steps=250)
    x_adv = atk(x, y)
    atk.last_patches      # (N, num_patches) attacked patch indices (row-major on the patch grid)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

from robustvit.attacks.base import Attack, register_attack
from robustvit.options import Eps, option
from robustvit.errors import RobustvitError
from robustvit.models.probe import ViTProbe

SELECTIONS = ("attn", "saliency", "random")
SCORINGS = ("final", "best")


def patch_mask(indices: torch.Tensor, grid: tuple[int, int], patch_size: int) -> torch.Tensor:
    """(N, 1, H, W) float mask that is 1 on the patches ``indices`` (N, k) of a ``grid`` of patches."""
    n = indices.shape[0]
    m = torch.zeros(n, grid[0] * grid[1], device=indices.device)
    m.scatter_(1, indices, 1.0)
    m = m.view(n, 1, grid[0], grid[1])
    return m.repeat_interleave(patch_size, 2).repeat_interleave(patch_size, 3)


def pcgrad(g_aux: torch.Tensor, g_main: torch.Tensor) -> torch.Tensor:
    """Per-sample PCGrad: where ⟨g_aux, g_main⟩ < 0, remove from g_aux its component along g_main."""
    a, b = g_aux.flatten(1), g_main.flatten(1)
    dot = (a * b).sum(1, keepdim=True)
    proj = torch.where(dot < 0, dot / b.pow(2).sum(1, keepdim=True).clamp_min(1e-20), torch.zeros_like(dot))
    return (a - proj * b).view_as(g_aux)


@register_attack
class PatchFool(Attack):
    """Patch-Fool on ViTs (Fu et al. 2022, arXiv:2203.08392): one attention-chosen patch replaced and optimised
    with Adam; unconstrained by default (``eps`` gives the mild L∞ variant)."""

    name = "patch_fool"
    smoke = {"steps": 2, "eps": "8/255"}
    requires_probe = True
    aliases = ("patch-fool",)
    norms = ("linf",)
    masking_checks = ("model",)

    @dataclass
    class Options(Attack.Options):
        eps: Eps | None = option(None, min=0, help="L∞ bound of the patch (the mild variant; default: none, the "
                                                   "patch's values are free in [0, 1])")
        num_patches: int = option(1, min=1, help="patches attacked")
        steps: int = option(250, min=1, help="iterations")
        step_size: Eps | None = option(None, min=0, help="Adam learning rate (default 0.22 × the model's mean "
                                                         "normalisation std)")
        attn_weight: float = option(0.002, min=0, help="weight of the attention-aware loss (0: cross-entropy only)")
        attn_block: int = option(4, min=0, help="block whose attention chooses the patch (capped at the last)")
        selection: Literal[SELECTIONS] = option("attn", help="how the patch is chosen: attn, saliency or random")
        scoring: Literal[SCORINGS] = option("final", help="return the final iterate (the reference's) or the best one")

    def __init__(self, model: nn.Module, **options: Any) -> None:
        super().__init__(model, **options)
        o = self.opts
        self.bounded = o.eps is not None
        self.eps = 1.0 if o.eps is None else self.eps
        self.probe = ViTProbe(model)   # raises a clear error for non-ViT models
        if self.probe.grid_size is None or self.probe.patch_size is None:
            raise RobustvitError("patch_fool needs a ViT with a fixed patch grid (patch_embed.grid_size)")
        P = self.probe.grid_size[0] * self.probe.grid_size[1]
        if o.num_patches > P:
            raise RobustvitError(f"patch_fool: num_patches must be in 1..{P}")
        self.num_patches, self.steps = o.num_patches, o.steps
        std = getattr(getattr(model, "spec", None), "std", (0.229, 0.224, 0.225))
        self.step_size = float(o.step_size) if o.step_size is not None else 0.22 * sum(std) / len(std)
        self.attn_weight, self.selection, self.scoring = float(o.attn_weight), o.selection, o.scoring
        self.attn_block = min(o.attn_block, self.probe.num_blocks - 1)
        self.last_patches: torch.Tensor | None = None

    # ---- the two stages ------------------------------------------------------------------------
    def select_patches(self, x: torch.Tensor, y: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        """(N, num_patches) patch indices to attack, best first."""
        P, k, pre = self.probe.num_tokens - self.probe.num_prefix_tokens, self.num_patches, self.probe.num_prefix_tokens
        if self.selection == "random":
            return torch.rand(x.shape[0], P, generator=gen, device=x.device).argsort(1)[:, :k]
        if self.selection == "attn":
            with torch.no_grad():
                attn = self.probe.run(x, tokens=False, attentions=True).attentions[self.attn_block]
            score = attn.mean(1).mean(1)[:, pre:]            # heads, then queries → attention received per key
        else:
            xg = x.detach().requires_grad_(True)
            g, = torch.autograd.grad(F.cross_entropy(self.model(xg), y, reduction="sum"), xg)
            ps = self.probe.patch_size
            score = F.avg_pool2d(g.abs().sum(1, keepdim=True), ps).flatten(1)
        return score.argsort(1, descending=True)[:, :k]

    def perturb(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        gen = self.generator(x.device)
        patches = self.select_patches(x, y, gen)
        self.last_patches = patches.cpu()
        mask = patch_mask(patches, self.probe.grid_size, self.probe.patch_size).to(x.dtype)
        base = x * (1 - mask)
        noise = torch.rand(x.shape, generator=gen, device=x.device, dtype=x.dtype)
        if self.bounded:
            lo, hi = self.linf_box(x)
            delta = (x + (2 * noise - 1) * self.eps).clamp(lo, hi)
        else:
            lo, hi = torch.zeros_like(x), torch.ones_like(x)
            delta = noise
        delta.requires_grad_(True)
        opt = torch.optim.Adam([delta], lr=self.step_size)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=10, gamma=0.95)
        target = patches[:, 0] + self.probe.num_prefix_tokens
        blocks = list(range(1, self.probe.num_blocks // 2)) if self.attn_weight > 0 else []
        best = x.clone()
        for _ in range(self.steps):
            xa = base + delta * mask
            out = self.probe.run(xa, tokens=False, attentions=bool(blocks))
            ce = F.cross_entropy(out.logits, y, reduction="none")
            ce = -ce if self.targeted else ce
            g_ce, = torch.autograd.grad(ce.sum(), delta, retain_graph=bool(blocks))
            grad = g_ce
            for i, b in enumerate(blocks):
                a = out.attentions[b].mean(1)                                     # (N, T, T)
                received = a.gather(2, target.view(-1, 1, 1).expand(-1, a.shape[1], 1))
                attn_loss = received.clamp_min(1e-30).log().mean((1, 2))
                g_b, = torch.autograd.grad(attn_loss.sum(), delta, retain_graph=i < len(blocks) - 1)
                grad = grad + self.attn_weight * pcgrad(g_b, g_ce)
            with torch.no_grad():
                if self.scoring == "best":
                    hit = self.success(out.logits, y)
                    best[hit] = xa[hit].detach()
                opt.zero_grad(set_to_none=True)
                delta.grad = -grad * mask          # ascend; only the patch pixels exist
                opt.step()
                sched.step()
                delta.copy_(torch.maximum(torch.minimum(delta, hi), lo))
        with torch.no_grad():
            final = base + delta.detach() * mask
            if self.scoring == "final":
                return final
            hit = self.success(self.predict(best), y)
            return torch.where(hit.view(-1, 1, 1, 1), best, final)
