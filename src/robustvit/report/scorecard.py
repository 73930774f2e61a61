"""The report's first table (the scorecard: one row per model, the headline numbers and the comparability
labels), the models table, and robustness against model size (Bhojanapalli et al. 2021, arXiv:2103.14586,
Figs. 4–5: accuracy against parameters and FLOPs on log axes)."""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt
from matplotlib.ticker import NullFormatter

from robustvit.errors import RobustvitError
from robustvit.plotting import place_legend
from robustvit.report.section import Figure, Section, md_table
from robustvit.report.headline import ATTACK_COLUMNS, COLUMNS, PERCENT_COLUMNS, eps_text, labels, scorecard_row
from robustvit.report.verdict import BEST, attacks_compared, best_cells, cell_text, compare, near_chance
from robustvit.utils import parse_eps

SIZE_SERIES = (("clean", "clean"), ("corruption_mean", "corruptions (mean)"), ("pgd", "PGD"),
               ("autoattack", "AutoAttack"), ("imagenet_r", "ImageNet-R"), ("imagenet_a", "ImageNet-A"))


#: The published numbers a model's source knows (results.json ``model.reported``: RobustBench's ``model_info``), as
#: columns beside robustvit's own: column → (field of ``reported``, header).
REPORTED = {"reported_clean": ("clean_acc", "reported clean"),
            "reported_autoattack": ("autoattack_acc", "reported AutoAttack")}


def reported_cells(run: dict[str, Any], row: dict[str, Any] | None = None) -> dict[str, Any]:
    """``reported_clean`` / ``reported_autoattack`` (fractions) of a run whose model records published numbers; for
    a leaderboard ``row`` of a threat model, the published AutoAttack accuracy only where its ε is the row's (not
    beside another budget's numbers)."""
    rep = (run.get("model") or {}).get("reported") or {}
    out = {col: rep[key] for col, (key, _) in REPORTED.items() if isinstance(rep.get(key), (int, float))}
    if row is not None and row.get("eps") is not None and "reported_autoattack" in out:
        try:
            same = abs(parse_eps(rep.get("eps")) - float(row["eps"])) < 1e-6
        except RobustvitError:
            same = False
        if not same:
            del out["reported_autoattack"]
    return out


def scorecard_section(results: list[dict[str, Any]]) -> Section:
    """One row per model; above the table the verdict (the comparison the 95 % intervals support on the strongest
    attack measured) and the near-chance warnings; every other comparison folded under it."""
    rows = [{**row, **reported_cells(r, row)} for r in results for row in [scorecard_row(r)]]
    shown = [c for c in REPORTED if any(r.get(c) is not None for r in rows)]
    cols = [c for c in COLUMNS if any(r.get(c) is not None for r in rows)]
    eps = {eps_text(r["eps"], r["threat_model"]) for r in rows
           if r["eps"] is not None and any(r[c] is not None for c in ATTACK_COLUMNS)}
    one_eps = next(iter(eps)) if len(eps) == 1 else None
    header = ["model"]
    for c in cols:
        h = COLUMNS[c][0]
        if c in ATTACK_COLUMNS and one_eps:
            h += f" ε={one_eps}"
        header.append(h if c in PERCENT_COLUMNS else f"{h} (%)")
    header += [f"{REPORTED[c][1]} (%)" for c in shown]
    best = best_cells(rows, cols)
    table = []
    for i, r in enumerate(rows):
        cells: list[Any] = [r["model"]]
        for c in cols:
            v = cell_text(r, c, (i, c) in best)
            if v is not None and c in ATTACK_COLUMNS and not one_eps and r["eps"] is not None:
                v += f" (ε={eps_text(r['eps'], r['threat_model'])})"
            cells.append(v)
        cells += [None if r.get(c) is None else f"{100 * r[c]:.1f}" for c in shown]
        table.append(cells + [r["labels"]])
    comparisons = compare(rows)
    attacks = [s for r in rows if (s := attacks_compared(r))]
    top = comparisons[:1] + near_chance(rows)
    md = "\n\n".join(top + [md_table(header + ["labels"], table)])
    md += (f"\n\nTop-1 accuracy in % ({BEST} and bold: the best of its column), its gap to the clean accuracy of "
           "the same images in points, its 95 % Wilson score interval and the number of images it was measured on "
           "(mCE and mFR: lower is better; corruption and occlusion means: the interval of one accuracy on that "
           "many images, wider than the mean's). PGD, APGD and AutoAttack: robust accuracy at the strongest L∞ "
           "budget measured. Two models differ significantly when their intervals do not overlap. \"Reported\": "
           "the numbers published for the model (RobustBench's model_info), not measured here. Labels name each "
           "cell's deviations from its published protocol; the notes of each run are listed under \"Models\".")
    return Section("Scorecard", md, details=comparisons[1:] + attacks, summary="Every comparison the table supports")


def _weights(model: dict[str, Any]) -> str:
    source = str((model.get("weights") or {}).get("source", "not recorded"))
    if source == "random":
        return "**random (untrained)**"
    if source.startswith("checkpoint:"):            # the folder's last two parts name it well enough
        path = source.split(":", 1)[1].rstrip("/").replace("\\", "/").split("/")
        return "checkpoint …/" + "/".join(path[-2:])
    return source


def overview_section(results: list[dict[str, Any]]) -> Section:
    """Models: family, size, input, weights, data, images and device; the runs' notes; clean accuracy bars."""
    rows = []
    for r in results:
        m = r.get("model") or {}
        spec, data = m.get("spec") or {}, r.get("data") or {}
        rows.append([m.get("name"), spec.get("family"), f"{m['params'] / 1e6:.2f} M" if m.get("params") else None,
                     "×".join(map(str, (spec.get("input_size") or [])[1:])) or None, _weights(m), data.get("spec"),
                     data.get("num_images"), (r.get("run") or {}).get("device")])
    md = md_table(["model", "family", "params", "input", "weights", "data", "images", "device"], rows)
    random = [r["model"]["name"] for r in results
              if ((r.get("model") or {}).get("weights") or {}).get("source") == "random"]
    if random:
        md += (f"\n\n**Warning:** {', '.join(random)} evaluated with randomly initialised weights (no `--pretrained`, "
               "`--weights` or checkpoint): those results describe an untrained network.")
    details = [f"{r['model']['name']} ({', '.join(labels(r)) or 'comparable'}): " + "; ".join(r["notes"])
               for r in results if r.get("notes")]
    figures = []
    have = [r for r in results if isinstance(r["suites"].get("clean"), dict) and "top1" in r["suites"]["clean"]]
    if have:
        fig, ax = plt.subplots(figsize=(1.6 + 1.1 * len(have), 3))
        ax.bar([r["model"]["name"] for r in have], [r["suites"]["clean"]["top1"] for r in have], color="#4c72b0")
        ax.set_ylim(0, 1), ax.set_ylabel("clean top-1"), ax.set_title("Clean accuracy")
        ax.tick_params(axis="x", labelrotation=20 if len(have) > 2 else 0, labelsize=8)
        fig.tight_layout()
        figures.append(Figure("clean_accuracy", fig, "Clean top-1 accuracy per model"))
    return Section("Models", md, figures, group="clean", details=details,
                   summary="Why the numbers are not comparable with published tables")


def _human(v: float) -> str:
    """A count with an SI suffix and three significant digits (``86.6 M``)."""
    for div, unit in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if v >= div:
            return f"{v / div:.3g} {unit}"
    return f"{v:.3g}"


def _family(run: dict[str, Any]) -> str:
    """The run's model family (else its name): the models a size line joins."""
    model = run.get("model") or {}
    return str((model.get("spec") or {}).get("family") or model.get("name"))


def size_section(results: list[dict[str, Any]]) -> Section | None:
    """Accuracy against parameters (and FLOPs where recorded), log x axes; two or more models."""
    rows = [(r, scorecard_row(r)) for r in results if (r.get("model") or {}).get("params")]
    if len(rows) < 2:
        return None
    axes_for = [("params", "parameters")] + ([("flops", "FLOPs per image")]
                                             if all((r.get("model") or {}).get("flops") for r, _ in rows) else [])
    fig, axes = plt.subplots(1, len(axes_for), figsize=(5.2 * len(axes_for) + 1.6, 3.4), squeeze=False)
    for ax, (field, label) in zip(axes[0], axes_for):
        for i, (col, name) in enumerate(SIZE_SERIES):
            by_family: dict[str, list[tuple[float, float]]] = {}
            for r, row in rows:           # points; a line joins the models of one family only
                if row.get(col) is not None:
                    by_family.setdefault(_family(r), []).append((r["model"][field], row[col]))
            for j, pts in enumerate(sorted(p) for p in by_family.values()):
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", color=f"C{i}",
                        label=name if j == 0 else None, linestyle="-" if len(pts) > 1 else "none")
        at: dict[float, list[tuple[str, float]]] = {}
        for r, row in rows:
            top = max((row[c] for c, _ in SIZE_SERIES if row.get(c) is not None), default=0.0)
            at.setdefault(float(r["model"][field]), []).append((r["model"]["name"], top))
        for x, named in at.items():               # one label per position: models of one size share it
            ax.annotate("\n".join(n for n, _ in named), (x, max(t for _, t in named)), xytext=(0, 6),
                        textcoords="offset points", fontsize=7, ha="center", va="bottom", color="#444")
        xs = sorted(at)
        ax.set_xscale("log"), ax.set_xlim(min(xs) / 1.25, max(xs) * 1.25)
        shown, last = [], 0.0
        for x in xs:                               # labels closer than 15 % would overlap: the first one stands
            shown.append(_human(x) if not last or x / last > 1.15 else "")
            last = x if shown[-1] else last
        ax.set_xticks(xs, shown, fontsize=8)
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel(f"{label} (log scale)"), ax.set_ylabel("top-1 accuracy"), ax.set_ylim(0, 1.15)
        ax.grid(alpha=0.3, which="both")
    place_legend(axes[0][-1], outside=True, frameon=False, handles=axes[0][0].get_legend_handles_labels()[0],
                 labels=axes[0][0].get_legend_handles_labels()[1])
    fig.suptitle("Robustness against model size", fontsize=10)
    fig.tight_layout()
    md = ("Accuracy against the number of parameters" + (" and FLOPs per image" if len(axes_for) > 1 else "")
          + ", one point per model (Bhojanapalli et al. 2021, Figs. 4–5), lines joining the models of one family "
          "only; PGD and AutoAttack at each model's strongest L∞ budget.")
    caption = "Clean, corruption and adversarial accuracy against model size, log x axis"
    return Section("Robustness against model size", md, [Figure("robustness_vs_size", fig, caption)], group="clean")

