"""What a table of headline rows (:mod:`robustvit.report.headline`) says in words: the best value of each column,
the comparison its 95 % intervals support, AutoAttack against PGD on the same images, and models near chance.

Two numbers differ significantly when their 95 % Wilson score intervals do not overlap (conservative: overlapping
intervals can hide a real difference). Numbers are compared within one data set (attacks: one threat model and ε);
numbers measured on different images are compared with that caveat.

>>> rows = [{"model": "a", "data": "d", "threat_model": "none", "eps": None, "clean": 0.9, "clean_n": 500,
...          "clean_ci95": [0.87, 0.92]},
...         {"model": "b", "data": "d", "threat_model": "none", "eps": None, "clean": 0.6, "clean_n": 500,
...          "clean_ci95": [0.56, 0.64]}]
>>> compare(rows)
['**a** is more accurate than **b** on clean images by 30.0 points (95 % intervals do not overlap).']
>>> best_cells(rows, ["clean"])
{(0, 'clean')}
"""

from __future__ import annotations

from typing import Any

from robustvit.report.headline import ATTACK_COLUMNS, COLUMNS, NO_INTERVAL, PERCENT_COLUMNS, eps_text

#: The marker of a column's best value (text, so it survives without CSS and in Markdown, CSV readers, LaTeX).
BEST = "▲"
#: How a comparison on a column reads ("{a} is … than {b}"); other columns: "more robust … under <header>".
PHRASES = {"clean": "more accurate than {b} on clean images", "corruption_mean": "more robust than {b} under common "
           "corruptions (mean accuracy)", "occlusion": "more robust than {b} under patch occlusion (mean)",
           "spatial": "more robust than {b} under the spatial attack"}


#: The columns compared, the strongest attack first and clean last (the first sentence is the verdict).
ORDER = (*ATTACK_COLUMNS[::-1], *(c for c in COLUMNS if c not in (*ATTACK_COLUMNS, "clean", *NO_INTERVAL)), "clean")


def _group(row: dict[str, Any], col: str) -> tuple[Any, ...]:
    """Rows whose ``col`` values may be compared: one data set; for attacks one threat model and ε."""
    return (row.get("data"), row.get("threat_model"), row.get("eps")) if col in ATTACK_COLUMNS else (row.get("data"),)


def _groups(rows: list[dict[str, Any]], col: str, per_model: bool = False) -> list[list[int]]:
    """Indices of the rows whose ``col`` may be compared, in groups of two or more; with ``per_model`` one row
    per model (a leaderboard repeats a model's clean and shift columns on each of its threat models)."""
    out: dict[tuple[Any, ...], list[int]] = {}
    for i, r in enumerate(rows):
        if isinstance(r.get(col), (int, float)):
            g = out.setdefault(_group(r, col), [])
            if not (per_model and any(rows[j].get("model") == r.get("model") for j in g)):
                g.append(i)
    return [g for g in out.values() if len(g) > 1]


def best_cells(rows: list[dict[str, Any]], cols: list[str]) -> set[tuple[int, str]]:
    """``(row index, column)`` of the best value of each column among comparable rows (two or more; ties all
    marked); lower is better for mCE and mFR."""
    out = set()
    for c in (c for c in cols if c in COLUMNS):
        for g in _groups(rows, c):
            vals = [rows[i][c] for i in g]
            top = min(vals) if COLUMNS[c][1] else max(vals)
            if len(set(vals)) > 1:
                out |= {(i, c) for i in g if rows[i][c] == top}
    return out


def _what(col: str, row: dict[str, Any]) -> str:
    """How a comparison on ``col`` reads, with ``{b}`` for the other model."""
    if col in PHRASES:
        return PHRASES[col]
    eps = f" ε={eps_text(row['eps'], str(row.get('threat_model')))}" if col in ATTACK_COLUMNS and row.get("eps") else ""
    return f"more robust than {{b}} under {COLUMNS[col][0]}{eps}"


def _same_images(a: dict[str, Any], b: dict[str, Any], ca: str, cb: str) -> bool:
    """Whether cell ``ca`` of row ``a`` and ``cb`` of ``b`` were measured on the same images (their
    ``<column>_images`` digests; the counts where a row has none)."""
    ia, ib = a.get(f"{ca}_images"), b.get(f"{cb}_images")
    return ia == ib if ia is not None and ib is not None else a.get(f"{ca}_n") == b.get(f"{cb}_n")


def _different_images(a: dict[str, Any], b: dict[str, Any], col: str) -> str:
    """The caveat of comparing ``col`` of two rows measured on different images; empty when on the same."""
    if _same_images(a, b, col, col):
        return ""
    return f", measured on different images (n={a.get(f'{col}_n')} vs n={b.get(f'{col}_n')})"


def compare(rows: list[dict[str, Any]]) -> list[str]:
    """One sentence per column (with an interval, in ``ORDER``) that two or more rows share: the best against the
    next best, by how many points, and whether their 95 % intervals overlap ("not significant")."""
    out = []
    for c in ORDER:
        for g in _groups(rows, c, per_model=True):
            a, b = sorted((rows[i] for i in g), key=lambda r: -r[c])[:2]
            diff, caveat = 100 * (a[c] - b[c]), _different_images(a, b, c)
            what = _what(c, a).format(b=f"**{b['model']}**" + (f" (the next best of {len(g)})" if len(g) > 2 else ""))
            if diff == 0:
                out.append(f"**{a['model']}** and **{b['model']}** tie on {COLUMNS[c][0]} ({100 * a[c]:.1f} %{caveat}).")
                continue
            ca, cb = a.get(f"{c}_ci95"), b.get(f"{c}_ci95")
            sig = ("no interval to judge significance" if not ca or not cb
                   else "95 % intervals do not overlap" if ca[0] > cb[1]
                   else "not significant: the 95 % intervals overlap")
            out.append(f"**{a['model']}** is {what} by {diff:.1f} points ({sig}{caveat}).")
    return out


def attacks_compared(row: dict[str, Any]) -> str | None:
    """AutoAttack against PGD of one row, only on the same number of images (else says so)."""
    aa, pgd = row.get("autoattack"), row.get("pgd")
    if aa is None or pgd is None:
        return None
    na, np_ = row.get("autoattack_n"), row.get("pgd_n")
    if na is None or np_ is None:
        return (f"{row['model']}: AutoAttack and PGD do not record their images; their robust accuracies are not "
                "compared.")
    if not _same_images(row, row, "autoattack", "pgd"):
        return (f"{row['model']}: AutoAttack (n={na}) and PGD (n={np_}) ran on different images; their robust "
                "accuracies are not compared.")
    d = 100 * (pgd - aa)
    how = (f"{d:.1f} points below PGD" if d > 0 else "equal to PGD" if d == 0
           else f"{-d:.1f} points above PGD, which a stronger attack should not be: check both runs")
    return f"{row['model']}: AutoAttack is {how} on the same {na} images."


def near_chance(rows: list[dict[str, Any]]) -> list[str]:
    """One warning naming each model whose clean or robust accuracy has chance (1 / classes) inside its 95 %
    interval, and those columns; none when no model is near chance."""
    found: dict[str, tuple[int, list[str]]] = {}
    for r in rows:
        k = r.get("num_classes")
        if not k or r.get("model") in found:
            continue
        cols = [COLUMNS[c][0] for c in COLUMNS if c not in NO_INTERVAL and r.get(f"{c}_ci95")
                and r[f"{c}_ci95"][0] <= 1 / k <= r[f"{c}_ci95"][1]]
        if cols:
            found[str(r.get("model"))] = (int(k), cols)
    if not found:
        return []
    ks = {k for k, _ in found.values()}
    chance = f" (1/{next(iter(ks))} = {100 / next(iter(ks)):.1f} %)" if len(ks) == 1 else ""
    return [f"**Warning: near chance**{chance}, within the 95 % interval of: "
            + "; ".join(f"**{m}** on {', '.join(cols)}" + ("" if chance else f" (1/{k})")
                        for m, (k, cols) in found.items())
            + "."]


def cell_text(row: dict[str, Any], col: str, best: bool = False) -> str | None:
    """A number as the tables show it: ``**41.2** ▲ (−38.1) [35.0, 47.6] (n=200)`` — accuracy in %, bold with
    ``BEST`` when best of its column, the gap to clean in points (``<col>_gap``), the 95 % interval, the images."""
    v = row.get(col)
    if v is None:
        return None
    text = f"{v:.1f}" if col in PERCENT_COLUMNS else f"{100 * v:.1f}"
    if best:
        text = f"**{text}** {BEST}"
    gap = row.get(f"{col}_gap")
    if gap is not None:
        text += f" ({100 * gap:+.1f})".replace("-", "−")
    ci, n = row.get(f"{col}_ci95"), row.get(f"{col}_n")
    if ci:
        text += f" [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"
    return text + (f" (n={n})" if n else "")


def summary(rows: list[dict[str, Any]]) -> list[str]:
    """The lines above a table: the comparisons, AutoAttack against PGD per row, and the near-chance warnings."""
    return compare(rows) + [s for r in rows if (s := attacks_compared(r))] + near_chance(rows)


__all__ = ["BEST", "attacks_compared", "best_cells", "cell_text", "compare", "near_chance", "summary"]
