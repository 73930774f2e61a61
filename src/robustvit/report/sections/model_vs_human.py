"""Report section of the ``model_vs_human`` suite (Geirhos et al., arXiv:2106.07411): the benchmark table (OOD
accuracy and, against human observers, accuracy difference, observed and error consistency) and the paper's
accuracy-against-condition plots, one panel per data set with several conditions."""

from __future__ import annotations

import math
from typing import Any

import matplotlib.pyplot as plt

from robustvit.plotting import place_legend
from robustvit.report.section import Figure, Section, file_stem, md_table, register_section, suite_runs

METRICS = (("ood_accuracy", "OOD accuracy"), ("accuracy_difference", "accuracy difference"),
           ("observed_consistency", "observed consistency"), ("error_consistency", "error consistency"))


@register_section("model_vs_human*", order=42)
def model_vs_human_section(key: str, results: list[dict[str, Any]]) -> Section | None:
    if not (runs := suite_runs(key, results)):
        return None
    images = runs[0][1].get("images", "")
    cols = [(k, label) for k, label in METRICS if any(k in s for _, s in runs)]
    md = (f"model-vs-human's out-of-distribution sets, {images} images "
          + ("(released files; human data: " + str(runs[0][1].get("human_data")) + ")" if images == "released"
             else "(generated on the fly from the run's images; not comparable with the released sets)")
          + ". Means over the data sets of each set's benchmark conditions.\n\n")
    md += md_table(["model"] + [label for _, label in cols], [[n] + [s.get(k) for k, _ in cols] for n, s in runs])
    sets = [d for d in runs[0][1].get("datasets", {}) if len(runs[0][1]["datasets"][d]["conditions"]) > 1]
    figures = []
    if sets:
        ncol = min(4, len(sets))
        nrow = math.ceil(len(sets) / ncol)
        fig, axes = plt.subplots(nrow, ncol, figsize=(3 * ncol, 2.6 * nrow), squeeze=False)
        for ax, d in zip(axes.flat, sets):
            for n, s in runs:
                conds = s["datasets"].get(d, {}).get("conditions", {})
                ax.plot(range(len(conds)), [c["accuracy"] for c in conds.values()], marker="o", label=n)
                ax.set_xticks(range(len(conds)), list(conds), rotation=45, fontsize=7)
            first = runs[0][1]["datasets"][d]["conditions"]
            if "human_accuracy" in next(iter(first.values())):
                ax.plot(range(len(first)), [c["human_accuracy"] for c in first.values()], "k--", label="humans")
            ax.set_ylim(0, 1), ax.set_title(d, fontsize=9), ax.axhline(1 / 16, color="grey", lw=0.6, ls=":")
        for ax in list(axes.flat)[len(sets):]:
            ax.axis("off")
        place_legend(axes.flat[0], outside=True)
        fig.tight_layout()
        figures.append(Figure(file_stem(key), fig, "accuracy per condition (dotted: chance, 1/16; dashed: humans)"))
    return Section(f"model-vs-human (`{key}`)", md, figures)
