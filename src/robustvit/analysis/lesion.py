"""Lesion study (Bhojanapalli et al., arXiv:2103.14586, Section 4.2, Fig. 8 and 34): accuracy with one
block, its self-attention or its MLP removed (the residual passes through), for every block; and with n
random blocks removed (the first block always kept), ``samples`` random subsets per n (25 in the paper):
mean, standard error, min and max over the subsets. For CNNs the unit is a residual block (its residual
branch removed; shortcut and final activation kept, as in Veit et al., arXiv:1605.06431).

A removal set is one model variant: subset s of size n is drawn from ``derive_seed(seed, n, s)`` and is
the same for every chunk. For ViTs the clean pass's per-block tokens are reused: a variant starts at the
first removed block.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from robustvit.analysis.base import Analysis, Context, accuracy, accuracy_stats, make_context
from robustvit.utils import derive_seed


def random_subsets(num_blocks: int, n: int, samples: int, seed: int) -> list[list[int]]:
    """``samples`` random sets of ``n`` blocks among 1..L−1 (block 0 kept), each sorted."""
    out = []
    for s in range(samples):
        g = torch.Generator().manual_seed(derive_seed(seed, "lesion", n, s))
        out.append(sorted((torch.randperm(num_blocks - 1, generator=g)[:n] + 1).tolist()))
    return out


def parse_part(part: str, subsets: dict[tuple[int, int], list[int]]) -> dict[int, str]:
    kind, *rest = part.split(":")
    if kind == "clean":
        return {}
    if kind == "random":
        return {b: "block" for b in subsets[(int(rest[0]), int(rest[1]))]}
    return {int(rest[0]): kind}


def compute_lesion(ctx: Context, samples: int = 25, random: bool = True) -> dict[str, Any]:
    probe = ctx.probe
    L = probe.num_blocks
    modes = list(probe.remove_modes)
    parts = ["clean"] + [f"{m}:{i}" for m in modes for i in range(L)]
    subsets: dict[tuple[int, int], list[int]] = {}
    ns = list(range(1, L)) if random and L > 1 else []
    for n in ns:
        for s, sub in enumerate(random_subsets(L, n, samples, ctx.seed)):
            subsets[(n, s)] = sub
            parts.append(f"random:{n}:{s}")

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
    single = {"block": [], "attention": [], "mlp": []}
    names = {"block": "block", "attn": "attention", "mlp": "mlp"}
    for m in modes:
        single[names[m]] = [accuracy(st[f"{m}:{i}"]) for i in range(L)]
    rand: dict[str, Any] = {}
    for n in ns:
        accs = torch.tensor([accuracy(st[f"random:{n}:{s}"]) for s in range(samples)], dtype=torch.float64)
        std = float(accs.std()) if len(accs) > 1 else 0.0
        rand[str(n)] = {"mean": float(accs.mean()), "stderr": std / math.sqrt(len(accs)), "min": float(accs.min()),
                        "max": float(accs.max()), "samples": samples,
                        "blocks": [subsets[(n, s)] for s in range(samples)]}
    notes = []
    if probe.family == "cnn":
        notes.append("CNN: a unit is a residual block; only whole blocks are removed (residual branch dropped)")
    return {"clean_accuracy": accuracy(st["clean"]), "num_blocks": L, "single": single, "random": rand,
            "notes": notes}


def lesion(model: torch.nn.Module, dataset: Any, *, samples: int = 25, random: bool = True,
           **common: Any) -> dict[str, Any]:
    """Accuracy with parts removed: ``{"clean_accuracy", "single": {"block", "attention", "mlp"},
    "random": {n: {"mean", "stderr", "min", "max"}}}``. ``common``: limit, batch_size, seed, device, store,
    progress."""
    return compute_lesion(make_context(model, dataset, name="lesion", **common), samples, random)


def plot_lesion(result: dict[str, Any], out: Path) -> list[str]:
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    ax = axes[0]
    L = result["num_blocks"]
    for key, marker in (("block", "o"), ("attention", "s"), ("mlp", "^")):
        if result["single"].get(key):
            ax.plot(range(L), result["single"][key], marker=marker, label=f"{key} removed")
    ax.axhline(result["clean_accuracy"], color="k", ls="--", lw=1, label="nothing removed")
    ax.set_xlabel("block removed"), ax.set_ylabel("accuracy"), ax.set_ylim(0, 1.02), ax.legend(fontsize=8)
    ax.set_title("One part removed")
    ax = axes[1]
    if result["random"]:
        ns = sorted(int(n) for n in result["random"])
        r = [result["random"][str(n)] for n in ns]
        mean = [v["mean"] for v in r]
        ax.errorbar(ns, mean, yerr=[v["stderr"] for v in r], marker="o", capsize=3, label="mean ± s.e.")
        ax.fill_between(ns, [v["min"] for v in r], [v["max"] for v in r], alpha=0.2, label="min–max")
        ax.legend(fontsize=8)
    ax.set_xlabel("number of random blocks removed"), ax.set_ylabel("accuracy"), ax.set_ylim(0, 1.02)
    ax.set_title("n random blocks removed (first kept)")
    fig.suptitle(f"Lesion study — {result.get('model', '')}")
    fig.tight_layout()
    fig.savefig(out / "lesion.png", dpi=110)
    plt.close(fig)
    return ["lesion.png"]


class Lesion(Analysis):
    name = "lesion"
    families = ("vit", "deit", "xcit", "swin", "fan", "cnn")
    description = "accuracy with a block / its attention / its MLP removed, and n random blocks (Bhojanapalli Fig. 8)"
    options = {"samples": 25, "random": True}

    def compute(self, ctx: Context, **options: Any) -> dict[str, Any]:
        return compute_lesion(ctx, int(options["samples"]), bool(options["random"]))

    def plot(self, result: dict[str, Any], out: Path) -> list[str]:
        return plot_lesion(result, out)
