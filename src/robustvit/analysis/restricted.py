"""Restricted attention (Bhojanapalli et al., arXiv:2103.14586, Section 4.3, Fig. 9).

* ``local``: a patch may attend to a patch only if their distance along x and along y on the patch grid is
  at most d, in every block (prefix tokens — CLS, registers — attend and are attended freely);
* ``random``: as many masked patch pairs, the first of a fixed random permutation of the off-diagonal pairs
  (the local masks never mask the diagonal either; the fixed permutation nests the masks as d grows);
* ``cls_only_first`` / ``cls_only_last``: in the first / last k blocks patches attend only to the class
  tokens (CLS, and a distillation token; not registers); without a class token, only to themselves.

  The paper says only that patches "attend only to CLS". Our default reading (``cls_only=cls``): no
  patch↔patch attention, so not to itself either (although the d = 0 local mask allows it);
  ``cls_only=cls_self`` is the other reading (class tokens and the patch itself). The result records which.

Variants without a masked pair are the clean model and reuse the clean pass; the others run in groups stacked
along the batch (the embedding computed once per chunk; "last k" variants start from the clean pass's tokens).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from robustvit.analysis import checks
from robustvit.analysis.base import Analysis, Context, accuracy, accuracy_stats, grid_coords, register_analysis
from robustvit.errors import RobustvitError
from robustvit.options import option
from robustvit.plotting import finish_figure, integer_ticks, place_legend
from robustvit.utils import derive_seed


@dataclass
class RestrictedOptions:
    distances: list[int] | None = option(default_factory=list, min=0,
                                         help="local distances d in patches (empty or none: 0 … grid side − 1)")
    group: int = option(0, min=0, help="masked variants run together per forward (0: batch_size // chunk)")
    cls_only: Literal["cls", "cls_self"] = option("cls", help="cls_only_*: patches attend to the class tokens only "
                                                  "(cls) or to them and to themselves (cls_self)")


def local_patch_mask(grid: tuple[int, int], d: int) -> torch.Tensor:
    """(P, P) bool, True = may attend: |Δrow| ≤ d and |Δcol| ≤ d."""
    rc = grid_coords(grid)
    return ((rc[:, None, :] - rc[None, :, :]).abs() <= d).all(-1)


def random_patch_mask(num_patches: int, num_masked: int, seed: int) -> torch.Tensor:
    """(P, P) bool with ``num_masked`` off-diagonal pairs masked (False), the first ones of a fixed permutation."""
    P = num_patches
    off = (~torch.eye(P, dtype=torch.bool)).flatten().nonzero().flatten()
    if num_masked > len(off):
        raise RobustvitError(f"cannot mask {num_masked} of {len(off)} off-diagonal pairs")
    g = torch.Generator().manual_seed(derive_seed(seed, "restricted_attention", "permutation"))
    perm = off[torch.randperm(len(off), generator=g)]
    mask = torch.ones(P * P, dtype=torch.bool)
    mask[perm[:num_masked]] = False
    return mask.view(P, P)


def full_mask(patch_mask: torch.Tensor, num_prefix: int) -> torch.Tensor:
    """(T, T) token mask from a (P, P) patch mask; prefix tokens attend and are attended freely."""
    P = patch_mask.shape[0]
    m = torch.ones(num_prefix + P, num_prefix + P, dtype=torch.bool)
    m[num_prefix:, num_prefix:] = patch_mask
    return m


def cls_only_mask(num_patches: int, num_prefix: int, num_class: int | None = None, itself: bool = False
                  ) -> torch.Tensor:
    """Patches attend only to the class tokens — the first ``num_class`` prefix tokens (CLS, DeiT's distillation
    token; default: all), not the registers after them — and to themselves when ``itself`` or when there is none."""
    n_cls = num_prefix if num_class is None else int(num_class)
    m = full_mask(torch.eye(num_patches, dtype=torch.bool) if n_cls == 0 or itself else
                  torch.zeros(num_patches, num_patches, dtype=torch.bool), num_prefix)
    m[num_prefix:, n_cls:num_prefix] = False
    return m


def num_class_tokens(probe: Any) -> int:
    """Prefix tokens that are class tokens (CLS, distillation), not registers; they come first."""
    if not getattr(probe, "has_class_token", probe.num_prefix_tokens > 0):
        return 0
    return probe.num_prefix_tokens - int(getattr(probe, "num_registers", 0))


def variants(probe: Any, distances: list[int], seed: int, cls_only: str = "cls"
             ) -> dict[str, dict[int, torch.Tensor]]:
    """part → {block: (T, T) mask}; an empty dict = nothing masked (the clean model)."""
    grid, pre, L = probe.grid_size, probe.num_prefix_tokens, probe.num_blocks
    P = grid[0] * grid[1]
    out: dict[str, dict[int, torch.Tensor]] = {"clean": {}}
    for d in distances:
        local = local_patch_mask(grid, d)
        masked = int((~local).sum())
        rand = random_patch_mask(P, masked, seed)
        out[f"local:{d}"] = {} if masked == 0 else {i: full_mask(local, pre) for i in range(L)}
        out[f"random:{d}"] = {} if masked == 0 else {i: full_mask(rand, pre) for i in range(L)}
    only = cls_only_mask(P, pre, num_class_tokens(probe), itself=cls_only == "cls_self")
    for k in range(L + 1):
        out[f"first:{k}"] = {i: only for i in range(k)}
        out[f"last:{k}"] = {i: only for i in range(L - k, L)}
    return out


def compute_restricted(ctx: Context, o: RestrictedOptions) -> dict[str, Any]:
    probe = ctx.probe
    if probe.grid_size is None or not getattr(probe, "maskable", False):
        raise RobustvitError("restricted attention needs global token attention on a patch grid that takes a mask "
                             "(ViT, DeiT, BEiT, EVA, FAN)")
    grid, L = probe.grid_size, probe.num_blocks
    ds = sorted({int(d) for d in o.distances}) if o.distances else list(range(max(grid)))
    masks = variants(probe, ds, ctx.seed, o.cls_only)

    def unit(x: torch.Tensor, y: torch.Tensor, pending: list[str], c: int):  # noqa: ANN202
        n = x.shape[0]
        if probe.can_start:
            h0 = probe.embed(x)
            clean = probe.run(None, tokens=True, start=(0, h0))
            hs = [h0] + clean.tokens[:-1]
        else:
            clean = probe.run(x, tokens=False)
        for p in ["clean"] + [p for p in pending if p != "clean" and not masks[p]]:
            yield p, accuracy_stats(clean.logits, y)
        todo = [p for p in pending if masks[p]]
        size = o.group or max(1, ctx.batch_size // n)
        # group variants with the same first masked block so they can share a start
        todo.sort(key=lambda p: min(masks[p]))
        while todo:
            first = min(masks[todo[0]])
            grp = [p for p in todo if min(masks[p]) == first][:size]
            todo = [p for p in todo if p not in grp]
            k = len(grp)
            per_block = {}
            for i in range(first, L):
                ms = [masks[p].get(i) for p in grp]
                if all(m is None for m in ms):
                    continue
                T = next(m for m in ms if m is not None).shape[0]
                full = torch.stack([m if m is not None else torch.ones(T, T, dtype=torch.bool) for m in ms])
                per_block[i] = full.to(ctx.device).repeat_interleave(n, 0)[:, None]   # (k·n, 1, T, T)
            if probe.can_start:
                h = hs[first].repeat(k, 1, 1)
                logits = probe.run(None, tokens=False, attn_mask=per_block, start=(first, h)).logits
            else:
                logits = probe.run(x.repeat(k, 1, 1, 1), tokens=False, attn_mask=per_block).logits
            for j, p in enumerate(grp):
                yield p, accuracy_stats(logits[j * n:(j + 1) * n], y)

    st = ctx.units(list(masks), unit)
    n_cls, regs = num_class_tokens(probe), int(getattr(probe, "num_registers", 0))
    notes = [] if n_cls else ["no class token: `cls_only_*` lets patches attend only to themselves"]
    if regs:
        notes.append(f"{regs} register tokens: free in local/random masks (like CLS), not attended by patches in "
                     "`cls_only_*`")
    return {"clean_accuracy": accuracy(st["clean"]), "grid": list(grid), "num_blocks": L,
            "local": {str(d): accuracy(st[f"local:{d}"]) for d in ds},
            "random": {str(d): accuracy(st[f"random:{d}"]) for d in ds},
            "masked_pairs": {str(d): int((~local_patch_mask(grid, d)).sum()) for d in ds},
            "num_patch_pairs": (grid[0] * grid[1]) ** 2,
            "cls_only_first": {str(k): accuracy(st[f"first:{k}"]) for k in range(L + 1)},
            "cls_only_last": {str(k): accuracy(st[f"last:{k}"]) for k in range(L + 1)},
            "cls_only": o.cls_only, "has_class_token": bool(n_cls), "num_registers": regs, "notes": notes}


def cls_only_title(result: dict[str, Any]) -> str:
    """What the ``cls_only_*`` curves restrict (without a class token: patches attend only to themselves)."""
    if result.get("has_class_token") is False:
        return "Patches attend only to themselves (no class token)"
    return "Patches attend only to CLS" + (" and themselves" if result.get("cls_only") == "cls_self" else "")


def plot_restricted(result: dict[str, Any], out: Path) -> list[str]:
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    ax = axes[0]
    ds = sorted(int(d) for d in result["local"])
    ax.plot(ds, [result["local"][str(d)] for d in ds], marker="o", label="local (distance ≤ d)")
    ax.plot(ds, [result["random"][str(d)] for d in ds], marker="s", label="random, same number masked")
    ax.axhline(result["clean_accuracy"], color="k", ls="--", lw=1, label="full attention")
    ax.set_xlabel("d (patches)"), ax.set_ylabel("accuracy"), ax.set_ylim(0, 1.02)
    integer_ticks(ax, "x"), place_legend(ax)
    ax.set_title("Restricted attention")
    ax = axes[1]
    ks = sorted(int(k) for k in result["cls_only_first"])
    ax.plot(ks, [result["cls_only_first"][str(k)] for k in ks], marker="o", label="first k blocks")
    ax.plot(ks, [result["cls_only_last"][str(k)] for k in ks], marker="s", label="last k blocks")
    ax.set_xlabel("k (blocks)"), ax.set_ylabel("accuracy"), ax.set_ylim(0, 1.02)
    integer_ticks(ax, "x"), place_legend(ax)
    ax.set_title(cls_only_title(result))
    title = f"Restricted attention — {result.get('model', '')}"
    return [finish_figure(fig, out / "restricted_attention.png", title)]


@register_analysis
class RestrictedAttention(Analysis):
    name = "restricted_attention"
    check = staticmethod(checks.restricted_attention)
    demo = ("vit",)
    requires_probe = True
    families = ("vit", "deit", "fan")
    description = "accuracy with local / random / CLS-only attention masks (Bhojanapalli Fig. 9)"
    Options = RestrictedOptions
    run = staticmethod(compute_restricted)
    plot = staticmethod(plot_restricted)


restricted_attention = RestrictedAttention.function(
    """Accuracy with local / random / CLS-only attention masks: ``{"clean_accuracy", "local", "random",
    "cls_only_first", "cls_only_last"}``. Keywords: :class:`RestrictedOptions` and the run's limit,
    batch_size, seed, device, store, progress.""")
