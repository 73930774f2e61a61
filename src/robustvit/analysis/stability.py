"""Attention stability (AFAT: "Improving Robustness of Vision Transformers by Reducing Sensitivity to
Patch Corruptions", Guo et al., CVPR 2023, arXiv:2306.07881, Fig. 1, 3, 4): the cosine similarity between
clean and patch-occluded attention maps per head and layer — ``rho`` of the patches (default 0.1, AFAT's ρ)
replaced by uniform noise — averaged over the data set; a histogram over images of the mean similarity;
its distribution over ``masks`` random masks for the first ``images`` images; and a clean-vs-occluded
picture of the attention maps.

Defined for every family with attention maps: ViT/DeiT/FAN token attention, XCiT's cross-covariance
(channel) attention and Swin's windowed attention (maps flattened per head)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from robustvit.analysis.base import Analysis, Context, make_context, tolist
from robustvit.corruptions.occlusion import occlude_patches, occlusion_patch_size

BINS = 20


def attention_cosine(clean: list[torch.Tensor], other: list[torch.Tensor]) -> torch.Tensor:
    """Per layer (N, heads, …) maps → (N, layers, heads) cosine similarity of the flattened maps (float64)."""
    out = []
    for a, b in zip(clean, other):
        a, b = a.flatten(2).double(), b.flatten(2).double()
        out.append((a * b).sum(-1) / torch.sqrt((a * a).sum(-1) * (b * b).sum(-1)).clamp_min(1e-300))
    return torch.stack(out, 1)


def _maps(ctx: Context, x: torch.Tensor) -> list[torch.Tensor]:
    return ctx.probe.run(x, tokens=False, attentions=True).attentions


def compute_stability(ctx: Context, rho: float = 0.1, masks: int = 50, images: int = 4,
                      patch_size: int = 0) -> dict[str, Any]:
    probe = ctx.probe
    ps = occlusion_patch_size(ctx.model, patch_size=patch_size or None)

    def unit(x: torch.Tensor, y: torch.Tensor, pending: list[str], c: int):  # noqa: ANN202
        xo, _ = occlude_patches(x, rho, ps, generator=ctx.generator("occlude", c))
        cos = attention_cosine(_maps(ctx, x), _maps(ctx, xo))          # (N, L, H)
        per_image = cos.mean((1, 2))
        hist = torch.histc(per_image.float(), bins=BINS, min=0.0, max=1.0)
        yield "stats", {"sum": cos.sum(0).cpu().tolist(), "n": int(x.shape[0]), "hist": hist.cpu().tolist(),
                        "sum_image": float(per_image.sum())}

    st = ctx.units(["stats"], unit)["stats"]
    cosine = torch.tensor(st["sum"], dtype=torch.float64) / st["n"]
    # distribution over many random masks for a few images
    x, _ = ctx.batch(0, min(images, ctx.num_images))
    g = ctx.generator("masks")
    with torch.no_grad():
        clean = _maps(ctx, x)
        xs, _ = occlude_patches(x, rho, ps, num_masks=masks, generator=g)     # (K, n, 3, H, W)
        dist = []
        per = max(1, ctx.batch_size // x.shape[0])
        for k0 in range(0, masks, per):
            chunk = xs[k0:k0 + per]
            k = chunk.shape[0]
            maps = _maps(ctx, chunk.flatten(0, 1))
            rep = [a.repeat(k, *([1] * (a.ndim - 1))) for a in clean]
            dist.append(attention_cosine(rep, maps).mean((1, 2)).view(k, -1))
        dist_t = torch.cat(dist).T                                            # (n, K)
        occluded_maps = _maps(ctx, xs[0])
    mid = probe.num_blocks // 2
    return {"cosine": tolist(cosine, 6), "mean": float(cosine.mean()), "rho": rho, "patch_size": ps,
            "histogram": {"bins": [i / BINS for i in range(BINS + 1)], "counts": [int(v) for v in st["hist"]]},
            "image_mean": st["sum_image"] / st["n"],
            "mask_distribution": tolist(dist_t, 6), "num_masks": masks,
            "_images": x.cpu(), "_occluded": xs[0].cpu(), "_layer": mid,
            "_clean_map": clean[mid][:1].mean(1)[0].cpu(), "_occluded_map": occluded_maps[mid][:1].mean(1)[0].cpu()}


def attention_stability(model: torch.nn.Module, dataset: Any, *, rho: float = 0.1, masks: int = 50,
                        images: int = 4, **common: Any) -> dict[str, Any]:
    """``{"cosine": layers × heads, "histogram", "mask_distribution"}`` (clean vs occluded attention).
    ``common``: limit, batch_size, seed, device, store, progress."""
    return compute_stability(make_context(model, dataset, name="attention_stability", **common), rho, masks, images)


def plot_stability(result: dict[str, Any], out: Path) -> list[str]:
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    c = torch.tensor(result["cosine"])
    im = axes[0].imshow(c.T.numpy(), vmin=min(0.5, float(c.min())), vmax=1, cmap="viridis", aspect="auto")
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
    fig.suptitle(f"Attention stability under {result['rho']:.0%} patch occlusion — {result.get('model', '')}")
    fig.tight_layout()
    fig.savefig(out / "attention_stability.png", dpi=110)
    plt.close(fig)
    files = ["attention_stability.png"]
    if result.get("_images") is not None:
        fig, axes = plt.subplots(1, 4, figsize=(11, 3))
        axes[0].imshow(result["_images"][0].permute(1, 2, 0).numpy()), axes[0].set_title("clean")
        axes[1].imshow(result["_occluded"][0].permute(1, 2, 0).numpy()), axes[1].set_title("occluded")
        vmax = float(max(result["_clean_map"].max(), result["_occluded_map"].max()))
        axes[2].imshow(result["_clean_map"].numpy(), vmin=0, vmax=vmax, cmap="inferno")
        axes[3].imshow(result["_occluded_map"].numpy(), vmin=0, vmax=vmax, cmap="inferno")
        axes[2].set_title(f"attention, layer {result['_layer']} (clean)", fontsize=8)
        axes[3].set_title(f"attention, layer {result['_layer']} (occluded)", fontsize=8)
        for ax in axes:
            ax.axis("off")
        fig.tight_layout()
        fig.savefig(out / "attention_stability_maps.png", dpi=110)
        plt.close(fig)
        files.append("attention_stability_maps.png")
    return files


class AttentionStability(Analysis):
    name = "attention_stability"
    families = ("vit", "deit", "xcit", "swin", "fan")
    description = "cosine similarity of clean vs patch-occluded attention maps per head and layer (AFAT Fig. 1, 3, 4)"
    options = {"rho": 0.1, "masks": 50, "images": 4, "patch_size": 0}

    def compute(self, ctx: Context, **o: Any) -> dict[str, Any]:
        return compute_stability(ctx, float(o["rho"]), int(o["masks"]), int(o["images"]), int(o["patch_size"]))

    def plot(self, result: dict[str, Any], out: Path) -> list[str]:
        return plot_stability(result, out)
