"""Suite ``patch_occlusion``: accuracy when a fraction ρ of the patches is replaced by noise (AFAT Fig. 1).

AFAT / RSPC (Guo et al., CVPR 2023, arXiv:2306.07881) corrupts ``round(ρ·P)`` randomly chosen patches of the
model's patch grid with uniform noise — U[0, 1) in the model's normalised input space, as RSPC's code and
robustvit's ``afat`` training draw it (``noise_space=normalized``), or in pixels; see
:func:`robustvit.corruptions.occlusion.occlusion_noise` — and plots the accuracy for ρ = 0.1 … 0.5 with its spread
over random masks. For every ρ this suite draws ``masks`` independent masks per image; *per-mask accuracy* k is the
accuracy over all images under their k-th mask, and ``per_rho`` gives its ``min`` / ``mean`` / ``max`` over k (the
band of AFAT's Figure 1). Result keys: docs/natural-shift.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch

from robustvit.corruptions.occlusion import (NOISE_SPACES, OCCLUSION_MODES, apply_patch_masks, model_normalization,
                                             num_occluded, occlusion_patch_size, sample_patch_masks)
from robustvit.errors import RobustvitError
from robustvit.evaluation.suites.base import Batch, EvalContext, Suite, SuiteOptions, register_suite
from robustvit.options import option

DEFAULT_RHOS = (0.1, 0.2, 0.3, 0.4, 0.5)


def parse_rhos(value: Any) -> tuple[float, ...]:
    """``"0.1+0.3"`` / ``0.2`` / ``[0.1, 0.3]`` → sorted unique floats in [0, 1]."""
    items = str(value).replace(",", "+").split("+") if isinstance(value, (str, int, float)) else list(value)
    try:
        rhos = sorted({float(r) for r in items if str(r).strip()})
    except ValueError:
        raise RobustvitError(f"rhos must be numbers separated by '+', e.g. rhos=0.1+0.3, got {value!r}") from None
    if not rhos or any(not 0.0 <= r <= 1.0 for r in rhos):
        raise RobustvitError(f"rhos must be fractions in [0, 1] separated by '+', got {value!r}")
    return tuple(rhos)


def rho_key(rho: float) -> str:
    return f"{rho:g}"


@register_suite
class PatchOcclusion(Suite):
    name = "patch_occlusion"
    smoke = {"rhos": [0.25], "masks": 1}
    demo = ("patch_occlusion:limit=500:masks=3",), ("patch_occlusion:limit=100:rhos=0.1+0.3+0.5:masks=3",)
    description = "accuracy with a fraction rho of the patches replaced by uniform noise (AFAT), spread over random masks"

    @dataclass
    class Options(SuiteOptions):
        rhos: list[float] = option(default_factory=lambda: list(DEFAULT_RHOS), min=0, max=1,
                                   help="fractions of the patches occluded, joined by +")
        masks: int = option(10, min=1, help="random masks per image and rho")
        mode: Literal[OCCLUSION_MODES] = option("noise", help="what replaces an occluded patch")
        noise_space: Literal[NOISE_SPACES] = option("normalized", help="where the noise is U[0, 1): the model's "
                                                    "normalised input (RSPC, afat training) or pixels")
        patch_size: int | None = option(None, min=1, help="occlusion patch side in pixels (default: the model's "
                                                          "patch size, else 16)")

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.rhos = parse_rhos(self.opts.rhos)
        self.num_masks = self.opts.masks
        self.patch_size = self.opts.patch_size
        self.mode = self.opts.mode
        self.noise_space = self.opts.noise_space

    def parts(self, ctx: EvalContext) -> list[str]:
        return ["clean"] + [rho_key(r) for r in self.rhos]

    @torch.no_grad()
    def run(self, ctx: EvalContext, part: str, batch: Batch) -> dict[str, Any]:
        x, y = batch.x, batch.y
        if part == "clean":
            return {"n": int(y.numel()), "correct": int((ctx.model(x).argmax(1) == y).sum())}
        rho = float(part)
        ps = occlusion_patch_size(ctx.model, x.shape[-1], self.patch_size)
        h, w = x.shape[-2:]
        if h % ps or w % ps:
            raise RobustvitError(f"patch_occlusion: {h}×{w} images cannot be cut into {ps}-px patches; "
                                 "pass patch_size=P with P dividing the image size")
        masks = sample_patch_masks(len(y), (h // ps, w // ps), rho, num_masks=self.num_masks,
                                   generator=batch.generator, device=batch.generator.device)
        mean, std = model_normalization(ctx.model)
        correct = []
        for k in range(self.num_masks):   # one batched forward per mask draw (K × N images would not fit)
            xo = apply_patch_masks(x, masks[k:k + 1], ps, mode=self.mode, generator=batch.generator,
                                   noise_space=self.noise_space, mean=mean, std=std)[0]
            correct.append(int((ctx.model(xo).argmax(1) == y).sum()))
        return {"n": int(y.numel()), "correct": correct}

    def finalize(self, ctx: EvalContext, stats: dict[str, dict[str, Any]]) -> dict[str, Any]:
        clean = stats["clean"]
        n = max(int(clean.get("n", 0)), 1)
        size = ctx.model.spec.image_size if hasattr(ctx.model, "spec") else None
        ps = occlusion_patch_size(ctx.model, size, self.patch_size)
        num_patches = (size // ps) ** 2 if size else None
        per_rho: dict[str, dict[str, Any]] = {}
        for rho in self.rhos:
            s = stats[rho_key(rho)]
            accs = [c / max(s["n"], 1) for c in s["correct"]]
            per_rho[rho_key(rho)] = {
                "mean_accuracy": sum(s["correct"]) / max(s["n"] * len(accs), 1),
                "min": min(accs), "mean": sum(accs) / len(accs), "max": max(accs),
                "per_mask": accs,
                "occluded_patches": num_occluded(rho, num_patches) if num_patches else None,
            }
        return {"clean_accuracy": clean.get("correct", 0) / n, "num_images": int(clean.get("n", 0)),
                "rhos": list(self.rhos), "masks": self.num_masks, "mode": self.mode,
                "noise_space": self.noise_space if self.mode == "noise" else None, "patch_size": ps,
                "num_patches": num_patches, "per_rho": per_rho}
