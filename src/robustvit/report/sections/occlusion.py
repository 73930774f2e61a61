"""Report section of the ``patch_occlusion`` suite: accuracy vs occluded fraction ρ with a min–max band
over random masks per model (AFAT, arXiv:2306.07881, Fig. 1), and a table."""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt

from robustvit.plotting import place_legend
from robustvit.report.section import Figure, Section, file_stem, md_table, register_section, suite_runs

GROUP = "natural"


def _band(e: dict[str, float] | None) -> str | None:
    """One ρ's ``mean [min–max]`` accuracy over masks."""
    return None if e is None else f"{e['mean']:.4f} [{e['min']:.4f}–{e['max']:.4f}]"


@register_section("patch_occlusion*", order=30)
def occlusion_section(key: str, results: list[dict[str, Any]]) -> Section | None:
    if not (runs := suite_runs(key, results)):
        return None
    rhos = sorted({float(k) for _, s in runs for k in s.get("per_rho", {})}, key=float)
    rho_keys = [f"{r:g}" for r in rhos]
    rows = [[name, s.get("clean_accuracy")] + [_band(s.get("per_rho", {}).get(k)) for k in rho_keys]
            for name, s in runs]
    first = runs[0][1]
    text = (f"Accuracy when a fraction ρ of the patches is replaced by "
            f"{'uniform noise' if first.get('mode') == 'noise' else 'zeros'} ({first.get('masks')} random masks per "
            "image; mean [min–max] over masks of the per-mask accuracy).\n\n")
    md = text + md_table(["model", "clean"] + [f"ρ={k}" for k in rho_keys], rows)
    fig, ax = plt.subplots(figsize=(5, 3.2))
    for name, s in runs:
        ks = [k for k in rho_keys if k in s.get("per_rho", {})]
        xs = [0.0] + [float(k) for k in ks]
        mean, lo, hi = ([s["clean_accuracy"]] + [s["per_rho"][k][stat] for k in ks] for stat in ("mean", "min", "max"))
        (line,) = ax.plot(xs, mean, marker="o", label=name)
        ax.fill_between(xs, lo, hi, color=line.get_color(), alpha=0.2)
    ax.set_xlabel("occluded fraction ρ"), ax.set_ylabel("accuracy"), ax.set_ylim(0, 1)
    ax.set_title("Patch occlusion"), place_legend(ax, outside=True, frameon=False)
    fig.tight_layout()
    return Section(f"Patch occlusion (`{key}`)", md,
                   [Figure(file_stem(key), fig, "accuracy vs ρ, band = min–max over masks")])
