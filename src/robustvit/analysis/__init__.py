"""Explain: the internals studies of the papers, one registered analysis each.

``list_analyses(pattern)``, ``get_analysis(name)``, ``analyses_for(family)``, and
``run_analyses(model, dataset, names, out_dir, ...)`` (what ``robustvit analyze`` and the demo call).
An analysis is a class decorated with ``@register_analysis``, its options the class's ``Options`` dataclass
(the registry imports every module of this package before its first lookup). Each analysis also has a plain
function taking the options as keywords, e.g. ``correlation(model, dataset, method="cka")``.

>>> res = run_analyses(create_model("vit_cifar_micro"), create_dataset("synthshapes:test,count=8"),
...                    ["pos_embed_similarity"], None)
>>> res["pos_embed_similarity"]["grid"]
[8, 8]
"""

from __future__ import annotations

from robustvit.analysis.base import (ANALYSES, FAMILIES, Analysis, Context, analyses_for, check_family, family_of,
                                    get_analysis, list_analyses, make_context, register_analysis)

from robustvit.analysis.runner import run_analyses  # noqa: E402
from robustvit.analysis.correlation import correlation  # noqa: E402
from robustvit.analysis.lesion import lesion  # noqa: E402
from robustvit.analysis.restricted import restricted_attention  # noqa: E402
from robustvit.analysis.attention import attention_distance, attention_maps, pos_embed_similarity  # noqa: E402
from robustvit.analysis.grouping import grouping  # noqa: E402
from robustvit.analysis.stability import attention_stability  # noqa: E402
from robustvit.analysis.semantics import perturbation_semantics  # noqa: E402

__all__ = ["ANALYSES", "FAMILIES", "Analysis", "Context", "analyses_for", "register_analysis", "attention_distance",
           "attention_maps", "attention_stability", "check_family", "correlation", "family_of", "get_analysis",
           "grouping", "lesion", "list_analyses", "make_context", "perturbation_semantics",
           "pos_embed_similarity", "restricted_attention", "run_analyses"]
