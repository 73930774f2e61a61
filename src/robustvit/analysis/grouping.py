"""Token grouping (Zhou et al., "Understanding the Robustness in Vision Transformers" (FAN),
arXiv:2204.12451, Section 3 and appendix, Fig. 3–4).

Default ``convention=fan``, as FAN defines it:

* **Affinity.** Per image and block, S = P Pᵀ over the patch tokens (prefix tokens excluded), P = softmax(Z)
  over each token's channels (our reading of the appendix; S_ij ∈ [0, 1], not degree-normalised).
* **Eigenvalue count.** Eigenvalues of S above the **absolute** ``eig_threshold`` (default 1e-3; the reference
  gives no value, so the result records it) are significant; Fig. 3 plots the **insignificant** ones per block,
  P − #significant (``insignificant_eigenvalues``; more = fewer token groups).
* **Noise decay.** Per block ‖f(x+n) − f(x)‖ / ‖f(x)‖ of the patch tokens, n ~ N(0, σ²) added to the normalised
  input, unclipped. σ = ``sigma``, default 1 (the paper's N(0, 1)); other values are labelled a departure by
  :mod:`robustvit.protocols`.

``convention=relative`` (not the paper's): eigenvalues above ``eig_threshold`` × the largest (default 0.05:
scale-free, so models compare), noise in pixel space clamped to [0, 1]; recorded as ``threshold_kind: relative``.

Plus spectral clusters of the second-to-last block's tokens over the image (normalised affinity, k-means on the
leading eigenvectors; Ng et al. 2001), the picture of FAN's Fig. 4.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from robustvit.analysis.base import Analysis, Context, register_analysis, tolist
from robustvit.errors import RobustvitError
from robustvit.models.wrapper import range_check_off
from robustvit.options import option
from robustvit.plotting import finish_figure, integer_ticks
from robustvit.protocols import ANALYSIS_PROTOCOLS

CONVENTIONS = ("fan", "relative")
#: Default thresholds per convention: absolute (FAN) and relative to the largest eigenvalue.
DEFAULT_THRESHOLD = {"fan": 1e-3, "relative": 0.05}
#: FAN's noise, as the paper writes it: x ~ N(0, 1) (its paper setting: robustvit.protocols).
PAPER_SIGMA = ANALYSIS_PROTOCOLS["grouping"].conditions["sigma"]


@dataclass
class GroupingOptions:
    convention: Literal["fan", "relative"] = option("fan", help="FAN's definitions, or robustvit's relative variant")
    eig_threshold: float | None = option(-1.0, help="eigenvalue threshold; negative or none: the convention's "
                                                    "default (fan: 1e-3 absolute, relative: 0.05 × λmax)")
    sigma: float = option(PAPER_SIGMA, min=0, help="Gaussian input noise σ for the noise decay (FAN: N(0, 1))")
    clusters: int = option(4, min=1, help="spectral clusters drawn per image")
    images: int = option(4, min=1, help="images drawn with their clusters")


def patch_tokens(probe: Any, toks: list[torch.Tensor]) -> list[torch.Tensor]:
    return [t[:, probe.num_prefix_tokens:] for t in toks]


def affinity_eigenvalues(z: torch.Tensor) -> torch.Tensor:
    """(N, P, D) tokens → (N, P) ascending eigenvalues of S = softmax(z) softmax(z)ᵀ (float64)."""
    p = z.double().softmax(-1)
    return torch.linalg.eigvalsh(p @ p.transpose(1, 2))


def significant_eigenvalues(z: torch.Tensor, threshold: float, relative: bool = True) -> torch.Tensor:
    """(N, P, D) tokens → (N,) number of eigenvalues of softmax(z) softmax(z)ᵀ above ``threshold``
    (absolute, FAN) or above ``threshold`` × λ_max (``relative=True``)."""
    ev = affinity_eigenvalues(z)
    cut = threshold * ev[:, -1:] if relative else torch.full_like(ev[:, -1:], threshold)
    return (ev > cut).sum(-1)


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


def compute_grouping(ctx: Context, o: GroupingOptions) -> dict[str, Any]:
    probe = ctx.probe
    sigma, relative = o.sigma, o.convention == "relative"
    if probe.grid_size is None or getattr(probe, "kind", "") in ("swin", "cnn"):
        raise RobustvitError("grouping needs tokens on one patch grid (ViT, DeiT, XCiT, FAN)")
    thr = DEFAULT_THRESHOLD[o.convention] if o.eig_threshold is None or o.eig_threshold < 0 else float(o.eig_threshold)
    std = getattr(getattr(probe, "wrapper", None), "std", None)

    def noisy_input(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
        n = torch.randn(x.shape, generator=g, device=x.device)
        if relative:
            return (x + sigma * n).clamp(0, 1)
        s = std.to(x.device, x.dtype).view(1, -1, 1, 1) if std is not None else 1.0
        return x + sigma * s * n              # N(0, σ²) in the normalised input the network sees

    def unit(x: torch.Tensor, y: torch.Tensor, pending: list[str], c: int):  # noqa: ANN202
        clean = patch_tokens(probe, probe.run(x, tokens=True).tokens)
        with range_check_off(ctx.model):     # FAN's noise is unclipped: the input may leave [0, 1] on purpose
            noisy = patch_tokens(probe, probe.run(noisy_input(x, ctx.generator("noise", c)), tokens=True).tokens)
        eig = [float(significant_eigenvalues(t, thr, relative).double().sum()) for t in clean]
        decay = [float(((b - a).flatten(1).norm(dim=1) / a.flatten(1).norm(dim=1).clamp_min(1e-12)).sum())
                 for a, b in zip(clean, noisy)]
        yield "stats", {"eig": eig, "decay": decay, "n": int(x.shape[0])}

    st = ctx.units(["stats"], unit)["stats"]
    n = st["n"]
    x, _ = ctx.batch(0, min(o.images, ctx.num_images))
    blk = max(0, probe.num_blocks - 2)
    with torch.no_grad():
        z = patch_tokens(probe, probe.run(x, tokens=True).tokens)[blk]
    labels = spectral_clusters(z, min(o.clusters, z.shape[1]), ctx.seed)
    gh, gw = probe.grid_size
    P = gh * gw
    sig = [e / n for e in st["eig"]]
    rule = ("eigenvalues of softmax(Z)softmax(Z)ᵀ above eig_threshold × the largest; noise in pixel space, clamped"
            if relative else "eigenvalues of softmax(Z)softmax(Z)ᵀ above the absolute eig_threshold; "
            "Gaussian noise N(0, σ²) on the normalised input, unclipped")
    return {"convention": o.convention, "significant_eigenvalues": sig,
            "insignificant_eigenvalues": [P - v for v in sig], "noise_decay": [d / n for d in st["decay"]],
            "eig_threshold": thr, "threshold_kind": "relative" if relative else "absolute", "sigma": sigma,
            "num_patches": P, "cluster_block": blk, "clusters": labels.view(-1, gh, gw).cpu().tolist(),
            "grid": [gh, gw], "rule": rule, "_images": x.cpu()}


def plot_grouping(result: dict[str, Any], out: Path) -> list[str]:
    import matplotlib.pyplot as plt
    import torch.nn.functional as F
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    L = len(result["noise_decay"])
    fan = result.get("convention", "fan") == "fan" and "insignificant_eigenvalues" in result
    key = "insignificant_eigenvalues" if fan else "significant_eigenvalues"
    axes[0].plot(range(L), result[key], marker="o")
    cut = f"λ ≤ {result['eig_threshold']:g}" if fan else f"λ > {result['eig_threshold']:g}·λmax"
    axes[0].set_xlabel("block"), axes[0].set_ylabel(f"{key.split('_')[0]} eigenvalues ({cut})")
    axes[0].set_title(f"Token affinity spectrum ({result['num_patches']} tokens)")
    axes[1].plot(range(L), result["noise_decay"], marker="o", color="C1")
    axes[1].set_xlabel("block"), axes[1].set_ylabel("‖Δ tokens‖ / ‖tokens‖")
    axes[1].set_title(f"Noise decay (σ = {result['sigma']})")
    for a in axes:
        integer_ticks(a, "x")
    files = [finish_figure(fig, out / "grouping.png", f"Token grouping — {result.get('model', '')}")]
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
        files.append(finish_figure(fig, out / "grouping_clusters.png",
                                   f"Spectral clusters of block {result['cluster_block']}'s tokens", fontsize=9))
    return files


@register_analysis
class Grouping(Analysis):
    name = "grouping"
    requires_probe = True
    smoke = {"images": 1, "clusters": 2}
    families = ("vit", "deit", "xcit", "fan")
    description = "insignificant eigenvalues of the token affinity, noise decay, spectral clusters (FAN Fig. 3–4)"
    Options = GroupingOptions
    run = staticmethod(compute_grouping)
    plot = staticmethod(plot_grouping)


grouping = Grouping.function(
    """Per block ``{"insignificant_eigenvalues", "significant_eigenvalues", "noise_decay"}`` and cluster
    labels of the second-to-last block's tokens. Keywords: :class:`GroupingOptions` (``convention="fan"``,
    the default, or ``"relative"``) and the run's limit, batch_size, seed, device, store, progress.""")


__all__ = ["CONVENTIONS", "Grouping", "GroupingOptions", "affinity_eigenvalues", "grouping", "significant_eigenvalues",
           "spectral_clusters", "tolist"]
