"""Report section of the ``fewshot`` suite: few-shot linear accuracy per number of shots (mean ± std over
random draws), the ViT paper's few-shot evaluation (arXiv:2010.11929, §4.1)."""

from __future__ import annotations

from typing import Any

from robustvit.report.section import Section, md_table, register_section, suite_runs

GROUP = "clean"


@register_section("fewshot*", order=20)
def fewshot_section(key: str, results: list[dict[str, Any]]) -> Section | None:
    if not (runs := suite_runs(key, results)):
        return None
    shots = sorted({int(k) for _, s in runs for k in s.get("accuracy", {})})
    rows = []
    for name, s in runs:
        row: list[Any] = [name]
        for k in map(str, shots):
            e = s.get("accuracy", {}).get(k)
            row.append(None if e is None else f"{e['mean']:.4f} ± {e['std']:.4f}")
        rows.append(row + [s.get("feature_dim")])
    first = runs[0][1]
    l2 = first.get("l2")
    text = ("Few-shot linear accuracy on the evaluation images: closed-form ridge regression from the frozen "
            f"pre-logit features of *k* training images per class ({first.get('train_data')}) to ±1 targets, "
            f"λ = {'chosen per draw on held-out training images' if l2 == 'auto' else l2}; mean ± std over "
            f"{first.get('draws')} random draws.\n\n")
    return Section(f"Few-shot linear probe (`{key}`)",
                   text + md_table(["model"] + [f"{k}-shot" for k in shots] + ["feature dim"], rows))
