"""Layer correlation (Bhojanapalli et al., "Understanding Robustness of Transformers for Image
Classification", arXiv:2103.14586, Fig. 7): |Pearson ρ| between the flattened representations after each
block, over all tokens and over the CLS token only (else the mean over the patch tokens, the pooled
representation); linear CKA (Kornblith et al., arXiv:1905.00414) as an option, and always for Swin and CNNs
(their layers differ in shape). For CNNs ``level=block`` compares every pair of residual blocks, as the paper's
Fig. 33 (ResNet); the CNN default, one output per stage (``level=stage``), is not the paper's setting.

Pearson is exact over the whole data set from streamed sums (per chunk: centred Gram matrix of the layers'
flattened outputs). CKA uses the minibatch estimator of Nguyen et al. (arXiv:2010.15327): unbiased HSIC per
chunk of ``batch_size`` images, summed over chunks (chunks of fewer than 4 images are skipped).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from robustvit.analysis import checks
from robustvit.analysis.base import Analysis, Context, register_analysis, tolist
from robustvit.errors import RobustvitError
from robustvit.options import option
from robustvit.plotting import finish_figure


@dataclass
class CorrelationOptions:
    method: Literal["pearson", "cka"] = option("pearson", help="|Pearson ρ| (the paper's, ViTs) or linear CKA")
    level: Literal["auto", "block", "stage"] = option(
        "auto", help="one representation per block or per stage (auto: stage for CNNs, else block)")


def representations(ctx: Context, x: torch.Tensor, level: str) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """(all-token reps, CLS/pooled reps) per layer, each (N, features)."""
    probe = ctx.probe
    toks = probe.run(x, tokens=True).tokens
    if level == "stage":
        toks = [toks[s[-1]] for s in probe.stages]
    pre = probe.num_prefix_tokens
    cls = [t[:, 0] if has_class_token(probe) else t[:, pre:].mean(1) for t in toks]
    return [t.flatten(1) for t in toks], cls


def has_class_token(probe: Any) -> bool:
    """Whether the probe's tokens start with a CLS token (probes without ``has_class_token``: prefix tokens and
    the network's ``cls_token`` set)."""
    fallback = probe.num_prefix_tokens > 0 and getattr(getattr(probe, "net", None), "cls_token", 0) is not None
    return bool(getattr(probe, "has_class_token", fallback))


def pearson_stats(reps: list[torch.Tensor]) -> dict[str, Any]:
    """Sums for |ρ| between flattened layers: n, Σr (per layer), Σ r_i r_j (Gram), float64 via per-chunk centring."""
    r = torch.stack([t.flatten() for t in reps])            # (L, M)
    m = r.double().mean(1)
    c = r - m.to(r.dtype)[:, None]
    gram = (c @ c.T).double()
    n = r.shape[1]
    gram = gram + n * torch.outer(m, m)
    return {"n": n, "sum": (n * m).tolist(), "gram": gram.cpu().tolist()}


def pearson_matrix(stats: dict[str, Any]) -> torch.Tensor:
    n = float(stats["n"])
    s = torch.tensor(stats["sum"], dtype=torch.float64)
    g = torch.tensor(stats["gram"], dtype=torch.float64)
    cov = n * g - torch.outer(s, s)
    var = cov.diagonal().clamp_min(1e-300)
    rho = (cov / torch.sqrt(torch.outer(var, var))).abs().clamp(max=1.0)
    rho = (rho + rho.T) / 2
    rho.fill_diagonal_(1.0)
    return rho


def hsic_unbiased(grams: torch.Tensor) -> torch.Tensor:
    """Unbiased HSIC (Song et al. 2012) between every pair of (L, n, n) Gram matrices → (L, L); n ≥ 4."""
    L, n, _ = grams.shape
    k = grams.clone()
    k.diagonal(dim1=1, dim2=2).zero_()
    flat = k.reshape(L, -1)
    tr = flat @ flat.T                                       # tr(K̃ L̃) (symmetric Grams)
    s = k.sum((1, 2))                                        # 1ᵀK̃1
    rows = k.sum(2)                                          # K̃1
    return (tr + torch.outer(s, s) / ((n - 1) * (n - 2)) - 2.0 / (n - 2) * rows @ rows.T) / (n * (n - 3))


def cka_stats(reps: list[torch.Tensor]) -> dict[str, Any]:
    n, L = reps[0].shape[0], len(reps)
    if n < 4:
        return {"hsic": [[0.0] * L for _ in range(L)], "chunks": 0}
    grams = torch.stack([(t.double() @ t.double().T) for t in reps])
    return {"hsic": hsic_unbiased(grams).cpu().tolist(), "chunks": 1}


def cka_matrix(stats: dict[str, Any]) -> torch.Tensor:
    if not stats["chunks"]:
        raise RobustvitError("CKA needs chunks of at least 4 images; raise --batch-size or --limit")
    h = torch.tensor(stats["hsic"], dtype=torch.float64)
    d = h.diagonal().clamp_min(1e-300)
    c = (h / torch.sqrt(torch.outer(d, d))).clamp(-1.0, 1.0)
    c = (c + c.T) / 2
    c.fill_diagonal_(1.0)
    return c


def compute_correlation(ctx: Context, o: CorrelationOptions) -> dict[str, Any]:
    probe = ctx.probe
    method, notes = o.method, []
    if probe.family in ("swin", "cnn") and method == "pearson":
        method = "cka"
        notes.append(f"{probe.family}: layers differ in shape, so linear CKA is used instead of Pearson")
    level = ("stage" if probe.family == "cnn" else "block") if o.level == "auto" else o.level
    if not has_class_token(probe):
        notes.append("no CLS token in the blocks: `cls_token` uses the mean over patch tokens "
                     "(the pooled representation)")
    stat_fn = pearson_stats if method == "pearson" else cka_stats

    def unit(x: torch.Tensor, y: torch.Tensor, pending: list[str], c: int):  # noqa: ANN202
        reps, cls = representations(ctx, x, level)
        yield "all", stat_fn(reps)
        yield "cls", stat_fn(cls)

    st = ctx.units(["all", "cls"], unit)
    mats = {k: (pearson_matrix if method == "pearson" else cka_matrix)(v) for k, v in st.items()}
    labels = ([f"block {i}" for i in range(probe.num_blocks)] if level == "block"
              else [f"stage {i + 1}" for i in range(len(probe.stages))])
    return {"method": method, "level": level, "layers": labels, "all_tokens": tolist(mats["all"]),
            "cls_token": tolist(mats["cls"]), "notes": notes}


def plot_correlation(result: dict[str, Any], out: Path) -> list[str]:
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(9, 4))
    label = "|Pearson ρ|" if result["method"] == "pearson" else "linear CKA"
    ticks = list(range(len(result["layers"])))
    names = [str(i + (1 if result["level"] == "stage" else 0)) for i in ticks]
    for ax, key, title in zip(axes, ("all_tokens", "cls_token"), ("all tokens", "CLS / pooled token")):
        im = ax.imshow(torch.tensor(result[key]).numpy(), vmin=0, vmax=1, cmap="viridis")
        ax.set_title(f"{label}: {title}")
        ax.set_xticks(ticks, names, fontsize=7), ax.set_yticks(ticks, names, fontsize=7)
        ax.set_xlabel(result["level"]), ax.set_ylabel(result["level"])
    fig.colorbar(im, ax=list(axes), shrink=0.8)
    title = f"Layer correlation — {result.get('model', '')}"
    return [finish_figure(fig, out / "correlation.png", title, tight=False)]


@register_analysis
class Correlation(Analysis):
    name = "correlation"
    check = staticmethod(checks.correlation)
    demo = ("vit", "cnn")
    paper_images = 4096
    requires_probe = True
    families = ("vit", "deit", "xcit", "swin", "fan", "cnn")
    description = "|Pearson ρ| (or linear CKA) between block outputs, all tokens and CLS only (Bhojanapalli Fig. 7)"
    Options = CorrelationOptions
    run = staticmethod(compute_correlation)
    plot = staticmethod(plot_correlation)


correlation = Correlation.function(
    """|Pearson ρ| (or linear CKA) between every pair of block outputs: ``{"all_tokens", "cls_token"}``
    square matrices (nested lists). Keywords: :class:`CorrelationOptions` and the run's limit, batch_size,
    seed, device, store, progress.""")
