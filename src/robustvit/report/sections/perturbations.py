"""Report section of the ``perturbations`` suite (ImageNet-P; Hendrycks & Dietterich, ICLR 2019,
arXiv:1903.12261): flip probability (FP) per perturbation as bars, models side by side, and a table of FP and
top-5 distance (T5D) per perturbation, their means and, with a baseline, mFR / mT5D.
"""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt

from robustvit.plotting import grouped_bars, place_legend
from robustvit.report.headline import protocol_notes
from robustvit.report.section import Figure, Section, key_stem, md_table, register_section, row_names, suite_runs

GROUP = "natural"


@register_section("perturbations*", order=20)
def perturbations_section(key: str, results: list[dict[str, Any]]) -> Section | None:
    if not (runs := suite_runs(key, results)):
        return None
    names = row_names(runs, "flip_probability")
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
    source = f" from `{first['source']}`" if first.get("source") else f" generated ({first.get('preset')} parameters)"
    notes = [f"Difficulty {first.get('difficulty')}, {first.get('num_sequences')} sequences{source}. FP: flip "
             "probability (share of frame pairs whose top-1 changes); T5D: top-5 distance."]
    reasons = {s.get("normalisation_reason") for _, s in runs if s.get("normalisation_reason")}
    notes += [f"Normalisation: {r}" for r in sorted(reasons)]
    bench = first.get("benchmark")
    if bench:
        notes.append(f"Means over the {'CIFAR-10-P' if bench == 'cifar-p' else 'ImageNet-P'} test perturbations"
                     + (f"; frames stored as {first['encoding']}" if first.get("encoding") else "") + ".")
    notes += protocol_notes(key, results)
    md = md_table(header, rows) + "\n\n" + "\n\n".join(notes)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.6 * len(names) * max(1, len(runs)) + 2), 3.4))
    grouped_bars(ax, names, [(model, s.get("flip_probability") or {}) for model, s in runs])
    ax.set_xticks(range(len(names)), names, rotation=35, ha="right")
    ax.set_ylabel("flip probability")
    ax.set_title("Perturbation sequences: flip probability (lower is more stable)")
    place_legend(ax, outside=True, frameon=False)
    fig.tight_layout()
    return Section(f"Perturbation stability (`{key}`)", md,
                   [Figure(key_stem(key, "perturbations"), fig, "flip probability per perturbation")])
