"""Report section of the ``perturbations`` suite (ImageNet-P flip probability / top-5 distance / mFR).

Hendrycks & Dietterich, ICLR 2019 (arXiv:1903.12261): a bar chart of the flip probability per
perturbation, models side by side, and a table with FP and T5D per perturbation, their means and, when a
baseline was given, mFR / mT5D.
"""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt

from robustvit.plotting import place_legend
from robustvit.report.headline import protocol_notes
from robustvit.report.section import Figure, Section, md_table, register_section

GROUP = "natural"


@register_section("perturbations*", order=20)
def perturbations_section(key: str, results: list[dict[str, Any]]) -> Section | None:
    runs = [(r["model"]["name"], r["suites"][key]) for r in results if isinstance(r["suites"].get(key), dict)]
    if not runs:
        return None
    names: list[str] = []
    for _, s in runs:
        names += [n for n in (s.get("flip_probability") or {}) if n not in names]
    rows = []
    for n in names:
        row: list[Any] = [n]
        for _, s in runs:
            row += [(s.get("flip_probability") or {}).get(n), (s.get("top5_distance") or {}).get(n)]
        rows.append(row)
    rows.append(["**mean (test)**"] + [v for _, s in runs for v in (s.get("mean_flip_probability"),
                                                                     s.get("mean_top5_distance"))])
    rows.append(["**mFR / mT5D**"] + [v for _, s in runs for v in (s.get("mfr"), s.get("mt5d"))])
    header = ["perturbation"] + [h for m, _ in runs for h in (f"{m} FP", f"{m} T5D")]
    first = runs[0][1]
    notes = [f"Difficulty {first.get('difficulty')}, {first.get('num_sequences')} sequences"
             + (f" from `{first['source']}`" if first.get("source") else f" generated ({first.get('preset')} parameters)")
             + ". FP: flip probability (share of frame pairs whose top-1 changes); T5D: top-5 distance."]
    reasons = {s.get("normalisation_reason") for _, s in runs if s.get("normalisation_reason")}
    notes += [f"Normalisation: {r}" for r in sorted(reasons)]
    bench = first.get("benchmark")
    if bench:
        notes.append(f"Means over the {'CIFAR-10-P' if bench == 'cifar-p' else 'ImageNet-P'} test perturbations"
                     + (f"; frames stored as {first['encoding']}" if first.get("encoding") else "") + ".")
    notes += protocol_notes(key, results)
    md = md_table(header, rows) + "\n\n" + "\n\n".join(notes)

    fig, ax = plt.subplots(figsize=(max(6.0, 0.6 * len(names) * max(1, len(runs)) + 2), 3.4))
    width = 0.8 / len(runs)
    for j, (model, s) in enumerate(runs):
        fp = s.get("flip_probability") or {}
        xs = [i + (j - (len(runs) - 1) / 2) * width for i in range(len(names))]
        ax.bar(xs, [fp.get(n) or 0.0 for n in names], width=width, label=model)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=35, ha="right")
    ax.set_ylabel("flip probability")
    ax.set_title("Perturbation sequences: flip probability (lower is more stable)")
    place_legend(ax, outside=True, frameon=False)
    fig.tight_layout()
    stem = "perturbations" if key == "perturbations" else "perturbations_" + "".join(
        c if c.isalnum() else "_" for c in key[len("perturbations"):]).strip("_")
    return Section(f"Perturbation stability (`{key}`)", md, [Figure(stem, fig, "flip probability per perturbation")])
