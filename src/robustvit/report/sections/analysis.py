"""Report section "Inside the models": the analyses of ``robustvit analyze`` (``suites["analysis"]`` of a
result, from an analysis folder or ``<eval folder>/analysis``): a table of headline numbers per model, a
side-by-side lesion plot, and the plots each analysis wrote."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt

from robustvit.report.builder import Figure, Section, md_table, register_section

TITLE = "Inside the models"


def _headlines(name: str, a: dict[str, dict[str, Any]]) -> list[list[Any]]:
    rows: list[list[Any]] = []
    if "correlation" in a:
        m = a["correlation"]["all_tokens"]
        adj = [m[i][i + 1] for i in range(len(m) - 1)]
        rows.append(["correlation: mean absolute Pearson ρ of adjacent layers" if a["correlation"]["method"] == "pearson"
                     else "correlation: mean CKA of adjacent layers", sum(adj) / max(1, len(adj))])
    if "lesion" in a:
        r = a["lesion"]
        rows.append(["lesion: clean accuracy", r["clean_accuracy"]])
        blocks = r["single"].get("block") or []
        if blocks:
            worst = min(range(len(blocks)), key=blocks.__getitem__)
            rows.append([f"lesion: accuracy without block {worst} (the most important)", blocks[worst]])
            rows.append(["lesion: mean accuracy with one block removed", sum(blocks) / len(blocks)])
    if "restricted_attention" in a:
        r = a["restricted_attention"]
        d0 = min(r["local"], key=int)
        rows.append([f"restricted attention: local d={d0} / random", f"{r['local'][d0]:.4f} / {r['random'][d0]:.4f}"])
    if "attention_distance" in a:
        d = a["attention_distance"]["distance"]
        rows.append(["attention distance (px): first / last layer, mean over heads",
                     f"{sum(d[0]) / len(d[0]):.2f} / {sum(d[-1]) / len(d[-1]):.2f}"])
    if "attention_stability" in a:
        r = a["attention_stability"]
        rows.append([f"attention stability: mean cosine at {r['rho']:.0%} occlusion", r["mean"]])
    if "grouping" in a:
        r = a["grouping"]
        if r.get("insignificant_eigenvalues"):     # FAN's Fig. 3 plots the insignificant ones
            rows.append(["grouping: insignificant eigenvalues, last block", r["insignificant_eigenvalues"][-1]])
        else:
            rows.append(["grouping: significant eigenvalues, last block", r["significant_eigenvalues"][-1]])
    if "perturbation_semantics" in a:
        r = a["perturbation_semantics"]
        rows.append([f"perturbation semantics: top-1 / top-5 ({r['classifier']})", f"{r['top1']:.4f} / {r['top5']:.4f}"])
    return rows


@register_section("analysis")
def analysis_section(key: str, results: list[dict[str, Any]]) -> Section | None:
    found = [(r["model"]["name"], r["suites"][key]) for r in results if key in r["suites"]]
    if not found:
        return None
    labels: list[str] = []
    values: dict[str, dict[str, Any]] = {}
    for name, entry in found:
        for label, v in _headlines(name, entry["results"]):
            if label not in labels:
                labels.append(label)
            values.setdefault(name, {})[label] = v
    names = [n for n, _ in found]
    md = [md_table(["measure"] + names, [[lab] + [values.get(n, {}).get(lab) for n in names] for lab in labels])]
    notes = [f"{n} · {k}: {'; '.join(r['notes'])}" for n, e in found for k, r in e["results"].items() if r.get("notes")]
    if notes:
        md += ["", "Settings that differ from the papers: " + " — ".join(notes)]
    figures: list[Figure] = []
    lesions = [(n, e["results"]["lesion"]) for n, e in found if "lesion" in e["results"]]
    if len(lesions) > 1:
        fig, ax = plt.subplots(figsize=(5.5, 3.5))
        for n, r in lesions:
            b = r["single"]["block"]
            ax.plot([i / max(1, len(b) - 1) for i in range(len(b))], b, marker="o", label=n)
        ax.set_xlabel("relative depth of the removed block"), ax.set_ylabel("accuracy"), ax.set_ylim(0, 1.02)
        ax.set_title("One block removed"), ax.legend(fontsize=8)
        fig.tight_layout()
        figures.append(Figure("analysis_lesion", fig, "Accuracy with one block removed, side by side"))
    for i, (n, e) in enumerate(found):
        folder = Path(e["dir"])
        for a_name, r in e["results"].items():
            for f in r.get("figures", []):
                if (folder / f).is_file():
                    figures.append(Figure(f"analysis_{i}_{Path(f).stem}", folder / f, f"{n}: {a_name} ({f})"))
    return Section(TITLE, "\n".join(md), figures)
