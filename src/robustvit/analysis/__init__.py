"""Explain: the internals studies of the papers, one registered analysis each.

``list_analyses(pattern)``, ``get_analysis(name)``, ``analyses_for(family)``, and
``run_analyses(model, dataset, names, out_dir, ...)`` (what ``robustvit analyze`` and the demo call).
An analysis is a class decorated with ``@register_analysis`` (importing this package registers the built-ins);
its options are the class's ``Options`` dataclass. Each analysis also has a plain function returning plain
data, taking the options as keywords (``correlation(model, dataset, method="cka")``, ``lesion``,
``restricted_attention``, ``attention_distance``, ``attention_maps``, ``pos_embed_similarity``, ``grouping``,
``attention_stability``, ``perturbation_semantics``).

>>> run_analyses(create_model("vit_cifar_tiny"), create_dataset("synthshapes:test"), ["lesion"], "out",
...              limit=256)["lesion"]["clean_accuracy"]
"""

from __future__ import annotations

from robustvit.analysis.base import (ANALYSES, FAMILIES, Analysis, Context, family_of, make_context,
                                    register_analysis)
from robustvit.errors import RobustvitError

#: What ``robustvit demo`` runs per model family, with default options.
DEMO_ANALYSES = {"vit": ["correlation", "lesion", "restricted_attention", "attention_distance", "attention_stability"],
                 "cnn": ["correlation", "lesion"]}


def list_analyses(pattern: str | None = None) -> list[str]:
    """Registered analysis names, optionally filtered by a shell-style pattern."""
    return ANALYSES.list(pattern)


def get_analysis(name: str) -> Analysis:
    return ANALYSES.get(name)


def analyses_for(family: str) -> list[str]:
    """The analyses that apply to a model family (vit, deit, xcit, swin, fan, cnn)."""
    return [n for n, a in ANALYSES.items() if family in a.families]


def check_family(name: str, family: str, model_name: str = "") -> None:
    """A one-line error when analysis ``name`` does not apply to ``family``."""
    a = get_analysis(name)
    if family not in a.families:
        ok = analyses_for(family)
        raise RobustvitError(f"analysis {name} does not apply to {family} models{f' ({model_name})' if model_name else ''}; "
                             f"it applies to {', '.join(a.families)}; for {family} use: {', '.join(ok) or 'none'}")


from robustvit.analysis.runner import run_analyses  # noqa: E402
from robustvit.analysis.correlation import correlation  # noqa: E402
from robustvit.analysis.lesion import lesion  # noqa: E402
from robustvit.analysis.restricted import restricted_attention  # noqa: E402
from robustvit.analysis.attention import attention_distance, attention_maps, pos_embed_similarity  # noqa: E402
from robustvit.analysis.grouping import grouping  # noqa: E402
from robustvit.analysis.stability import attention_stability  # noqa: E402
from robustvit.analysis.semantics import perturbation_semantics  # noqa: E402

__all__ = ["ANALYSES", "DEMO_ANALYSES", "FAMILIES", "Analysis", "Context", "analyses_for", "register_analysis", "attention_distance",
           "attention_maps", "attention_stability", "check_family", "correlation", "family_of", "get_analysis",
           "grouping", "lesion", "list_analyses", "make_context", "perturbation_semantics",
           "pos_embed_similarity", "restricted_attention", "run_analyses"]
