"""AFAT: min-max adversarial feature alignment with a learned patch-corruption model (Guo, Stutz & Schiele,
"Improving Robustness of Vision Transformers by Reducing Sensitivity to Patch Corruptions", CVPR 2023;
reference code guoyongcs/RSPC).

* :class:`PatchCorruptor`: conv (kernel = stride = patch, 3 → 1) → GELU → Linear(N → N) over the N patch
  scores → occlusion of the top ⌈ρN⌉ with a straight-through estimator (:class:`_TopKOcclusion`).
* Occluded patches get uniform noise δ (:func:`robustvit.corruptions.occlusion.occlusion_noise`, shared with the
  ``patch_occlusion`` suite): U[0, 1) in the model's normalised space as RSPC (``noise_space=normalized``) or in
  pixels (``pixel``); x̂ = (1 − O)·x + O·δ.
* Loss: CE(clean) + λ·mean over blocks of the MSE between corrupted and clean tokens (both in one batch through
  :class:`robustvit.models.probe.ViTProbe`; the clean target not detached, as the reference; soft targets go
  through the CE). The corruption model ascends it with its own SGD-Nesterov (lr 1e-4, momentum 0.9, weight
  decay 0.05, gradient norm clipped at 5).

**Step rule.** RSPC trains under AMP and timm's ``NativeScaler`` unscales only the classifier's optimiser, so the
corruption model's estimator sees λ·∂L_align/∂M times the loss scale (2¹⁶): the hardtanh saturates to ±1 and the
clip at 5 acts on every step. ``step_rule=rspc`` (default) reproduces this with a constant ``grad_scale`` = 65536
(timm's initial scale; the saturated sign does not depend on its dynamics); ``step_rule=paper`` is Algorithm 1's
plain gradient (scale 1).

Ablations: ``afat_random`` (⌈ρN⌉ random patches filled with noise, no corruption model) and ``afat_patchdrop``
(⌈ρN⌉ random patches set to 0). Defaults λ = 0.005, ρ = 0.1. Needs a ViT the probe supports.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

from robustvit.corruptions.occlusion import NOISE_SPACES, model_normalization, occlusion_noise
from robustvit.errors import RobustvitError
from robustvit.models.probe import ViTProbe
from robustvit.options import option
from robustvit.training.losses.base import LossOutput, TrainingLoss, classification_loss, register_loss


def num_occluded(rho: float, num_patches: int) -> int:
    """⌈ρN⌉ patches (at least 1 for ρ > 0)."""
    return min(num_patches, math.ceil(rho * num_patches - 1e-9))


class _TopKOcclusion(torch.autograd.Function):
    """Forward: 1 for the k highest scores per row, else 0 (RSPC thresholds at the ρ-quantile, which can occlude
    another number on ties; the scores' sign is learned, so highest or lowest is the same model). Backward:
    hardtanh(``scale``·gradient) (STE; ``scale`` emulates the AMP loss scale RSPC's corruption model sees)."""

    @staticmethod
    def forward(ctx: Any, scores: torch.Tensor, k: int, scale: float = 1.0) -> torch.Tensor:  # noqa: D102
        ctx.scale = float(scale)
        idx = scores.topk(k, dim=1).indices
        return torch.zeros_like(scores).scatter_(1, idx, 1.0)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:  # noqa: D102
        return F.hardtanh(grad * ctx.scale if ctx.scale != 1.0 else grad), None, None


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

    def __init__(self, patch_size: int, grid: tuple[int, int], rho: float = 0.1, grad_scale: float = 1.0) -> None:
        super().__init__()
        if not 0 < rho < 1:
            raise RobustvitError(f"afat: rho must be in (0, 1), got {rho}")
        self.patch_size, self.grid, self.rho = int(patch_size), (int(grid[0]), int(grid[1])), float(rho)
        p = self.grid[0] * self.grid[1]
        self.conv = nn.Conv2d(3, 1, self.patch_size, self.patch_size, bias=False)
        self.act = nn.GELU()
        self.fc = nn.Linear(p, p, bias=False)
        self.k = num_occluded(self.rho, p)
        self.grad_scale = float(grad_scale)

    def scores(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.act(self.conv(x).flatten(1)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(N, P) occlusion in {0, 1} with exactly ⌈ρP⌉ ones per image; gradients reach the scores (STE)."""
        return _TopKOcclusion.apply(self.scores(x), self.k, self.grad_scale)


def random_occlusion(n: int, num_patches: int, k: int, gen: torch.Generator, device: torch.device) -> torch.Tensor:
    """(n, P) occlusion of k uniformly random patches per image."""
    keys = torch.rand(n, num_patches, generator=gen, device=device)
    return torch.zeros(n, num_patches, device=device).scatter_(1, keys.topk(k, dim=1).indices, 1.0)


@dataclass
class AFATOptions:
    """Options of ``afat`` and its ablations."""

    lam: float = option(0.005, min=0, help="weight λ of the alignment loss")
    rho: float = option(0.1, min=0, max=1, help="fraction ρ of occluded patches")
    lr: float = option(1e-4, min=0, help="corruption model: SGD learning rate")
    momentum: float = option(0.9, min=0, help="corruption model: Nesterov momentum")
    weight_decay: float = option(0.05, min=0, help="corruption model: weight decay")
    grad_clip: float = option(5.0, min=0, help="corruption model: gradient-norm clip")
    step_rule: Literal["rspc", "paper"] = option("rspc", help="rspc: AMP-scaled gradient (saturated STE); "
                                                 "paper: Algorithm 1's plain gradient")
    grad_scale: float = option(65536.0, min=1, help="loss scale emulated by step_rule=rspc")
    noise_space: Literal[NOISE_SPACES] = option("normalized", help="where the fill noise is U[0, 1)")
    label_smoothing: float = option(0.1, min=0, max=1, help="label smoothing of the clean CE")
    seed: int = option(0, help="seed of the noise (and the random ablations' patches)")


@register_loss
class AFAT(TrainingLoss):
    """Min-max feature alignment (``afat``); options in :class:`AFATOptions`."""

    name = "afat"
    mode = "learned"   # learned | random | patchdrop
    soft_targets = True
    counts_calls = True
    Options = AFATOptions

    def __init__(self, options: Any = None, **kwargs: Any) -> None:
        super().__init__(options, **kwargs)
        o = self.options
        if not 0 < o.rho < 1:
            raise RobustvitError(f"afat: rho must be in (0, 1), got {o.rho}")
        self.grad_clip = float(o.grad_clip)
        self.grad_scale = float(o.grad_scale) if o.step_rule == "rspc" else 1.0
        self.corruptor: PatchCorruptor | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        self._sums = {"align": 0.0, "n": 0}

    def setup(self, model: nn.Module) -> None:
        """Build the corruption model for ``model``'s patch grid."""
        probe, o = self._probe_for(model), self.options
        if probe.grid_size is None or probe.patch_size is None:
            raise RobustvitError("afat needs a ViT with a fixed patch grid")
        self.grid, self.patch = probe.grid_size, probe.patch_size
        self.num_patches = self.grid[0] * self.grid[1]
        self.k = num_occluded(o.rho, self.num_patches)
        if self.mode == "learned" and self.corruptor is None:
            device = next(model.parameters()).device
            self.corruptor = PatchCorruptor(self.patch, self.grid, o.rho, self.grad_scale).to(device)
            self.optimizer = torch.optim.SGD(self.corruptor.parameters(), nesterov=True, lr=o.lr, momentum=o.momentum,
                                             weight_decay=o.weight_decay)

    def forward(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, epoch: int) -> LossOutput:
        if not hasattr(self, "grid"):
            self.setup(model)
        gen = self.seeded_generator(self.options.seed, "afat", x.device)
        n = x.shape[0]
        if self.corruptor is not None:
            occ = self.corruptor(x)
        else:
            occ = random_occlusion(n, self.num_patches, self.k, gen, x.device)
        fill = torch.zeros_like(x) if self.mode == "patchdrop" else self.noise(model, x, gen)
        x_hat = corrupt(x, occ, fill, self.grid, self.patch)
        out = self._probe_for(model).run(torch.cat([x, x_hat]), tokens=True)
        align = torch.stack([F.mse_loss(t[n:].float(), t[:n].float()) for t in out.tokens]).mean()
        clean, corrupted = out.logits[:n], out.logits[n:]
        self._sums["align"] += float(align.detach()) * n
        self._sums["n"] += n
        o = self.options
        return classification_loss(clean, y, o.label_smoothing) + o.lam * align, clean, corrupted

    def noise(self, model: nn.Module, x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        """The occlusion fill (:func:`robustvit.corruptions.occlusion.occlusion_noise`) for ``noise_space``."""
        mean, std = model_normalization(model)
        return occlusion_noise(tuple(x.shape), noise_space=self.options.noise_space, mean=mean, std=std,
                               generator=gen, device=x.device, dtype=x.dtype)

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


@register_loss(aliases=("afat-random",))
class AFATRandom(AFAT):
    """Ablation: ⌈ρN⌉ random patches replaced by uniform noise; no corruption model (no min-max)."""

    name = "afat_random"
    mode = "random"


@register_loss(aliases=("afat-patchdrop",))
class AFATPatchDrop(AFAT):
    """Ablation: ⌈ρN⌉ random patches blanked (set to 0); no corruption model."""

    name = "afat_patchdrop"
    mode = "patchdrop"

