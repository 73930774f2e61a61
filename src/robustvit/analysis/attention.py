"""Attention distance, attention maps / rollout and position-embedding similarity (Dosovitskiy et al.,
"An Image is Worth 16x16 Words", arXiv:2010.11929, Fig. 6, 7 and 10).

* ``attention_distance``: per head and layer, the mean over images and query patches of
  Σ_k a(q, k)·‖pos(q) − pos(k)‖ in pixels between patch centres (prefix tokens neither query nor key, weights
  not renormalised: with a CLS token the patches' attention mass is below 1);
* ``attention_maps``: a query patch's attention (default: the centre patch), heads averaged, per layer, and
  rollout from CLS (Abnar & Zuidema, arXiv:2005.00928: heads averaged, 0.5·A + 0.5·I, rows renormalised,
  multiplied over layers; without CLS the mean over patch queries: registers are never read as CLS);
* ``pos_embed_similarity``: cosine similarity of each patch's learned position embedding with all others.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from robustvit.analysis import checks
from robustvit.analysis.base import Analysis, Context, grid_coords, register_analysis, tolist
from robustvit.errors import RobustvitError
from robustvit.options import option
from robustvit.plotting import finish_figure, integer_ticks, place_legend


@dataclass
class AttentionMapsOptions:
    images: int = option(4, min=1, help="images drawn (the first of the run's sample)")
    query: int = option(-1, min=-1, help="query patch index on the grid, row-major (-1: the centre patch)")


def patch_distances(grid: tuple[int, int], patch_size: int) -> torch.Tensor:
    """(P, P) Euclidean distance in pixels between patch centres."""
    pos = grid_coords(grid).double() * patch_size
    return torch.cdist(pos, pos)


def mean_attention_distance(attn: torch.Tensor, grid: tuple[int, int], patch_size: int,
                            num_prefix: int) -> torch.Tensor:
    """(N, heads, T, T) attention of one layer → (N, heads) mean attention distance in pixels."""
    a = attn[:, :, num_prefix:, num_prefix:].double()
    return (a * patch_distances(grid, patch_size).to(a.device)).sum(-1).mean(-1)


def _need_grid(probe: Any, what: str) -> None:
    if probe.grid_size is None or probe.patch_size is None or getattr(probe, "kind", "") in ("swin", "cnn") \
            or probe.family == "xcit":
        raise RobustvitError(f"{what} needs global attention between patch tokens (ViT, DeiT, FAN)")
    if not getattr(probe, "softmax_maps", True):
        raise RobustvitError(f"{what} needs softmax attention maps (distributions over tokens); talking-heads "
                             "attention (CaiT) mixes heads after the softmax — use attention_stability or lesion")


def _check_maps(probe: Any, maps: list[torch.Tensor], what: str) -> None:
    """Refuse (one line) maps that are not token-to-token maps over prefix + patch tokens."""
    T = probe.num_prefix_tokens + probe.grid_size[0] * probe.grid_size[1]
    for i, a in enumerate(maps):
        if a.ndim != 4 or a.shape[-2:] != (T, T):
            raise RobustvitError(f"{what}: block {i}'s attention map has shape {tuple(a.shape)}, not (N, heads, "
                                 f"{T}, {T}) over the prefix and patch tokens; this analysis needs global token "
                                 "attention over the same tokens in every block")


def _tokens_info(probe: Any) -> dict[str, Any]:
    info = {"has_class_token": bool(getattr(probe, "has_class_token", probe.num_prefix_tokens > 0)),
            "num_prefix_tokens": int(probe.num_prefix_tokens),
            "num_registers": int(getattr(probe, "num_registers", 0))}
    if not getattr(probe, "softmax_maps", True):
        info["notes"] = ["talking-heads attention (CaiT): the maps are those that weight the values, mixed across "
                         "heads after the softmax; their rows need not sum to 1"]
    return info


def compute_attention_distance(ctx: Context, options: Any = None) -> dict[str, Any]:
    probe = ctx.probe
    _need_grid(probe, "attention distance")

    def unit(x: torch.Tensor, y: torch.Tensor, pending: list[str], c: int):  # noqa: ANN202
        maps = probe.run(x, tokens=False, attentions=True).attentions
        _check_maps(probe, maps, "attention distance")
        d = torch.stack([mean_attention_distance(a, probe.grid_size, probe.patch_size, probe.num_prefix_tokens)
                         for a in maps], 1)   # (N, L, H)
        yield "distance", {"sum": d.sum(0).cpu().tolist(), "n": int(x.shape[0])}

    st = ctx.units(["distance"], unit)["distance"]
    dist = torch.tensor(st["sum"], dtype=torch.float64) / st["n"]
    return {"distance": tolist(dist, 4), "num_layers": probe.num_blocks, "num_heads": probe.num_heads,
            "patch_size": probe.patch_size, "grid": list(probe.grid_size), **_tokens_info(probe),
            "convention": "distances between patch centres in pixels; prefix tokens (CLS, registers, distillation) "
                          "excluded, weights not renormalised"}


def plot_attention_distance(result: dict[str, Any], out: Path) -> list[str]:
    import matplotlib.pyplot as plt
    d = torch.tensor(result["distance"])
    L, H = d.shape
    fig, ax = plt.subplots(figsize=(5, 3.8))
    for h in range(H):
        ax.scatter((torch.arange(L) + 1).numpy(), d[:, h].numpy(), s=14, alpha=0.8,
                   label=f"head {h}" if H <= 8 else None)
    ax.set_xlabel("network depth (layer)"), ax.set_ylabel("mean attention distance (pixels)")
    integer_ticks(ax, "x")
    ax.set_ylim(0, max(float(d.max()) * 1.1, 1e-3))
    ax.set_title(f"Attention distance — {result.get('model', '')}")
    if H <= 8:
        place_legend(ax, outside=True, fontsize=7)
    return [finish_figure(fig, out / "attention_distance.png")]


@register_analysis
class AttentionDistance(Analysis):
    name = "attention_distance"
    check = staticmethod(checks.attention_distance)
    demo = ("vit",)
    paper_images = 128
    requires_probe = True
    families = ("vit", "deit", "fan")
    description = "mean attention distance in pixels per head and layer (ViT Fig. 7 right, Fig. 10)"
    run = staticmethod(compute_attention_distance)
    plot = staticmethod(plot_attention_distance)


attention_distance = AttentionDistance.function(
    """Mean attention distance in pixels: ``{"distance": layers × heads}``. Keywords: the run's limit,
    batch_size, seed, device, store, progress.""")


# -- attention maps and rollout -----------------------------------------------------------------------------
def attention_rollout(attns: list[torch.Tensor], residual: bool = True) -> torch.Tensor:
    """(N, heads, T, T) per layer → (N, T, T) rollout: Π over layers of (0.5·Ā + 0.5·I), rows renormalised."""
    out = None
    for a in attns:
        m = a.double().mean(1)
        if residual:
            m = 0.5 * m + 0.5 * torch.eye(m.shape[-1], dtype=m.dtype, device=m.device)
            m = m / m.sum(-1, keepdim=True)
        out = m if out is None else m @ out
    assert out is not None
    return out


def compute_attention_maps(ctx: Context, o: AttentionMapsOptions) -> dict[str, Any]:
    probe = ctx.probe
    _need_grid(probe, "attention maps")
    gh, gw = probe.grid_size
    P, pre = gh * gw, probe.num_prefix_tokens
    q = (gh // 2) * gw + gw // 2 if o.query < 0 else int(o.query)
    if not 0 <= q < P:
        raise RobustvitError(f"query patch {o.query} is outside the {gh}×{gw} grid (0..{P - 1})")
    x, y = ctx.batch(0, min(o.images, ctx.num_images))
    with torch.no_grad():
        out = probe.run(x, tokens=False, attentions=True)
    _check_maps(probe, out.attentions, "attention maps")
    maps = torch.stack([a[:, :, pre + q, pre:].mean(1) for a in out.attentions], 1)   # (N, L, P)
    roll = attention_rollout(out.attentions)
    info = _tokens_info(probe)
    # rollout from the CLS token (index 0) only when there is one: a register is never treated as CLS
    src = roll[:, 0, pre:] if info["has_class_token"] else roll[:, pre:, pre:].mean(1)
    return {"query": q, "query_rc": [q // gw, q % gw], "grid": [gh, gw], "num_images": int(x.shape[0]),
            "query_maps": tolist(maps.view(-1, probe.num_blocks, gh, gw), 5),
            "rollout": tolist(src.view(-1, gh, gw), 5),
            "rollout_source": "CLS" if info["has_class_token"] else "mean over patch queries", **info,
            "_images": x.cpu()}


def _overlay(ax: Any, img: torch.Tensor, m: torch.Tensor, title: str = "") -> None:
    """Map ``m`` upsampled (nearest) over image ``img``."""
    up = torch.nn.functional.interpolate(m[None, None].float(), size=tuple(img.shape[-2:]), mode="nearest")[0, 0]
    ax.imshow(img.permute(1, 2, 0).clamp(0, 1).numpy())
    ax.imshow(up.numpy(), cmap="inferno", alpha=0.6)
    ax.set_title(title, fontsize=7)
    ax.axis("off")


def plot_attention_maps(result: dict[str, Any], out: Path) -> list[str]:
    import matplotlib.pyplot as plt
    imgs = result.get("_images")
    if imgs is None:
        return []
    maps, roll = torch.tensor(result["query_maps"]), torch.tensor(result["rollout"])
    N, L = maps.shape[:2]
    fig, axes = plt.subplots(N, L + 2, figsize=(1.6 * (L + 2), 1.7 * N), squeeze=False)
    r0, c0 = result["query_rc"]
    for i in range(N):
        img = imgs[i]
        axes[i, 0].imshow(img.permute(1, 2, 0).numpy())
        ps = img.shape[-1] / result["grid"][1]
        axes[i, 0].add_patch(plt.Rectangle((c0 * ps, r0 * ps), ps, ps, fill=False, color="cyan", lw=1.5))
        axes[i, 0].set_title("image, query", fontsize=7)
        axes[i, 0].axis("off")
        for l in range(L):
            _overlay(axes[i, l + 1], img, maps[i, l], f"layer {l}")
        _overlay(axes[i, L + 1], img, roll[i], f"rollout ({result['rollout_source']})")
    title = f"Attention of the query patch per layer, and rollout — {result.get('model', '')}"
    return [finish_figure(fig, out / "attention_maps.png", title, fontsize=9)]


@register_analysis
class AttentionMaps(Analysis):
    name = "attention_maps"
    check = staticmethod(checks.attention_maps)
    requires_probe = True
    smoke = {"images": 1}
    families = ("vit", "deit", "fan")
    description = "attention of a query patch per layer and attention rollout, over the image (ViT Fig. 6)"
    Options = AttentionMapsOptions
    run = staticmethod(compute_attention_maps)
    plot = staticmethod(plot_attention_maps)


# -- position embeddings ------------------------------------------------------------------------------------
def compute_pos_embed_similarity(ctx: Context, options: Any = None) -> dict[str, Any]:
    probe = ctx.probe
    pos = getattr(probe.net, "pos_embed", None)
    if not isinstance(pos, torch.Tensor) or probe.grid_size is None:
        raise RobustvitError("pos_embed_similarity needs a learned position embedding (ViT, DeiT)")
    gh, gw = probe.grid_size
    P = gh * gw
    pe = pos.detach()[0].double()
    if pe.shape[0] == P + probe.num_prefix_tokens:
        pe = pe[probe.num_prefix_tokens:]
    elif pe.shape[0] != P:
        raise RobustvitError(f"position embedding has {pe.shape[0]} entries for a {gh}×{gw} grid")
    pe = torch.nn.functional.normalize(pe, dim=-1)
    sim = pe @ pe.T
    sim.fill_diagonal_(1.0)
    return {"similarity": tolist(sim, 5), "grid": [gh, gw], "num_images": 0}


def plot_pos_embed(result: dict[str, Any], out: Path) -> list[str]:
    import matplotlib.pyplot as plt
    gh, gw = result["grid"]
    sim = torch.tensor(result["similarity"]).view(gh, gw, gh, gw)
    # the grid of grids as one mosaic: tile (r, c) holds patch (r, c)'s similarity to every position
    pad = torch.full((gh, gw, gh + 1, gw + 1), float("nan"))
    pad[:, :, :gh, :gw] = sim
    mosaic = pad.permute(0, 2, 1, 3).reshape(gh * (gh + 1), gw * (gw + 1))
    fig, ax = plt.subplots(figsize=(6.5, 6))
    im = ax.imshow(mosaic.numpy(), vmin=-1, vmax=1, cmap="viridis")
    ax.set_xticks([(c + 0.5) * (gw + 1) - 1 for c in range(gw)], [str(c) for c in range(gw)], fontsize=6)
    ax.set_yticks([(r + 0.5) * (gh + 1) - 1 for r in range(gh)], [str(r) for r in range(gh)], fontsize=6)
    ax.set_xlabel("input patch column"), ax.set_ylabel("input patch row")
    fig.colorbar(im, ax=ax, shrink=0.8, label="cosine similarity")
    return [finish_figure(fig, out / "pos_embed_similarity.png",
                          f"Position embedding similarity — {result.get('model', '')}", fontsize=9, tight=False)]


@register_analysis
class PosEmbedSimilarity(Analysis):
    name = "pos_embed_similarity"
    check = staticmethod(checks.pos_embed_similarity)
    requires_probe = True
    families = ("vit", "deit")
    description = "cosine similarity of each position embedding with all others (ViT Fig. 7 centre)"
    needs_data = False
    run = staticmethod(compute_pos_embed_similarity)
    plot = staticmethod(plot_pos_embed)


attention_maps = AttentionMaps.function(
    """Per-layer attention of a query patch and attention rollout for the first ``images`` images. Keywords:
    :class:`AttentionMapsOptions` and the run's limit, batch_size, seed, device, store, progress.""")


pos_embed_similarity = PosEmbedSimilarity.function(
    """``{"similarity": P × P cosine similarities of the patch position embeddings, "grid"}``.""")
