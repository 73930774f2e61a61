"""The "Training" group: each training run's curves (loss and accuracy per epoch) from its ``train`` payload
(``results.json`` of kind ``train``, or ``metrics.jsonl``), models side by side, and a table of the last epoch."""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt

from robustvit.plotting import integer_ticks, place_legend
from robustvit.report.section import Figure, Section, md_table

GROUP = "training"
CURVES = (("train_loss", "training loss"), ("train_acc", "training accuracy"), ("val_acc", "validation accuracy"))


def training_section(results: list[dict[str, Any]]) -> Section | None:
    trained = [(r["model"]["name"], r.get("train") or {}) for r in results]
    runs = [(n, t["epochs"]) for n, t in trained if t.get("epochs")]
    if not runs:
        return None
    cols = [c for c, _ in CURVES if any(c in row for _, e in runs for row in e)]
    rows = [[n, e[-1].get("epoch", len(e))] + [e[-1].get(c) for c in cols] for n, e in runs]
    md = md_table(["model", "epochs"] + [dict(CURVES)[c] for c in cols], rows)
    cfgs = [(n, t.get("config") or {}) for n, t in trained if t.get("epochs")]   # each run's own config
    described = [f"{n}: {c.get('loss', 'ce')} loss, lr {c.get('lr')}, batch {c.get('batch_size')}, data {c.get('data')}"
                 for n, c in cfgs if c]
    if described:
        md += "\n\n" + "; ".join(described) + "."
    panels = [c for c in ("train_loss", "acc") if c != "acc" or any(k in cols for k in ("train_acc", "val_acc"))]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels) + 1.8, 3.2), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        for i, (n, e) in enumerate(runs):
            ep = [row.get("epoch", j + 1) for j, row in enumerate(e)]
            if panel == "train_loss":
                ax.plot(ep, [row.get("train_loss") for row in e], marker="o", color=f"C{i}", label=n)
            else:
                for c, style in (("train_acc", "--"), ("val_acc", "-")):
                    if any(c in row for row in e):
                        ax.plot(ep, [row.get(c) for row in e], style, marker="o", color=f"C{i}",
                                label=f"{n} · {'validation' if c == 'val_acc' else 'training'}")
        integer_ticks(ax, "x")
        ax.set_xlabel("epoch"), ax.grid(alpha=0.3)
        ax.set_ylabel("loss" if panel == "train_loss" else "accuracy")
        if panel != "train_loss":
            ax.set_ylim(0, 1)
    place_legend(axes[0][-1], outside=True, frameon=False)
    fig.suptitle("Training curves", fontsize=10)
    fig.tight_layout()
    return Section("Training curves", md, [Figure("training", fig, "Training loss and accuracy per epoch, per model")],
                   group=GROUP)
