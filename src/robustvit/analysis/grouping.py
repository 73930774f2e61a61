"""Token grouping (Zhou et al., "Understanding the Robustness in Vision Transformers" (FAN),
arXiv:2204.12451, Fig. 3–4): per block, the number of significant eigenvalues of the token affinity
matrix S = Z Zᵀ of the softmax-normalised patch tokens Z (eigenvalues above ``eig_threshold`` × the
largest; FAN's appendix thresholds the spectrum, the relative form makes models comparable), and the
noise decay — the relative change ‖f(x+n) − f(x)‖ / ‖f(x)‖ of each block's tokens when Gaussian noise
of standard deviation ``sigma`` is added to the input (clamped to [0, 1]); plus a spectral-clustering
picture of the second-to-last block's tokens over the image (normalised affinity, k-means on the
leading eigenvectors)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from robustvit.analysis.base import Analysis, Context, make_context, tolist
from robustvit.errors import RobustvitError


def patch_tokens(probe: Any, toks: list[torch.Tensor]) -> list[torch.Tensor]:
    return [t[:, probe.num_prefix_tokens:] for t in toks]


def significant_eigenvalues(z: torch.Tensor, threshold: float) -> torch.Tensor:
    """(N, P, D) tokens → (N,) number of eigenvalues of softmax(z) softmax(z)ᵀ above threshold·λ_max."""
    p = z.double().softmax(-1)
    ev = torch.linalg.eigvalsh(p @ p.transpose(1, 2))
    return (ev > threshold * ev[:, -1:]).sum(-1)


def spectral_clusters(z: torch.Tensor, k: int, seed: int = 0, iters: int = 30) -> torch.Tensor:
    """(N, P, D) tokens → (N, P) cluster labels: normalised-Laplacian embedding + k-means (Ng et al. 2001)."""
    p = z.double().softmax(-1)
    a = p @ p.transpose(1, 2)
    d = a.sum(-1).rsqrt()
    m = d[:, :, None] * a * d[:, None, :]
    _, vec = torch.linalg.eigh(m)
    emb = torch.nn.functional.normalize(vec[:, :, -k:], dim=-1)        # (N, P, k)
    g = torch.Generator().manual_seed(seed)
    N, P, _ = emb.shape
    idx = torch.stack([torch.randperm(P, generator=g)[:k] for _ in range(N)])
    cent = torch.gather(emb, 1, idx[:, :, None].expand(-1, -1, k).to(emb.device))
    for _ in range(iters):
        lab = torch.cdist(emb, cent).argmin(-1)                           # (N, P)
        one = torch.nn.functional.one_hot(lab, k).double()                 # (N, P, k)
        cnt = one.sum(1)[:, :, None]
        new = one.transpose(1, 2) @ emb / cnt.clamp_min(1)
        cent = torch.where(cnt > 0, new, cent)
    return torch.cdist(emb, cent).argmin(-1)


def compute_grouping(ctx: Context, eig_threshold: float = 0.05, sigma: float = 0.1, clusters: int = 4,
                     images: int = 4) -> dict[str, Any]:
    probe = ctx.probe
    if probe.grid_size is None or getattr(probe, "kind", "") in ("swin", "cnn"):
        raise RobustvitError("grouping needs tokens on one patch grid (ViT, DeiT, XCiT, FAN)")
    L = probe.num_blocks

    def unit(x: torch.Tensor, y: torch.Tensor, pending: list[str], c: int):  # noqa: ANN202
        clean = patch_tokens(probe, probe.run(x, tokens=True).tokens)
        g = ctx.generator("noise", c)
        noisy_x = (x + sigma * torch.randn(x.shape, generator=g, device=x.device)).clamp(0, 1)
        noisy = patch_tokens(probe, probe.run(noisy_x, tokens=True).tokens)
        eig = [float(significant_eigenvalues(t, eig_threshold).double().sum()) for t in clean]
        decay = [float(((b - a).flatten(1).norm(dim=1) / a.flatten(1).norm(dim=1).clamp_min(1e-12)).sum())
                 for a, b in zip(clean, noisy)]
        yield "stats", {"eig": eig, "decay": decay, "n": int(x.shape[0])}

    st = ctx.units(["stats"], unit)["stats"]
    n = st["n"]
    x, _ = ctx.batch(0, min(images, ctx.num_images))
    blk = max(0, L - 2)
    with torch.no_grad():
        z = patch_tokens(probe, probe.run(x, tokens=True).tokens)[blk]
    labels = spectral_clusters(z, min(clusters, z.shape[1]), ctx.seed)
    gh, gw = probe.grid_size
    return {"significant_eigenvalues": [e / n for e in st["eig"]], "noise_decay": [d / n for d in st["decay"]],
            "eig_threshold": eig_threshold, "sigma": sigma, "num_patches": gh * gw, "cluster_block": blk,
            "clusters": labels.view(-1, gh, gw).cpu().tolist(), "grid": [gh, gw], "_images": x.cpu(),
            "convention": "eigenvalues counted above eig_threshold × the largest; noise added in pixel space, clamped"}


def grouping(model: torch.nn.Module, dataset: Any, *, eig_threshold: float = 0.05, sigma: float = 0.1,
             clusters: int = 4, images: int = 4, **common: Any) -> dict[str, Any]:
    """``{"significant_eigenvalues", "noise_decay"}`` per block and cluster labels of the second-to-last
    block's tokens. ``common``: limit, batch_size, seed, device, store, progress."""
    return compute_grouping(make_context(model, dataset, name="grouping", **common), eig_threshold, sigma,
                            clusters, images)


def plot_grouping(result: dict[str, Any], out: Path) -> list[str]:
    import matplotlib.pyplot as plt
    import torch.nn.functional as F

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    L = len(result["noise_decay"])
    axes[0].plot(range(L), result["significant_eigenvalues"], marker="o")
    axes[0].set_xlabel("block"), axes[0].set_ylabel("significant eigenvalues")
    axes[0].set_title("Token affinity spectrum")
    axes[1].plot(range(L), result["noise_decay"], marker="o", color="C1")
    axes[1].set_xlabel("block"), axes[1].set_ylabel("‖Δ tokens‖ / ‖tokens‖")
    axes[1].set_title(f"Noise decay (σ = {result['sigma']})")
    fig.suptitle(f"Token grouping — {result.get('model', '')}")
    fig.tight_layout()
    fig.savefig(out / "grouping.png", dpi=110)
    plt.close(fig)
    files = ["grouping.png"]
    imgs = result.get("_images")
    if imgs is not None:
        labels = torch.tensor(result["clusters"])
        N = len(labels)
        fig, axes = plt.subplots(2, N, figsize=(1.8 * N, 3.8), squeeze=False)
        for i in range(N):
            img = imgs[i]
            up = F.interpolate(labels[i][None, None].float(), size=img.shape[-2:], mode="nearest")[0, 0]
            axes[0, i].imshow(img.permute(1, 2, 0).numpy()), axes[0, i].axis("off")
            axes[1, i].imshow(img.permute(1, 2, 0).numpy())
            axes[1, i].imshow(up.numpy(), cmap="tab10", alpha=0.55, vmin=0, vmax=9), axes[1, i].axis("off")
        fig.suptitle(f"Spectral clusters of block {result['cluster_block']}'s tokens", fontsize=9)
        fig.tight_layout()
        fig.savefig(out / "grouping_clusters.png", dpi=110)
        plt.close(fig)
        files.append("grouping_clusters.png")
    return files


class Grouping(Analysis):
    name = "grouping"
    families = ("vit", "deit", "xcit", "fan")
    description = "significant eigenvalues of the token affinity, noise decay, spectral clusters (FAN Fig. 3–4)"
    options = {"eig_threshold": 0.05, "sigma": 0.1, "clusters": 4, "images": 4}

    def compute(self, ctx: Context, **o: Any) -> dict[str, Any]:
        return compute_grouping(ctx, float(o["eig_threshold"]), float(o["sigma"]), int(o["clusters"]), int(o["images"]))

    def plot(self, result: dict[str, Any], out: Path) -> list[str]:
        return plot_grouping(result, out)


__all__ = ["Grouping", "grouping", "significant_eigenvalues", "spectral_clusters", "tolist"]
