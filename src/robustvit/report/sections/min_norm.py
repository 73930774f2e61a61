"""Report section of the ``min_norm`` suite: robust accuracy against ε per model from each image's minimum-norm
distance (Pintor et al. 2021, arXiv:2102.12827), with the fixed-ε attack suites of the same results and norm
(PGD, APGD, AutoAttack, FGSM, …) as points at their ε, and a table of the distances' quantiles."""

from __future__ import annotations

import math
from typing import Any

import matplotlib.pyplot as plt

from robustvit.plotting import place_legend
from robustvit.report.headline import protocol_notes
from robustvit.report.section import Figure, Section, key_stem, md_table, register_section, suite_runs

GROUP = "adversarial"
MARKERS = "osD^vP*X"


def fixed_eps_points(run: dict[str, Any], norm: str) -> list[tuple[str, float, float]]:
    """``(suite key, ε, robust accuracy)`` of every fixed-ε attack suite of ``run`` (a results.json document) in
    ``norm``: the results that record an attack, a finite ε and a robust accuracy (``min_norm`` itself left out)."""
    out = []
    for key, s in (run.get("suites") or {}).items():
        if not isinstance(s, dict) or key.split(":", 1)[0] == "min_norm" or not s.get("attack"):
            continue
        eps, acc = s.get("eps"), s.get("accuracy")
        if (s.get("norm") == norm and isinstance(eps, (int, float)) and math.isfinite(eps)
                and isinstance(acc, (int, float)) and not isinstance(acc, bool)):
            out.append((key, float(eps), float(acc)))
    return sorted(out, key=lambda p: (p[1], p[0]))


NORM_NAMES = {"linf": "L∞", "l2": "L2", "l1": "L1"}


def _scale(norm: str) -> tuple[float, str]:
    return (255.0, "L∞ ε (grey levels, /255)") if norm == "linf" else (1.0, f"{NORM_NAMES.get(norm, norm)} ε")


@register_section("min_norm*", order=15)
def min_norm_section(key: str, results: list[dict[str, Any]]) -> Section | None:
    if not (runs := suite_runs(key, results)):
        return None
    norm = str(runs[0][1].get("norm") or "linf")
    scale, label = _scale(norm)
    fig, ax = plt.subplots(figsize=(5.5, 3.5))
    marker: dict[str, str] = {}
    points = {name: fixed_eps_points(next(r for r in results if r["suites"].get(key) is s), norm) for name, s in runs}
    right = max([p[0] for _, s in runs for p in s.get("curve") or []] + [e for ps in points.values() for _, e, _ in ps])
    for i, (name, s) in enumerate(runs):
        curve = s.get("curve") or []
        if curve:       # the step curve, held to the right edge (constant after the last distance)
            xs, ys = [p[0] * scale for p in curve] + [right * 1.05 * scale], [p[1] for p in curve] + [curve[-1][1]]
            ax.step(xs, ys, where="post", color=f"C{i}", label=f"{name} · {s.get('attack')}")
        labelled = set()
        for k, eps, acc in points[name]:
            family = k.split(":", 1)[0]
            m = marker.setdefault(family, MARKERS[len(marker) % len(MARKERS)])
            ax.plot([eps * scale], [acc], m, color=f"C{i}", linestyle="none",
                    label=None if family in labelled else f"{name} · {family}")
            labelled.add(family)
    ax.set_xlabel(label), ax.set_ylabel("robust accuracy"), ax.set_ylim(0, 1), ax.set_xlim(left=0)
    ax.set_title("Robust accuracy against ε (minimum-norm distances)")
    place_legend(ax, outside=True, frameon=False, fontsize=7)
    fig.tight_layout()
    qs = list(runs[0][1].get("quantiles") or {})
    rows = [[name, s.get("attack"), s.get("steps"), s.get("clean_accuracy"),
             *((s.get("quantiles") or {}).get(q) for q in qs), s.get("num_not_found"), s.get("num_images")]
            for name, s in runs]
    md = (f"Robust accuracy against the {NORM_NAMES.get(norm, norm)} budget ε from one run: each correctly "
          "classified image's smallest adversarial perturbation found (FMN, Pintor et al. 2021, or FAB's), "
          "accuracy(ε) = the fraction of images whose distance exceeds ε — an upper bound of the true robust "
          "accuracy, not a RobustBench number. Markers: the fixed-ε attack suites of the same runs. Distance "
          "quantiles over the correctly classified images (– : no adversarial found for that fraction).\n\n")
    md += md_table(["model", "attack", "steps", "clean", *[f"q{q}" for q in qs], "not found", "images"], rows)
    lines = protocol_notes(key, [r for r in results if key in r["suites"]])
    if lines:
        md += "\n\n" + " ".join(lines)
    return Section(f"Minimum-norm robustness (`{key}`)", md,
                   [Figure(key_stem(key, "min_norm"), fig, f"robust accuracy against {norm} ε per model")])
