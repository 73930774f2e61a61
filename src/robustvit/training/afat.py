"""AFAT: min-max adversarial feature alignment with a learned patch-corruption model (Guo, Stutz & Schiele,
"Improving Robustness of Vision Transformers by Reducing Sensitivity to Patch Corruptions", CVPR 2023;
reference code guoyongcs/RSPC).

* :class:`PatchCorruptor`: conv (kernel = stride = patch, 3 → 1, no bias) → GELU → Linear(N → N, no bias)
  over the N patch scores → top-ρ binarisation with a straight-through estimator (forward: occlude exactly
  ⌈ρN⌉ patches; backward: hardtanh of the incoming gradient). The reference thresholds at the ρ-quantile,
  which can occlude a different number on ties; we take the top-⌈ρN⌉ scores (the sign of the scores is
  learned, so occluding the highest or the lowest ones is the same model).
* Occluded patches are replaced by uniform noise U[0, 1): x̂ = (1 − O)·x + O·δ.
* Loss (``afat``): CE(clean) + λ·alignment, alignment = mean over blocks of the mean squared distance between
  the corrupted and the clean tokens (clean and corrupted images in one batch through
  :class:`robustvit.models.probe.ViTProbe`; the clean target is not detached, as in the reference).
  The classifier descends it; the corruption model ascends it with its own optimizer (SGD-Nesterov, lr 1e-4,
  momentum 0.9, weight decay 0.05, gradient norm clipped at 5, gradient negated before the step).
* Ablation variants: ``afat_random`` (⌈ρN⌉ random patches filled with noise, no corruption model) and
  ``afat_patchdrop`` (⌈ρN⌉ random patches blanked to 0 — the patch content is dropped, not replaced by noise).

Defaults λ = 0.005, ρ = 0.1. Needs a ViT the probe supports (timm ``VisionTransformer``).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from robustvit.errors import RobustvitError
from robustvit.models.probe import ViTProbe
from robustvit.training.losses import LossOutput, TrainingLoss, classification_loss, register_loss
from robustvit.utils import derive_seed


def num_occluded(rho: float, num_patches: int) -> int:
    """⌈ρN⌉ patches (at least 1 for ρ > 0)."""
    return min(num_patches, math.ceil(rho * num_patches - 1e-9))


class _TopKOcclusion(torch.autograd.Function):
    """Forward: 1 for the k highest scores per row, else 0. Backward: hardtanh of the gradient (STE)."""

    @staticmethod
    def forward(ctx: Any, scores: torch.Tensor, k: int) -> torch.Tensor:  # noqa: D102
        idx = scores.topk(k, dim=1).indices
        return torch.zeros_like(scores).scatter_(1, idx, 1.0)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:  # noqa: D102
        return F.hardtanh(grad), None


def occlusion_to_pixels(occ: torch.Tensor, grid: tuple[int, int], patch: int) -> torch.Tensor:
    """(N, P) patch occlusion → (N, 1, H, W) pixel occlusion (differentiable)."""
    n = occ.shape[0]
    return occ.view(n, 1, *grid).repeat_interleave(patch, 2).repeat_interleave(patch, 3)


def corrupt(x: torch.Tensor, occ: torch.Tensor, fill: torch.Tensor, grid: tuple[int, int], patch: int) -> torch.Tensor:
    """x̂ = (1 − O)·x + O·fill, O the pixel occlusion of the (N, P) patch occlusion ``occ``."""
    o = occlusion_to_pixels(occ.to(x.dtype), grid, patch)
    return x * (1 - o) + fill * o


class PatchCorruptor(nn.Module):
    """The learned patch-corruption model: scores (N, P) → occlusion of the top ⌈ρP⌉ patches (STE)."""

    def __init__(self, patch_size: int, grid: tuple[int, int], rho: float = 0.1) -> None:
        super().__init__()
        if not 0 < rho < 1:
            raise RobustvitError(f"afat: rho must be in (0, 1), got {rho}")
        self.patch_size, self.grid, self.rho = int(patch_size), (int(grid[0]), int(grid[1])), float(rho)
        p = self.grid[0] * self.grid[1]
        self.conv = nn.Conv2d(3, 1, self.patch_size, self.patch_size, bias=False)
        self.act = nn.GELU()
        self.fc = nn.Linear(p, p, bias=False)
        self.k = num_occluded(self.rho, p)

    def scores(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.act(self.conv(x).flatten(1)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(N, P) occlusion in {0, 1} with exactly ⌈ρP⌉ ones per image; gradients reach the scores (STE)."""
        return _TopKOcclusion.apply(self.scores(x), self.k)


def random_occlusion(n: int, num_patches: int, k: int, gen: torch.Generator, device: torch.device) -> torch.Tensor:
    """(n, P) occlusion of k uniformly random patches per image."""
    keys = torch.rand(n, num_patches, generator=gen, device=device)
    return torch.zeros(n, num_patches, device=device).scatter_(1, keys.topk(k, dim=1).indices, 1.0)


@register_loss
class AFAT(TrainingLoss):
    """Min-max feature alignment (``afat``). Options: ``lam`` (0.005), ``rho`` (0.1), ``lr`` (1e-4),
    ``momentum`` (0.9), ``weight_decay`` (0.05), ``grad_clip`` (5.0) of the corruption model,
    ``label_smoothing`` (0.1), ``seed`` (0)."""

    name = "afat"
    mode = "learned"   # learned | random | patchdrop

    def __init__(self, lam: float = 0.005, rho: float = 0.1, lr: float = 1e-4, momentum: float = 0.9,
                 weight_decay: float = 0.05, grad_clip: float = 5.0, label_smoothing: float = 0.1,
                 seed: int = 0) -> None:
        super().__init__()
        self.lam, self.rho, self.label_smoothing, self.seed = float(lam), float(rho), float(label_smoothing), int(seed)
        self.opt_args = {"lr": float(lr), "momentum": float(momentum), "weight_decay": float(weight_decay)}
        self.grad_clip = float(grad_clip)
        self.corruptor: PatchCorruptor | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        self.register_buffer("calls", torch.zeros((), dtype=torch.long))
        self._sums = {"align": 0.0, "n": 0}

    def setup(self, model: nn.Module) -> None:
        """Build the corruption model for ``model``'s patch grid (called by the trainer before training)."""
        probe = self._probe_for(model)
        if probe.grid_size is None or probe.patch_size is None:
            raise RobustvitError("afat needs a ViT with a fixed patch grid")
        self.grid, self.patch = probe.grid_size, probe.patch_size
        self.num_patches = self.grid[0] * self.grid[1]
        self.k = num_occluded(self.rho, self.num_patches)
        if self.mode == "learned" and self.corruptor is None:
            device = next(model.parameters()).device
            self.corruptor = PatchCorruptor(self.patch, self.grid, self.rho).to(device)
            self.optimizer = torch.optim.SGD(self.corruptor.parameters(), nesterov=True, **self.opt_args)

    def forward(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, epoch: int) -> LossOutput:
        if not hasattr(self, "grid"):
            self.setup(model)
        gen = torch.Generator(device=x.device)
        gen.manual_seed(derive_seed(self.seed, "afat", int(self.calls), _rank()))
        self.calls += 1
        n = x.shape[0]
        if self.corruptor is not None:
            occ = self.corruptor(x)
        else:
            occ = random_occlusion(n, self.num_patches, self.k, gen, x.device)
        fill = (torch.zeros_like(x) if self.mode == "patchdrop"
                else torch.rand(x.shape, generator=gen, device=x.device, dtype=x.dtype))
        x_hat = corrupt(x, occ, fill, self.grid, self.patch)
        out = self._probe_for(model).run(torch.cat([x, x_hat]), tokens=True)
        align = torch.stack([F.mse_loss(t[n:].float(), t[:n].float()) for t in out.tokens]).mean()
        clean, corrupted = out.logits[:n], out.logits[n:]
        self._sums["align"] += float(align.detach()) * n
        self._sums["n"] += n
        return classification_loss(clean, y, self.label_smoothing) + self.lam * align, clean, corrupted

    def _probe_for(self, model: nn.Module) -> ViTProbe:
        """One probe per model (it checks itself against the model's forward once, on its first batch)."""
        probe = self.__dict__.get("_probe")
        if probe is None or probe.model is not model:
            probe = ViTProbe(model)
            self.__dict__["_probe"] = probe
        return probe

    def after_step(self) -> None:
        """The corruption model *ascends* the alignment loss: negate its gradient, clip, SGD step."""
        if self.corruptor is None or self.optimizer is None:
            return
        params = [p for p in self.corruptor.parameters() if p.grad is not None]
        if not params:
            return
        for p in params:
            p.grad.neg_()
        nn.utils.clip_grad_norm_(params, self.grad_clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def metrics(self) -> dict[str, float]:
        s, self._sums = self._sums, {"align": 0.0, "n": 0}
        return {"align_loss": s["align"] / s["n"]} if s["n"] else {}

    def get_extra_state(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict() if self.optimizer is not None else None}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        if self.optimizer is not None and state.get("optimizer") is not None:
            self.optimizer.load_state_dict(state["optimizer"])


@register_loss
class AFATRandom(AFAT):
    """Ablation: ⌈ρN⌉ random patches replaced by uniform noise; no corruption model (no min-max)."""

    name = "afat_random"
    mode = "random"


@register_loss
class AFATPatchDrop(AFAT):
    """Ablation: ⌈ρN⌉ random patches blanked (set to 0); no corruption model."""

    name = "afat_patchdrop"
    mode = "patchdrop"


def _rank() -> int:
    dist = torch.distributed
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
