"""Lesion study (Bhojanapalli et al., arXiv:2103.14586, Section 4.2, Fig. 8 and 34): accuracy, on the clean
accuracy's images, with one block, its self-attention or its MLP removed (the residual passes through), for every
block; and with n random blocks, attention layers or MLP layers removed (Fig. 8 right), ``samples`` random
subsets per n (the paper: 25): mean, standard error, min and max over the subsets.

The paper keeps the first block for random whole-block removals and is silent for attention / MLP; robustvit
keeps the first block's attention / MLP too (``keep_first=1``; ``keep_first=0`` draws from every block, recorded
in ``random_first_kept``). For CNNs the unit is a residual block (its residual branch removed; shortcut and final
activation kept, as in Veit et al., arXiv:1605.06431) and only whole blocks are removed.

Subset s of size n comes from ``derive_seed(seed, "lesion", n, s)`` (blocks) or ``derive_seed(seed, "lesion",
part, n, s)`` (attention / MLP), the same for every chunk. For ViTs a variant starts from the clean pass's
tokens at its first removed block.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from robustvit.analysis import checks
from robustvit.analysis.base import Analysis, Context, accuracy, accuracy_stats, register_analysis
from robustvit.options import option
from robustvit.plotting import finish_figure, integer_ticks, place_legend
from robustvit.protocols import ANALYSIS_PROTOCOLS
from robustvit.utils import derive_seed


#: The paper's number of random subsets per n (Bhojanapalli et al., Fig. 8; its setting: robustvit.protocols).
PAPER_SAMPLES = ANALYSIS_PROTOCOLS["lesion"].conditions["samples"]
#: Random-removal kinds: probe remove mode → result key.
RANDOM_KINDS = {"block": "random", "attn": "random_attention", "mlp": "random_mlp"}


@dataclass
class LesionOptions:
    samples: int = option(PAPER_SAMPLES, min=1, help="random subsets per n (the paper: 25)")
    random: bool = option(True, help="also remove n random blocks / attention / MLP layers")
    random_parts: list[Literal["block", "attn", "mlp"]] = option(
        default_factory=lambda: ["block", "attn", "mlp"], help="which random removals (block+attn+mlp)")
    keep_first: bool = option(True, help="random attention / MLP removals keep the first block's, as for blocks")


def random_subsets(num_blocks: int, n: int, samples: int, seed: int, part: str = "block",
                   keep_first: bool = True) -> list[list[int]]:
    """``samples`` random sets of ``n`` blocks among 1..L−1 (block 0 kept) or 0..L−1 (``keep_first=False``),
    each sorted; ``part`` ("block", "attn", "mlp") picks an independent stream (blocks keep their seeds)."""
    out, lo = [], 1 if keep_first else 0
    for s in range(samples):
        key = ("lesion", n, s) if part == "block" else ("lesion", part, n, s)
        if not keep_first:
            key = key + ("all",)
        g = torch.Generator().manual_seed(derive_seed(seed, *key))
        out.append(sorted((torch.randperm(num_blocks - lo, generator=g)[:n] + lo).tolist()))
    return out


def parse_part(part: str, subsets: dict[tuple[str, int, int], list[int]]) -> dict[int, str]:
    """A part name (``clean``, ``attn:3``, ``random_mlp:2:0``) → {block: what is removed}."""
    kind, *rest = part.split(":")
    if kind == "clean":
        return {}
    if kind.startswith("random"):
        mode = kind.partition("_")[2] or "block"
        return {b: mode for b in subsets[(mode, int(rest[0]), int(rest[1]))]}
    return {int(rest[0]): kind}


def summarise(accs: list[float]) -> dict[str, float]:
    """Mean, standard error of the mean (sample std / √k), min and max of k accuracies."""
    t = torch.tensor(accs, dtype=torch.float64)
    std = float(t.std()) if len(t) > 1 else 0.0
    return {"mean": float(t.mean()), "stderr": std / math.sqrt(len(t)), "min": float(t.min()), "max": float(t.max())}


def compute_lesion(ctx: Context, o: LesionOptions) -> dict[str, Any]:
    probe = ctx.probe
    samples, L, modes = o.samples, probe.num_blocks, list(probe.remove_modes)
    parts = ["clean"] + [f"{m}:{i}" for m in modes for i in range(L)]
    subsets: dict[tuple[str, int, int], list[int]] = {}
    kinds = [k for k in RANDOM_KINDS if k in o.random_parts and k in modes] if o.random else []
    first_kept = {k: o.keep_first if k != "block" else True for k in kinds}
    ns: dict[str, list[int]] = {}
    for kind in kinds:
        first = first_kept[kind]
        ns[kind] = list(range(1, L if first else L + 1)) if L > 1 or not first else []
        for n in ns[kind]:
            for s, sub in enumerate(random_subsets(L, n, samples, ctx.seed, kind, first)):
                subsets[(kind, n, s)] = sub
                parts.append(f"{'random' if kind == 'block' else 'random_' + kind}:{n}:{s}")

    def unit(x: torch.Tensor, y: torch.Tensor, pending: list[str], c: int):  # noqa: ANN202
        hs = None
        if probe.can_start:
            h0 = probe.embed(x)
            clean = probe.run(None, tokens=True, start=(0, h0))
            hs = [h0] + clean.tokens[:-1]      # hs[i] = input of block i
            if "clean" in pending:
                yield "clean", accuracy_stats(clean.logits, y)
        for part in pending:
            if part == "clean" and hs is not None:
                continue
            remove = parse_part(part, subsets)
            if hs is not None and remove:
                first = min(remove)
                logits = probe.run(None, tokens=False, remove=remove, start=(first, hs[first])).logits
            else:
                logits = probe.run(x, tokens=False, remove=remove).logits
            yield part, accuracy_stats(logits, y)

    st = ctx.units(parts, unit)
    single: dict[str, list[float]] = {"block": [], "attention": [], "mlp": []}
    names = {"block": "block", "attn": "attention", "mlp": "mlp"}
    for m in modes:
        single[names[m]] = [accuracy(st[f"{m}:{i}"]) for i in range(L)]
    out: dict[str, Any] = {"clean_accuracy": accuracy(st["clean"]), "num_blocks": L, "single": single}
    for kind, key in RANDOM_KINDS.items():
        prefix = "random" if kind == "block" else f"random_{kind}"
        out[key] = {str(n): {**summarise([accuracy(st[f"{prefix}:{n}:{s}"]) for s in range(samples)]),
                             "samples": samples, "blocks": [subsets[(kind, n, s)] for s in range(samples)]}
                    for n in ns.get(kind, [])}
    out["random_first_kept"] = {RANDOM_KINDS[k]: first for k, first in first_kept.items()}
    out["removable_parts"] = [k for k in RANDOM_KINDS if k in modes]
    out["notes"] = []
    if probe.family == "cnn":
        out["notes"].append("CNN: a unit is a residual block; only whole blocks are removed (residual branch dropped)")
    elif "attn" not in modes:
        out["notes"].append("blocks without one attention and one MLP branch: only whole blocks are removed")
    return out


def plot_lesion(result: dict[str, Any], out: Path) -> list[str]:
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    ax = axes[0]
    L = result["num_blocks"]
    for key, marker in (("block", "o"), ("attention", "s"), ("mlp", "^")):
        if result["single"].get(key):
            ax.plot(range(L), result["single"][key], marker=marker, label=f"{key} removed")
    ax.axhline(result["clean_accuracy"], color="k", ls="--", lw=1, label="nothing removed")
    ax.set_xlabel("block removed"), ax.set_ylabel("accuracy"), ax.set_ylim(0, 1.02)
    place_legend(ax)
    ax.set_title("One part removed")
    ax = axes[1]
    for i, (key, label) in enumerate((("random", "blocks"), ("random_attention", "attention layers"),
                                      ("random_mlp", "MLP layers"))):
        rr = result.get(key) or {}
        if not rr:
            continue
        ns = sorted(int(n) for n in rr)
        r = [rr[str(n)] for n in ns]
        ax.errorbar(ns, [v["mean"] for v in r], yerr=[v["stderr"] for v in r], marker="os^"[i], capsize=3,
                    color=f"C{i}", label=f"{label}: mean ± s.e.")
        ax.fill_between(ns, [v["min"] for v in r], [v["max"] for v in r], alpha=0.15, color=f"C{i}")
    place_legend(ax, fontsize=7, title="shaded: min–max", title_fontsize=7)    # nothing when nothing drawn
    ax.axhline(result["clean_accuracy"], color="k", ls="--", lw=1)
    ax.set_xlabel("n removed at random"), ax.set_ylabel("accuracy"), ax.set_ylim(0, 1.02)
    ax.set_title("n random parts removed (first block kept)")
    for a in axes:
        integer_ticks(a, "x")
    return [finish_figure(fig, out / "lesion.png", f"Lesion study — {result.get('model', '')}")]


@register_analysis
class Lesion(Analysis):
    name = "lesion"
    check = staticmethod(checks.lesion)
    demo = ("vit", "cnn")
    requires_probe = True
    smoke = {"samples": 2}
    families = ("vit", "deit", "xcit", "swin", "fan", "cnn")
    description = ("accuracy with a block / its attention / its MLP removed, and n random blocks, attention or MLP "
                   "layers (Bhojanapalli Fig. 8)")
    Options = LesionOptions
    run = staticmethod(compute_lesion)
    plot = staticmethod(plot_lesion)


lesion = Lesion.function(
    """Accuracy with parts removed: ``{"clean_accuracy", "single": {"block", "attention", "mlp"},
    "random" | "random_attention" | "random_mlp": {n: {"mean", "stderr", "min", "max", "samples", "blocks"}}}``.
    Keywords: :class:`LesionOptions` and the run's limit, batch_size, seed, device, store, progress.""")
