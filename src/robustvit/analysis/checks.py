"""Invariants of the analyses' results, one function each (``Analysis.check``): a one-line problem or None.

Capabilities and the contract tests call them after checking that every number is finite and every accuracy
lies in [0, 1].
"""

from __future__ import annotations

import math
from typing import Any

import torch


def leaves(v: Any) -> list[float]:
    """Every number in a nested result, in order."""
    if isinstance(v, dict):
        return [x for w in v.values() for x in leaves(w)]
    if isinstance(v, (list, tuple)):
        return [x for w in v for x in leaves(w)]
    return [float(v)] if isinstance(v, (int, float)) and not isinstance(v, bool) else []


def square_unit(name: str, m: Any, diag: bool = True) -> str | None:
    """``m`` a square matrix with values in [-1, 1] (and ones on the diagonal: self-similarity)."""
    t = torch.tensor(m, dtype=torch.float64)
    if t.ndim != 2 or t.shape[0] != t.shape[1]:
        return f"{name} is not a square matrix: shape {tuple(t.shape)}"
    if float(t.abs().max()) > 1 + 1e-4:
        return f"{name} has values outside [-1, 1]"
    if diag and not torch.allclose(t.diagonal(), torch.ones(len(t), dtype=t.dtype), atol=1e-3):
        return f"{name}'s diagonal (self-similarity) is not 1"
    return None


def in_unit(name: str, values: Any) -> str | None:
    """Every number of ``values`` in [0, 1]."""
    flat = torch.tensor(leaves(values), dtype=torch.float64)
    if len(flat) and (float(flat.min()) < -1e-9 or float(flat.max()) > 1 + 1e-9):
        return f"{name} has values outside [0, 1]"
    return None


def attention_distance(r: dict[str, Any]) -> str | None:
    """(layers, heads) distances between 0 and the diagonal between the farthest patch centres."""
    d = torch.tensor(r["distance"], dtype=torch.float64)
    if tuple(d.shape) != (r["num_layers"], r["num_heads"]):
        return f"distance has shape {tuple(d.shape)}, expected (layers, heads) = ({r['num_layers']}, {r['num_heads']})"
    gh, gw = r["grid"]
    far = math.hypot(gh - 1, gw - 1) * float(r["patch_size"])
    if float(d.min()) < 0 or float(d.max()) > far + 1e-6:
        return f"attention distance outside [0, {far:.3g}] px (the image diagonal between patch centres)"
    return None


def correlation(r: dict[str, Any]) -> str | None:
    """Layer-by-layer similarity matrices: square, in [-1, 1], ones on the diagonal."""
    errors = [square_unit(k, r[k]) for k in ("all_tokens", "cls_token") if r.get(k) is not None]
    return next((e for e in errors if e), None)


def pos_embed_similarity(r: dict[str, Any]) -> str | None:
    """The position-embedding cosine similarities: square, in [-1, 1], ones on the diagonal."""
    return square_unit("similarity", r["similarity"])


def attention_stability(r: dict[str, Any]) -> str | None:
    """Cosine similarities in [-1, 1]."""
    return "cosine similarity outside [-1, 1]" if any(abs(v) > 1 + 1e-4 for v in leaves(r["cosine"])) else None


def lesion(r: dict[str, Any]) -> str | None:
    """Accuracies in [0, 1]."""
    return in_unit("lesion accuracies", [r["single"], r["clean_accuracy"]])


def restricted_attention(r: dict[str, Any]) -> str | None:
    """Accuracies in [0, 1]."""
    return in_unit("restricted-attention accuracies", [r.get(k, {}) for k in (
        "clean_accuracy", "local", "random", "cls_only_first", "cls_only_last")])


def attention_maps(r: dict[str, Any]) -> str | None:
    """No negative attention in the rollout or the query maps."""
    low = min(leaves(r.get("rollout", [])) + leaves(r.get("query_maps", [])) + [0.0])
    return "negative attention (rollout or query maps)" if low < -1e-6 else None
