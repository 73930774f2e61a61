"""The headline numbers ("Inside the models" table) of the analyses whose results hold only curves and matrices:
each reader maps one result to ``{label: number}``; a field the result lacks gives no number."""

from __future__ import annotations

from typing import Any

from robustvit.report.sections.analysis import register_analysis_headline


def _mean(xs: list[Any]) -> float | None:
    """The mean of the numbers in ``xs``; None without any."""
    xs = [float(x) for x in xs if isinstance(x, (int, float))]
    return sum(xs) / len(xs) if xs else None


@register_analysis_headline("attention_distance")
def attention_distance(r: dict[str, Any]) -> dict[str, float | None]:
    """Mean attention distance (pixels, mean over heads) of the first and the last block (Dosovitskiy et al.
    2021, arXiv:2010.11929, Fig. 7)."""
    d = r.get("distance") or []
    return {"first block (px)": _mean(d[0]) if d else None, "last block (px)": _mean(d[-1]) if d else None}


@register_analysis_headline("correlation")
def correlation(r: dict[str, Any]) -> dict[str, float | None]:
    """The similarity (Pearson or CKA, all tokens) of the first and the last layer and the mean of adjacent
    layers (Bhojanapalli et al. 2021, arXiv:2103.14586)."""
    m, how = r.get("all_tokens") or [], r.get("method", "similarity")
    if len(m) < 2:
        return {}
    return {f"first vs last layer ({how})": float(m[0][-1]),
            f"adjacent layers, mean ({how})": _mean([m[i][i + 1] for i in range(len(m) - 1)])}


@register_analysis_headline("lesion")
def lesion(r: dict[str, Any]) -> dict[str, float | None]:
    """Accuracy with one block removed: the worst block and the mean over blocks (Bhojanapalli et al. 2021)."""
    single = (r.get("single") or {}).get("block") or []
    return {"one block removed, worst": min(single) if single else None,
            "one block removed, mean": _mean(single)}


@register_analysis_headline("restricted_attention")
def restricted_attention(r: dict[str, Any]) -> dict[str, float | None]:
    """Accuracy with attention restricted to the nearest patches (the smallest d measured) and with patches
    attending only to the class token (else themselves) in every block (Bhojanapalli et al. 2021)."""
    local = r.get("local") or {}
    d = min(local, key=int) if local else None
    only = r.get("cls_only_first") or {}
    k = max(only, key=int) if only else None
    whom = ("CLS" + (" and themselves" if r.get("cls_only") == "cls_self" else "") if r.get("has_class_token", True)
            else "themselves (no class token)")
    return {f"local attention, d={d}": local.get(d) if d else None,
            f"patches attend only to {whom}, all blocks": only.get(k) if k else None}


@register_analysis_headline("attention_stability")
def attention_stability(r: dict[str, Any]) -> dict[str, float | None]:
    """Mean cosine similarity of the attention maps, clean against patch-occluded (AFAT)."""
    return {"mean cosine, clean vs occluded": r.get("mean")}
