"""Attention stability (AFAT: "Improving Robustness of Vision Transformers by Reducing Sensitivity to
Patch Corruptions", Guo et al., CVPR 2023, arXiv:2306.07881, Fig. 1, 3, 4): the cosine similarity between
clean and patch-occluded attention maps per head and layer, averaged over the data set — ``rho`` of the patches
(AFAT: 0.1) replaced by uniform noise U[0, 1) in the model's normalised input, as RSPC and the ``afat`` training
draw it (``noise_space=pixel``: in pixels); a histogram over images of the mean similarity; its distribution over
``masks`` random masks (AFAT: 100–1000) for the first ``images`` images; and the paper's picture: the centre
patch's attention (heads averaged) in every layer, clean vs occluded, for the first image and mask.

Defined for every family with one attention map per block: ViT/DeiT/FAN token attention, XCiT's channel
attention and Swin's windowed attention (maps flattened per head; Swin's stages differ in head count, so
``cosine`` is a ragged layers × heads list); the centre-patch picture needs token attention on one patch grid.
timm's parallel-branch blocks report their branches' maps stacked along the heads. CaiT's talking-heads maps are
mixed across heads after the softmax, so they and their cosines can be negative: the histogram then spans
[−1, 1] (``histogram.bins``), else [0, 1]."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from robustvit.analysis import checks
from robustvit.analysis.base import Analysis, Context, register_analysis, tolist
from robustvit.corruptions.occlusion import (NOISE_SPACES, model_normalization, num_occluded, occlude_patches,
                                             occlusion_patch_size)
from robustvit.errors import RobustvitError
from robustvit.options import option
from robustvit.plotting import finish_figure, integer_ticks
from robustvit.protocols import ANALYSIS_PROTOCOLS

BINS = 20
#: AFAT's occluded fraction and fewest masks per image (their paper setting: robustvit.protocols).
PAPER_RHO = ANALYSIS_PROTOCOLS["attention_stability"].conditions["rho"]
PAPER_MIN_MASKS = ANALYSIS_PROTOCOLS["attention_stability"].conditions["min_masks"]


@dataclass
class StabilityOptions:
    rho: float = option(PAPER_RHO, min=0, max=1, help="fraction of the patches occluded (AFAT: 0.1)")
    masks: int = option(PAPER_MIN_MASKS, min=1, help="random masks per image for the distribution (AFAT: 100–1000)")
    images: int = option(4, min=1, help="images of the mask distribution and the picture")
    patch_size: int = option(0, min=0, help="occluded patch side in pixels (0: the model's patch size)")
    noise_space: Literal[NOISE_SPACES] = option("normalized", help="where the noise is U[0, 1): the model's "
                                                "normalised input (RSPC, afat training) or pixels")


def layer_cosines(clean: list[torch.Tensor], other: list[torch.Tensor]) -> list[torch.Tensor]:
    """Per layer (N, heads, …) maps → per layer (N, heads) cosine similarity of the flattened maps (float64)."""
    out = []
    for a, b in zip(clean, other):
        a, b = a.flatten(2).double(), b.flatten(2).double()
        out.append((a * b).sum(-1) / torch.sqrt((a * a).sum(-1) * (b * b).sum(-1)).clamp_min(1e-300))
    return out


def image_mean(cos: list[torch.Tensor]) -> torch.Tensor:
    """(N,) mean cosine over all heads of all layers (every head weighs the same)."""
    return torch.cat(cos, 1).mean(1)


def check_stability_support(probe: Any, model: torch.nn.Module) -> None:
    """One-line refusal for models without one attention map per block (parallel attention branches)."""
    mods = getattr(probe, "attn_modules", None)
    if mods is not None and any(m is None for m in mods):
        blk = next(type(b).__name__ for b, m in zip(probe.blocks, mods) if m is None)
        raise RobustvitError(f"attention_stability needs one attention map per block; {blk} blocks of "
                             f"{type(getattr(model, 'net', model)).__name__} have parallel or no attention branches "
                             "(it applies to ViT, DeiT, XCiT, Swin and FAN blocks with one attention each)")


def _maps(ctx: Context, x: torch.Tensor) -> list[torch.Tensor]:
    """Each block's attention maps of ``x``; refused when a block gives none."""
    maps = ctx.probe.run(x, tokens=False, attentions=True).attentions
    if any(a.numel() == 0 for a in maps):
        raise RobustvitError("attention_stability: a block gave no attention map (is its attention module "
                             "one the probe can read?); it applies to ViT, DeiT, XCiT, Swin and FAN")
    return maps


def centre_patch(grid: tuple[int, int]) -> tuple[int, int]:
    """The centre patch (row, col) of a grid: (gh // 2, gw // 2)."""
    return grid[0] // 2, grid[1] // 2


def centre_patch_maps(probe: Any, maps: list[torch.Tensor]) -> torch.Tensor | None:
    """(layers, gh, gw): the first image's centre-patch attention over the patches per layer, heads averaged;
    None where the maps are not token attention on one grid (XCiT, Swin)."""
    grid = getattr(probe, "grid_size", None)
    if grid is None or probe.family in ("xcit", "swin", "cnn"):
        return None
    gh, gw = grid
    pre = probe.num_prefix_tokens
    if any(a.shape[-1] != pre + gh * gw or a.shape[-2] != pre + gh * gw for a in maps):
        return None
    r, c = centre_patch(grid)
    q = pre + r * gw + c
    return torch.stack([a[0, :, q, pre:].mean(0).view(gh, gw) for a in maps]).cpu()


def compute_stability(ctx: Context, o: StabilityOptions) -> dict[str, Any]:
    probe = ctx.probe
    rho, masks = o.rho, o.masks
    check_stability_support(probe, ctx.model)
    ps = occlusion_patch_size(ctx.model, patch_size=o.patch_size or None)
    mean, std = model_normalization(ctx.model)
    noise = {"noise_space": o.noise_space, "mean": mean, "std": std}
    lo = 0.0 if getattr(probe, "softmax_maps", True) else -1.0       # talking heads: maps (and cosines) may be < 0

    def unit(x: torch.Tensor, y: torch.Tensor, pending: list[str], c: int):  # noqa: ANN202
        xo, _ = occlude_patches(x, rho, ps, generator=ctx.generator("occlude", c), **noise)
        cos = layer_cosines(_maps(ctx, x), _maps(ctx, xo))               # per layer (N, heads_l)
        per_image = image_mean(cos)
        hist = torch.histc(per_image.float().clamp(lo, 1.0), bins=BINS, min=lo, max=1.0)
        yield "stats", {"sum": [c_.sum(0).cpu().tolist() for c_ in cos], "n": int(x.shape[0]),
                        "hist": hist.cpu().tolist(), "sum_image": float(per_image.sum())}

    st = ctx.units(["stats"], unit)["stats"]
    cosine = [torch.tensor(row, dtype=torch.float64) / st["n"] for row in st["sum"]]
    # distribution over many random masks for a few images
    x, _ = ctx.batch(0, min(o.images, ctx.num_images))
    with torch.no_grad():
        clean = _maps(ctx, x)
        xs, _ = occlude_patches(x, rho, ps, num_masks=masks, generator=ctx.generator("masks"), **noise)  # (K, n, …)
        dist = []
        per = max(1, ctx.batch_size // x.shape[0])
        for k0 in range(0, masks, per):
            chunk = xs[k0:k0 + per]
            k = chunk.shape[0]
            rep = [a.repeat(k, *([1] * (a.ndim - 1))) for a in clean]
            dist.append(image_mean(layer_cosines(rep, _maps(ctx, chunk.flatten(0, 1)))).view(k, -1))
        dist_t = torch.cat(dist).T                                            # (n, K)
        occluded_maps = _maps(ctx, xs[0])
    mid = probe.num_blocks // 2
    cp_clean, cp_occ = centre_patch_maps(probe, clean), centre_patch_maps(probe, occluded_maps)
    num_patches = (x.shape[-2] // ps) * (x.shape[-1] // ps)
    out: dict[str, Any] = {
        "cosine": [tolist(c_, 6) for c_ in cosine], "heads": [len(c_) for c_ in cosine],
        "mean": float(torch.cat(cosine).mean()), "rho": rho, "patch_size": ps,
        "model_patch_size": getattr(getattr(ctx.model, "spec", None), "patch_size", None),
        "num_patches": num_patches, "occluded_patches": num_occluded(rho, num_patches), "noise_space": o.noise_space,
        "histogram": {"bins": [round(lo + (1 - lo) * i / BINS, 10) for i in range(BINS + 1)],
                      "counts": [int(v) for v in st["hist"]]},
        "image_mean": st["sum_image"] / st["n"],
        "mask_distribution": tolist(dist_t, 6), "num_masks": masks, "centre_patch": None,
        "_images": x.cpu(), "_occluded": xs[0].cpu(), "_layer": mid,
        "_clean_map": clean[mid][:1].mean(1)[0].cpu(), "_occluded_map": occluded_maps[mid][:1].mean(1)[0].cpu()}
    if cp_clean is not None and cp_occ is not None:
        r, c = centre_patch(probe.grid_size)
        out["centre_patch"] = {"patch": [r, c], "image": 0, "mask": 0, "heads": "mean",
                               "clean": tolist(cp_clean, 6), "occluded": tolist(cp_occ, 6)}
    return out


def _range(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float]:
    """Colour range of two attention maps: from 0 (or their negative minimum: CaiT's talking heads) to their max."""
    lo = min(0.0, float(a.min()), float(b.min()))
    return lo, max(lo, float(a.max()), float(b.max()))


def plot_stability(result: dict[str, Any], out: Path) -> list[str]:
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    rows = result["cosine"]
    width = max(len(r) for r in rows)
    c = torch.full((len(rows), width), float("nan"))
    for i, r in enumerate(rows):
        c[i, :len(r)] = torch.tensor(r)
    lo = float(c[~c.isnan()].min())
    im = axes[0].imshow(c.T.numpy(), vmin=min(0.5, lo), vmax=max(1.0, lo), cmap="viridis", aspect="auto")
    integer_ticks(axes[0], "both")
    axes[0].set_xlabel("layer"), axes[0].set_ylabel("head"), axes[0].set_title("cosine(clean, occluded)")
    fig.colorbar(im, ax=axes[0])
    h = result["histogram"]
    axes[1].bar(h["bins"][:-1], h["counts"], width=h["bins"][1] - h["bins"][0], align="edge")
    axes[1].set_xlabel("mean cosine similarity per image"), axes[1].set_ylabel("images")
    axes[1].set_title("Over the data set")
    d = torch.tensor(result["mask_distribution"])
    axes[2].boxplot([r.numpy() for r in d], showfliers=True)
    axes[2].set_xlabel("image"), axes[2].set_ylabel("mean cosine similarity")
    axes[2].set_title(f"Over {result['num_masks']} random masks")
    title = f"Attention stability under {result['rho']:.0%} patch occlusion — {result.get('model', '')}"
    files = [finish_figure(fig, out / "attention_stability.png", title)]
    if result.get("_images") is not None and result.get("centre_patch"):
        files.append(plot_centre_patch(result, out))
    elif result.get("_images") is not None:
        fig, axes = plt.subplots(1, 4, figsize=(11, 3))
        axes[0].imshow(result["_images"][0].permute(1, 2, 0).numpy()), axes[0].set_title("clean")
        axes[1].imshow(result["_occluded"][0].permute(1, 2, 0).numpy()), axes[1].set_title("occluded")
        vmin, vmax = _range(result["_clean_map"], result["_occluded_map"])
        for ax, key in zip(axes[2:], ("clean", "occluded")):
            ax.imshow(result[f"_{key}_map"].numpy(), vmin=vmin, vmax=vmax, cmap="inferno", aspect="auto")
            ax.set_title(f"attention, layer {result['_layer']} ({key})", fontsize=8)
        for ax in axes:
            ax.axis("off")
        files.append(finish_figure(fig, out / "attention_stability_maps.png"))
    return files


def plot_centre_patch(result: dict[str, Any], out: Path) -> str:
    """AFAT's picture: the centre patch's attention per layer (rows), clean vs occluded (columns), below the two
    images with the centre patch marked."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle
    cp = result["centre_patch"]
    clean, occ = torch.tensor(cp["clean"]), torch.tensor(cp["occluded"])
    L = clean.shape[0]
    fig, axes = plt.subplots(L + 1, 2, figsize=(3.6, 1.75 * (L + 1)), squeeze=False)
    ps = result["patch_size"]
    r, c = cp["patch"]
    for j, (img, title) in enumerate(((result["_images"][0], "clean"), (result["_occluded"][0], "occluded"))):
        axes[0, j].imshow(img.permute(1, 2, 0).clamp(0, 1).numpy())
        axes[0, j].add_patch(Rectangle((c * ps - 0.5, r * ps - 0.5), ps, ps, fill=False, ec="cyan", lw=1.5))
        axes[0, j].set_title(title, fontsize=9)
    for i in range(L):
        vmin, vmax = _range(clean[i], occ[i])
        for j, m in enumerate((clean[i], occ[i])):
            axes[i + 1, j].imshow(m.numpy(), vmin=vmin, vmax=vmax, cmap="inferno")
        axes[i + 1, 0].set_ylabel(f"layer {i}", fontsize=8)
    for ax in axes.flat:
        ax.set_xticks([]), ax.set_yticks([])
    return finish_figure(fig, out / "attention_stability_maps.png",
                         f"Centre-patch attention, clean vs {result['rho']:.0%} occluded", fontsize=8)


@register_analysis
class AttentionStability(Analysis):
    name = "attention_stability"
    check = staticmethod(checks.attention_stability)
    demo = ("vit",)
    requires_probe = True
    smoke = {"masks": 2, "images": 1}
    families = ("vit", "deit", "xcit", "swin", "fan")
    description = "cosine similarity of clean vs patch-occluded attention maps per head and layer (AFAT Fig. 1, 3, 4)"
    Options = StabilityOptions
    run = staticmethod(compute_stability)
    plot = staticmethod(plot_stability)


attention_stability = AttentionStability.function(
    """``{"cosine": layers × heads, "histogram", "mask_distribution", "centre_patch"}`` (clean vs occluded
    attention). Keywords: :class:`StabilityOptions` and the run's limit, batch_size, seed, device, store,
    progress.""")
