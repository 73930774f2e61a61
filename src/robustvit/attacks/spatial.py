"""The spatial grid attack: the worst case over a grid of rotations and translations (Engstrom et al.
2019, "Exploring the Landscape of Spatial Robustness", arXiv:1712.02779), with the grid of Bhojanapalli
et al. 2021 ("Understanding Robustness of Transformers for Image Classification", arXiv:2103.14586):
9 × 9 translations and 31 rotations in ±30°, bilinear sampling with zero fill. An image is robust only if every
transform is classified correctly.

Chunks of (image, transform) pairs go through one ``grid_sample`` and one forward pass; fooled images drop out.
The grid runs from the smallest transform to the largest, so a fooled image keeps the *smallest* fooling
transform, a robust one the highest-cross-entropy one (``last_transforms``: (tx px, ty px, θ °) per image).
Translations: the papers' range scaled to the image (:func:`translation_convention`) unless ``max_translation``
is given. Not an ε-ball attack: ``eps``/``norm`` are accepted and ignored.

Example::

    atk = create_attack("spatial", model, translations=5, rotations=7)   # a reduced 5 × 5 × 7 grid
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from robustvit.attacks.base import Attack, register_attack
from robustvit.errors import RobustvitError
from robustvit.options import option

#: (name, pixels, at image side): the translation ranges of the papers.
CONVENTIONS = {"cifar": ("Engstrom et al. 2019, CIFAR-10: ±3 px at 32 px", 3.0, 32),
               "imagenet": ("Bhojanapalli et al. 2021: ±16 px at 384 px", 16.0, 384)}


def translation_convention(height: int, width: int) -> tuple[str, float]:
    """(description, max translation in pixels) for images of this size: the paper's range scaled to the
    shorter side — Engstrom et al.'s CIFAR-10 range for images up to 64 px, else Bhojanapalli et al.'s."""
    side = min(height, width)
    text, pixels, at = CONVENTIONS["cifar" if side <= 64 else "imagenet"]
    return text, pixels * side / at


def spatial_grid(translations: int = 9, rotations: int = 31, max_translation: float = 16.0,
                 max_rotation: float = 30.0) -> torch.Tensor:
    """(K, 3) float64 grid of (tx px, ty px, θ degrees), ordered from the smallest transform to the largest."""
    if translations < 1 or rotations < 1:
        raise RobustvitError(f"spatial grid sizes must be >= 1, got translations={translations}, rotations={rotations}")
    t = (torch.linspace(-max_translation, max_translation, translations, dtype=torch.float64) if translations > 1
         else torch.zeros(1, dtype=torch.float64))
    r = (torch.linspace(-max_rotation, max_rotation, rotations, dtype=torch.float64) if rotations > 1
         else torch.zeros(1, dtype=torch.float64))
    tx, ty, th = torch.meshgrid(t, t, r, indexing="ij")
    grid = torch.stack([tx.flatten(), ty.flatten(), th.flatten()], 1)
    size = (grid[:, 0].abs() + grid[:, 1].abs()) / max(max_translation, 1e-12) + grid[:, 2].abs() / max(max_rotation, 1e-12)
    return grid[torch.argsort(size, stable=True)]


def affine_matrices(params: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """(K, 2, 3) ``affine_grid`` matrices that rotate the image by θ about its centre, then shift it by
    (tx, ty) pixels (positive = right/down). ``affine_grid`` maps output to input coordinates, so this is
    the inverse transform, written in pixel units and converted to normalised units (non-square safe)."""
    tx, ty, th = params[:, 0], params[:, 1], torch.deg2rad(params[:, 2])
    c, s = torch.cos(th), torch.sin(th)
    # input = R(−θ)·(output − t) in pixel coordinates about the centre; normalised x_n = 2x/W, y_n = 2y/H.
    sx, sy = 2.0 / width, 2.0 / height
    # Columns: the pixel-space inverse rotation [[c, s], [−s, c]] conjugated by diag(sx, sy), then −R(−θ)·t in
    # normalised units.
    return torch.stack((torch.stack((c, s * sx / sy, -(c * tx + s * ty) * sx), 1),
                        torch.stack((-s * sy / sx, c, -(-s * tx + c * ty) * sy), 1)), 1)


def apply_transforms(x: torch.Tensor, params: torch.Tensor) -> torch.Tensor:
    """Warp each image ``x[i]`` by the transform ``params[i]`` = (tx px, ty px, θ °): bilinear, zero fill."""
    theta = affine_matrices(params.double().cpu(), x.shape[-2], x.shape[-1]).to(device=x.device, dtype=x.dtype)
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


@register_attack
class Spatial(Attack):
    """Worst case over a grid of translations × rotations (Engstrom et al. 2019, arXiv:1712.02779; the grid of
    Bhojanapalli et al. 2021); untargeted, unbounded."""

    name = "spatial"
    smoke = {"translations": 2, "rotations": 2}
    bounded = False
    masking_checks = ()

    @dataclass
    class Options(Attack.Options):
        translations: int = option(9, min=1, help="translations tried per axis")
        rotations: int = option(31, min=1, help="rotations tried")
        max_translation: float | None = option(None, min=0, help="largest shift in pixels (default: the papers' "
                                                                 "range scaled to the image, ±3 px at 32 px)")
        max_rotation: float = option(30.0, min=0, help="largest rotation in degrees")
        batch_size: int = option(256, min=1, help="image × transform pairs per forward pass")

    def __init__(self, model: nn.Module, **options: Any) -> None:
        super().__init__(model, **options)
        if self.targeted:
            raise RobustvitError("spatial is untargeted (it searches for any misclassifying transform); drop targeted=True")
        o = self.opts
        self.translations, self.rotations = o.translations, o.rotations
        self.max_translation = None if o.max_translation is None else float(o.max_translation)
        self.max_rotation = float(o.max_rotation)
        self.batch_size = o.batch_size
        spatial_grid(self.translations, self.rotations)  # validates the sizes
        self.last_transforms: torch.Tensor | None = None
        self.last_stats: dict[str, float] = {}

    def grid(self, height: int, width: int) -> torch.Tensor:
        max_t = self.max_translation if self.max_translation is not None else translation_convention(height, width)[1]
        return spatial_grid(self.translations, self.rotations, max_t, self.max_rotation)

    @property
    def num_transforms(self) -> int:
        return self.translations ** 2 * self.rotations

    def perturb(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        t0 = time.perf_counter()
        n, dev = x.shape[0], x.device
        params = self.grid(x.shape[-2], x.shape[-1])
        k = params.shape[0]
        best = x.clone()
        best_loss = torch.full((n,), -math.inf, device=dev)
        best_index = torch.full((n,), -1, dtype=torch.long, device=dev)    # into params; -1: none (identity)
        fooled = torch.zeros(n, dtype=torch.bool, device=dev)
        evaluated, pos = 0, 0
        # Transforms per step: enough to fill batch_size pairs with the images still robust.
        while pos < k:
            alive = (~fooled).nonzero().squeeze(1)
            if alive.numel() == 0:
                break
            step = max(1, self.batch_size // alive.numel())
            sel = params[pos:pos + step]
            m = sel.shape[0]
            pos += m
            xt = apply_transforms(x[alive].repeat_interleave(m, 0), sel.repeat(alive.numel(), 1))
            with torch.no_grad():
                logits = self.model(xt)
            evaluated += xt.shape[0]
            yi = y[alive].repeat_interleave(m)
            loss = F.cross_entropy(logits, yi, reduction="none").view(-1, m)
            wrong = (logits.argmax(1) != yi).view(-1, m)
            # Per image: the first fooling transform in grid order, else the highest-loss one.
            any_wrong = wrong.any(1)
            top = loss.argmax(1)
            choice = torch.where(any_wrong, wrong.float().argmax(1), top)
            score = torch.where(any_wrong, torch.full_like(loss[:, 0], math.inf), loss.gather(1, top[:, None])[:, 0])
            better = score > best_loss[alive]
            pick = torch.arange(alive.numel(), device=dev) * m + choice      # each alive image's chosen transform
            best[alive] = torch.where(better[:, None, None, None], xt[pick], best[alive])
            best_loss[alive] = torch.where(better, score, best_loss[alive])
            best_index[alive] = torch.where(better, pos - m + choice, best_index[alive])
            fooled[alive[any_wrong]] = True
        dt = time.perf_counter() - t0
        index = best_index.cpu()        # the one read of the chosen transforms, after the loop
        self.last_transforms = torch.zeros(n, 3, dtype=torch.float64)
        self.last_transforms[index >= 0] = params[index[index >= 0]].double()
        self.last_stats = {"transforms": float(k), "evaluated": float(evaluated), "seconds": dt,
                           "transforms_per_s": evaluated / max(dt, 1e-9)}
        return best
