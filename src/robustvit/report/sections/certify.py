"""Report sections of the certification suites: certified accuracy against the L2 radius per model (randomized
smoothing, Cohen et al. 2019, arXiv:1902.02918, Fig. 7 / Table 1), and a certified-patch table (derandomized
smoothing, Levine & Feizi 2020, arXiv:2002.10733; Salman et al. 2022, arXiv:2110.07719, Table 1)."""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt

from robustvit.plotting import place_legend
from robustvit.report.section import Figure, Section, file_stem, md_table, register_section, suite_runs

GROUP = "adversarial"


def _curve(s: dict[str, Any]) -> tuple[list[float], list[float]]:
    """Certified accuracy at every radius up to the largest: from ``per_image`` when present (a step curve, as
    locuslab's ``analyze.py``), else the suite's ``certified_accuracy`` points."""
    rows = s.get("per_image") or []
    if rows:
        radii = sorted({0.0} | {float(r["radius"]) for r in rows if r["correct"]})
        n = len(rows)
        return radii, [sum(1 for r in rows if r["correct"] and r["radius"] >= x) / n for x in radii]
    pts = sorted((float(k), v) for k, v in s.get("certified_accuracy", {}).items())
    return [p[0] for p in pts], [p[1] for p in pts]


@register_section("certify*", order=80)
def certify_section(key: str, results: list[dict[str, Any]]) -> Section | None:
    if not (runs := suite_runs(key, results)):
        return None
    radii = sorted({float(k) for _, s in runs for k in s.get("certified_accuracy", {})})
    keys = [f"{r:g}" for r in radii]
    rows = [[name, *(s.get("certified_accuracy", {}).get(k) for k in keys), s.get("abstain_rate"),
             s.get("num_images")] for name, s in runs]
    st = runs[0][1].get("settings", {})
    text = ("Certified L2 accuracy of the smoothed classifier (randomized smoothing, Cohen et al. 2019): the fraction "
            "of images predicted correctly with a certified radius of at least r (pixel units, [0, 1] images). "
            f"σ = {st.get('sigma')}, n0 = {st.get('n0')}, n = {st.get('n')}, α = {st.get('alpha')}; the paper "
            "certifies with n = 100,000.\n\n")
    md = text + md_table(["model", *[f"r={k}" for k in keys], "abstain", "images"], rows)
    fig, ax = plt.subplots(figsize=(5, 3.2))
    for name, s in runs:
        xs, ys = _curve(s)
        ax.step(xs, ys, where="post", label=name)
    ax.set_xlabel("L2 radius"), ax.set_ylabel("certified accuracy"), ax.set_ylim(0, 1)
    ax.set_title("Randomized smoothing"), place_legend(ax, outside=True)
    fig.tight_layout()
    return Section(f"Certified accuracy (`{key}`)", md,
                   [Figure(file_stem(key), fig, "certified accuracy vs L2 radius")])


@register_section("certify_patch*", order=81)
def certify_patch_section(key: str, results: list[dict[str, Any]]) -> Section | None:
    if not (runs := suite_runs(key, results)):
        return None
    patches = sorted({int(k) for _, s in runs for k in s.get("certified_accuracy", {})})
    rows = [[name, s.get("clean_accuracy"), *(s.get("certified_accuracy", {}).get(str(m)) for m in patches),
             s.get("tokens"), s.get("encoding"), s.get("num_images")] for name, s in runs]
    st = runs[0][1].get("settings", {})
    text = (f"Derandomized smoothing against an m×m adversarial patch ({st.get('ablation')} ablation, band "
            f"{st.get('size_pixels')} px, stride {st.get('stride')}; Levine & Feizi 2020, Salman et al. 2022): clean = "
            "the smoothed classifier's accuracy, m = the fraction certified and correct; tokens = ViT tokens dropped "
            "or ablated pixels zero-filled; encoding = the network's input (rgb: the ablated image, 3 channels; "
            "levine_feizi: Levine & Feizi's 6 channels, the image and its complement, zero where ablated).\n\n")
    md = text + md_table(["model", "clean", *[f"patch {m}×{m}" for m in patches], "tokens", "encoding", "images"],
                         rows)
    notes = [f"{name}: {s['tokens_note']}" for name, s in runs if s.get("tokens_note")]
    return Section(f"Certified patch robustness (`{key}`)", md, details=notes)
