"""Report section of the ``corruptions`` suite (ImageNet-C / CIFAR-10-C; Hendrycks & Dietterich, ICLR 2019,
arXiv:1903.12261; retention from FAN, arXiv:2204.12451): mean accuracy over corruptions against severity (0 =
clean) per model, and the accuracy per corruption (mean over severities) with summary rows, as table and bars.
"""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt

from robustvit.plotting import grouped_bars, place_legend
from robustvit.report.headline import protocol_notes
from robustvit.report.section import (Figure, Section, key_stem, md_table, register_extra_section,
                                      register_section, row_names, suite_runs)

GROUP = "natural"


#: The summary rows below the corruptions: label → suite field.
SUMMARY_ROWS = {"**clean**": "clean_accuracy", "**mean (benchmark)**": "mean_accuracy",
                "**mean (all)**": "mean_accuracy_all", "**mean w/o noise**": "mean_accuracy_without_noise",
                "**retention**": "retention"}


def _pct(v: Any, suffix: str = "") -> Any:
    """A percentage with one decimal and ``suffix``; None stays None."""
    return None if v is None else f"{v:.1f}{suffix}"


@register_section("corruptions*", order=10)
def corruptions_section(key: str, results: list[dict[str, Any]]) -> Section | None:
    if not (runs := suite_runs(key, results)):
        return None
    names = row_names(runs, "corruption_accuracy")
    header = ["corruption"] + [m for m, _ in runs]
    rows: list[list[Any]] = [[n] + [(s.get("corruption_accuracy") or {}).get(n) for _, s in runs] for n in names]
    rows += [[label] + [s.get(field) for _, s in runs] for label, field in SUMMARY_ROWS.items()]
    if any(s.get("mce") is not None for _, s in runs):
        approx = ["" if (s.get("protocol") or {}).get("comparable", True) else " (not comparable)" for _, s in runs]
        rows.append(["**mCE (%)**"] + [_pct(s.get("mce"), a) for (_, s), a in zip(runs, approx)])
        rows.append(["**relative mCE (%)**"] + [_pct(s.get("relative_mce"), a) for (_, s), a in zip(runs, approx)])
    grows = [[g] + [(s.get("groups") or {}).get(g) for _, s in runs] for g in row_names(runs, "groups")]
    first = runs[0][1]
    how = (f"read from `{first['source']}` ({first.get('source_layout')})" if first.get("source")
           else f"corrupted on the fly ({first.get('preset')} parameters"
           + (f", JPEG {first['jpeg_quality']}" if first.get("jpeg_quality") else "") + ")")
    notes = [f"Top-1 accuracy, mean over severities {', '.join(map(str, first.get('severities', [])))}; "
             f"{first.get('num_images')} images {how}. Retention = mean accuracy (benchmark corruptions) / clean "
             "accuracy (FAN). mCE: AlexNet-normalised corruption error (lower is better)."]
    reasons = {s.get("mce_reason") for _, s in runs if s.get("mce_reason")}
    notes += [f"mCE: {r}" for r in sorted(reasons)] + protocol_notes(key, results)
    frost = sorted({s["frost_source"] for _, s in runs if s.get("frost_source")})
    if frost:
        notes.append("frost layer: " + ", ".join(frost) + ".")
    md = (md_table(header, rows) + "\n\nMean accuracy per group:\n\n" + md_table(["group"] + header[1:], grows)
          + "\n\n" + "\n\n".join(notes))
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    for model, s in runs:
        sev = s.get("severity_accuracy") or {}
        xs = [int(k) for k in sev if sev[k] is not None]
        ys = [sev[str(k)] for k in xs]
        if s.get("clean_accuracy") is not None:
            xs, ys = [0] + xs, [s["clean_accuracy"]] + ys
        ax.plot(xs, ys, marker="o", label=model)
    ax.set_xticks(range(0, 6), ["clean", "1", "2", "3", "4", "5"])
    ax.set_xlabel("severity"), ax.set_ylabel("top-1 accuracy (mean over corruptions)")
    ax.set_ylim(0, 1), ax.grid(alpha=0.3)
    ax.set_title("Common corruptions: accuracy vs severity")
    place_legend(ax, outside=True, frameon=False)
    fig.tight_layout()
    return Section(f"Common corruptions (`{key}`)", md,
                   [Figure(key_stem(key, "corruptions"), fig, "mean accuracy over corruptions per severity")])


@register_extra_section("corruptions*", order=11)
def per_corruption_section(key: str, results: list[dict[str, Any]]) -> Section | None:
    """Accuracy per corruption (mean over severities), models side by side (a bar chart)."""
    runs = suite_runs(key, results)
    names = row_names(runs, "corruption_accuracy")
    if not names:
        return None
    fig, ax = plt.subplots(figsize=(max(6.0, 0.32 * len(names) * len(runs) + 2.5), 3.4))
    grouped_bars(ax, names, [(model, s.get("corruption_accuracy") or {}) for model, s in runs])
    ax.set_xticks(range(len(names)), [n.replace("_", " ") for n in names], rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("top-1 accuracy"), ax.set_ylim(0, 1), ax.grid(alpha=0.3, axis="y")
    ax.set_title("Accuracy per corruption (mean over severities)")
    place_legend(ax, outside=True, frameon=False)
    fig.tight_layout()
    caption = "accuracy per corruption, mean over severities, models side by side"
    return Section(f"Accuracy per corruption (`{key}`)", "",
                   [Figure(key_stem(key, "corruptions") + "_per_corruption", fig, caption)])
