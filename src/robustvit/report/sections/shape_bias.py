"""Report section of the ``shape_bias`` suite: a bar per model and a table (Geirhos et al.,
arXiv:1811.12231: shape bias = shape / (shape + texture) decisions on cue-conflict stimuli)."""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt

from robustvit.report.section import Figure, Section, file_stem, md_table, register_section, suite_runs

GROUP = "natural"


@register_section("shape_bias*", order=40)
def shape_bias_section(key: str, results: list[dict[str, Any]]) -> Section | None:
    if not (runs := suite_runs(key, results)):
        return None
    rows = [[n, s.get("shape_bias"), s.get("shape_accuracy"), s.get("texture_accuracy"), s.get("shape_decisions"),
             s.get("texture_decisions"), s.get("other_decisions"), s.get("num_stimuli"), s.get("excluded")]
            for n, s in runs]
    md = ("Shape bias = shape decisions / (shape + texture decisions) on cue-conflict stimuli "
          f"({runs[0][1].get('stimuli', '')}); 1 = decides by shape only, 0 = by texture only.\n\n")
    md += md_table(["model", "shape bias", "shape acc.", "texture acc.", "shape", "texture", "other", "stimuli",
                    "excluded"], rows)
    fig, ax = plt.subplots(figsize=(3 + len(runs), 3))
    ax.bar([n for n, _ in runs], [s.get("shape_bias") or 0.0 for _, s in runs], color="#55a868")
    ax.axhline(0.5, color="grey", lw=0.8, ls="--")
    ax.set_ylim(0, 1), ax.set_ylabel("shape bias"), ax.set_title("Shape bias (cue conflict)")
    fig.tight_layout()
    return Section(f"Shape bias (`{key}`)", md, [Figure(file_stem(key), fig, "shape bias per model")])
