"""``robustvit leaderboard``: one table of many runs — one row per model × data × threat model.

Columns are the headline numbers of ``robustvit.report.headline`` (clean, corruption mean / mCE, PGD, AutoAttack,
occlusion, shape bias, spatial, ImageNet-R/-A/-Sketch/-V2, mFR) with the comparability labels: the deviations of
each cell from its published protocol (:mod:`robustvit.protocols`). A folder without ``results.json`` stands for
every run below it; ``--db FILE`` keeps runs in an SQLite database (re-adding a run replaces its row). Every number
shows its image count and 95 % Wilson interval, a robustness number its gap to clean (``<column>_gap``), the best
of each column its mark (:mod:`robustvit.report.verdict`, whose sentences open the Markdown and HTML tables).
``--format json`` writes robustvit's own entries (RobustBench's field names; one ``corruptions`` and one
``corruptions_3d`` (ImageNet-3DCC) entry per model); ``--format robustbench --out DIR`` writes
``DIR/<dataset>/<threat_model>/<model>.json`` as RobustBench's ``model_info`` files (Croce et al. 2021,
arXiv:2010.09670) for the comparable numbers only (``corruptions_*_3d`` go into the model's ``corruptions/`` file,
as RobustBench's ``update_json``). Numbers a model's source publishes (results.json ``model.reported``:
RobustBench's zoo) show as ``reported_clean`` and ``reported_autoattack`` beside robustvit's measurements.

Example::

    robustvit leaderboard runs/vit runs/resnet --db board.sqlite --format md --sort autoattack
"""

from __future__ import annotations

import csv
import hashlib
import html
import io
import json
import re
import sqlite3
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

from robustvit.errors import RobustvitError
from robustvit.protocols import dataset_of
from robustvit.report.headline import COLUMNS, GAP_COLUMNS, PERCENT_COLUMNS, eps_text, rows as headline_rows
from robustvit.report.load import load_runs, merge_by_model, model_name
from robustvit.report.scorecard import REPORTED, reported_cells
from robustvit.report.verdict import BEST, best_cells, cell_text, summary
from robustvit.runs.atomic import write_text

FORMATS = ("md", "csv", "latex", "html", "json", "robustbench")
#: What a cell shows, under every table.
NOTE = (f"Cells: accuracy in % (bold and {BEST}: the best of its column among rows of one data set and threat "
        "model) (gap to the clean accuracy of the same images, in points) [95 % Wilson score interval] (n = images "
        "measured); mCE and mFR in %, lower is better. Labels name each cell's deviations from its published "
        "protocol (robustvit.protocols).")
#: Every column of a row, in table order.
TABLE_COLUMNS = ("model", "data", "threat_model", "eps", *COLUMNS, *REPORTED, "params", "labels")
HEADERS = {"model": "model", "data": "data", "threat_model": "threat model", "eps": "ε", "params": "params",
           "labels": "labels", **{k: h for k, (h, _) in COLUMNS.items()}, **{k: f"{h} (%)" for k, (_, h) in REPORTED.items()}}


def run_id(run: dict[str, Any]) -> str:
    """A run's identity in the database: kind, model (name and weights), data and subset, seed and suites' keys."""
    model = run.get("model") or {}
    weights = model.get("weights") or {}
    ident = {"kind": run.get("kind", "eval"), "model": model.get("name"), "weights": weights.get("sha256") or weights.get("source"),
             "data": (run.get("data") or {}).get("spec"), "subset": (run.get("data") or {}).get("subset"),
             "seed": (run.get("run") or {}).get("seed")}
    return hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()[:20]


#: SQLite's words for a fault of the machine (disk, permissions, another process), not of the file's content
MACHINE_FAULTS = ("full", "disk i/o", "locked", "readonly", "read-only")


def _db_error(db: str | Path, e: sqlite3.DatabaseError) -> NoReturn:
    """Raise the one-line error for a database robustvit cannot use. A full disk, an I/O error or a lock is the
    machine's fault, not the file's: re-raised as is (``robustvit.cli`` names it and what to free)."""
    text = str(e).lower()
    if "unable to open" in text:
        raise RobustvitError(f"cannot open {db} ({e}); check the path and its permissions") from None
    if isinstance(e, sqlite3.OperationalError) and any(t in text for t in MACHINE_FAULTS):
        raise e
    raise RobustvitError(f"{db} is not a leaderboard database ({e}); give a new file to --db") from None


@contextmanager
def _database(db: str | Path) -> Iterator[sqlite3.Connection]:
    """An open connection to ``db`` (its folder and table made when new); SQLite errors as :func:`_db_error`."""
    Path(db).parent.mkdir(parents=True, exist_ok=True)      # as --out: the folder is made
    con = None
    try:
        con = sqlite3.connect(str(db))
        con.execute("CREATE TABLE IF NOT EXISTS runs (id TEXT PRIMARY KEY, model TEXT, data TEXT, kind TEXT, "
                    "finished TEXT, added TEXT, source TEXT, payload TEXT)")
        yield con
    except sqlite3.DatabaseError as e:
        _db_error(db, e)
    finally:
        if con is not None:
            con.close()


def add_runs(db: str | Path, runs: list[dict[str, Any]]) -> int:
    """Add (or replace) runs in the SQLite database ``db``; returns how many were written."""
    with _database(db) as con, con:                 # one transaction: all of the runs or none
        for run in runs:
            payload = {k: v for k, v in run.items() if k not in ("analyses", "train")}   # numbers, not figures
            con.execute("INSERT OR REPLACE INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        (run_id(run), model_name(run), (run.get("data") or {}).get("spec"),
                         run.get("kind", "eval"), (run.get("run") or {}).get("finished"),
                         time.strftime("%Y-%m-%dT%H:%M:%S%z"), run.get("_dir"), json.dumps(payload, default=str)))
    return len(runs)


def read_runs(db: str | Path) -> list[dict[str, Any]]:
    """Every run stored in the database, newest first."""
    if not Path(db).is_file():
        raise RobustvitError(f"{db} does not exist; add runs first: robustvit leaderboard RUN_DIR --db {db}")
    with _database(db) as con:
        return [json.loads(p) for (p,) in con.execute("SELECT payload FROM runs ORDER BY finished DESC, added DESC")]


def table_rows(runs: list[dict[str, Any]], sort: str | None = None) -> list[dict[str, Any]]:
    """The leaderboard rows of eval runs (the runs of one model on one data set merged; newer runs first win)."""
    evals = [r for r in runs if r.get("suites")]
    evals.sort(key=lambda r: str((r.get("run") or {}).get("finished") or ""), reverse=True)
    out = [{**row, **reported_cells(entry, row)} for entry in merge_by_model(evals, by_data=True)
           for row in headline_rows(entry)]
    out.sort(key=lambda r: (str(r["model"]), str(r["data"]), r["threat_model"], -(r["eps"] or 0)))
    return sort_rows(out, sort) if sort else out


def sort_rows(rows: list[dict[str, Any]], column: str) -> list[dict[str, Any]]:
    """Best first: descending, or ascending where lower is better (mCE, mFR); missing values last."""
    key = next((k for k, h in HEADERS.items() if column in (k, h)), None)
    if key is None:
        raise RobustvitError(f"--sort {column!r} is not a column; use one of {', '.join(TABLE_COLUMNS)}")
    lower = COLUMNS.get(key, ("", False))[1]
    num = [r for r in rows if isinstance(r.get(key), (int, float))]
    text = [r for r in rows if isinstance(r.get(key), str)]
    missing = [r for r in rows if r.get(key) is None]
    return (sorted(num, key=lambda r: r[key], reverse=not lower) + sorted(text, key=lambda r: r[key]) + missing)


def _cell(key: str, row: dict[str, Any], best: bool = False) -> str:
    v = row.get(key)
    if v is None:
        return "–"
    if key == "eps":
        return eps_text(v, str(row.get("threat_model") or "Linf"))
    if key == "params":
        return f"{v / 1e6:.2f} M"
    if isinstance(v, float) and key in COLUMNS:
        return cell_text(row, key, best) or "–"
    return str(v)


def _tex(s: str) -> str:
    """A cell as LaTeX: special characters escaped, the best value (``**x** ▲``) in bold."""
    for a, b in (("\\", "\\textbackslash{}"), ("_", "\\_"), ("%", "\\%"), ("&", "\\&"), ("ε", "$\\epsilon$"),
                 ("–", "--"), ("−", "$-$")):
        s = s.replace(a, b)
    return re.sub(r"\*\*(.+?)\*\* " + BEST, r"\\textbf{\1}", s)


def _columns(rows: list[dict[str, Any]]) -> list[str]:
    """Identity columns and the labels always; a number column only when some row has it."""
    keep = ("model", "data", "threat_model", "labels")
    return [c for c in TABLE_COLUMNS if c in keep or any(r.get(c) is not None for r in rows)]


def _header(c: str) -> str:
    h = HEADERS[c]
    return h if c in PERCENT_COLUMNS or c not in COLUMNS else f"{h} (%)"


def _csv_columns(rows: list[dict[str, Any]]) -> list[str]:
    """The table's columns, each number followed by ``<column>_n``, ``<column>_ci95`` and, for robustness
    accuracies, ``<column>_gap`` (the gap to the clean accuracy of the same images, a fraction)."""
    out: list[str] = []
    for c in _columns(rows):
        out += ([c, f"{c}_n", f"{c}_ci95"] + ([f"{c}_gap"] if c in GAP_COLUMNS else [])) if c in COLUMNS else [c]
    return out + ["comparable"]


def _pct(v: float | None) -> str | None:
    return None if v is None else f"{100 * v:.2f}"


def _verdict(entry: dict[str, Any], row: dict[str, Any], columns: tuple[str, ...]) -> None:
    """An entry's ``labels`` and ``comparable``: those of the protocol entries of its own numbers."""
    cells = [row.get(f"{c}_protocol") or {} for c in columns if row.get(c) is not None]
    entry["labels"] = list(dict.fromkeys(d for p in cells for d in p.get("deviations") or []))
    entry["comparable"] = bool(cells) and all(p.get("comparable") for p in cells)


def json_entries(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """robustvit's own JSON: one entry per model × data × threat model (``Linf``/``L2``), and one ``corruptions``
    (ImageNet-C and -like) and one ``corruptions_3d`` (ImageNet-3DCC) entry per model × data with such numbers.
    Accuracies as RobustBench writes them (two-decimal percent strings), each with ``<field>_n``, ``<field>_ci95``
    (percent), ``<field>_protocol`` and, for robustness accuracies, ``<field>_gap`` (to the clean accuracy of the
    same images, in points)."""
    out: list[dict[str, Any]] = []
    done: set[tuple[Any, Any]] = set()

    def put(entry: dict[str, Any], field: str, row: dict[str, Any], col: str) -> None:
        if row.get(col) is None:
            return
        entry[field] = f"{row[col]:.2f}" if col in PERCENT_COLUMNS else _pct(row[col])
        entry[f"{field}_n"] = row.get(f"{col}_n")
        ci = row.get(f"{col}_ci95")
        entry[f"{field}_ci95"] = None if ci is None else [round(100 * ci[0], 2), round(100 * ci[1], 2)]
        entry[f"{field}_protocol"] = row.get(f"{col}_protocol")
        if col in GAP_COLUMNS:
            gap = row.get(f"{col}_gap")
            entry[f"{field}_gap"] = None if gap is None else round(100 * gap, 2)

    for r in rows:
        data = str(r.get("data") or "")
        ident = {"name": r["model"], "architecture": r["model"], "dataset": dataset_of({"data": {"spec": data}}) or
                 data.split(":", 1)[0] or None, "data": data, "params": r.get("params")}
        if r["threat_model"] in ("Linf", "L2"):
            e = {**ident, "threat_model": r["threat_model"], "eps": eps_text(r["eps"], r["threat_model"])}
            for field, col in (("clean_acc", "clean"), ("autoattack_acc", "autoattack"), ("apgd_acc", "apgd"),
                               ("pgd_acc", "pgd")):
                put(e, field, r, col)
            e.update({c: _pct(r[c]) for c in REPORTED if r.get(c) is not None})     # published, not measured
            _verdict(e, r, ("clean", "autoattack", "apgd", "pgd"))
            out.append(e)
        if (r["model"], data) in done:
            continue
        done.add((r["model"], data))
        for threat, suffix, (acc, mce) in (("corruptions", "", ("corruption_mean", "mce")),
                                           ("corruptions_3d", "_3d", ("corruption_mean_3d", "mce_3d"))):
            if r.get(acc) is None and r.get(mce) is None:
                continue
            e = {**ident, "threat_model": threat}
            for field, col in (("clean_acc", "clean"), (f"corruptions_acc{suffix}", acc), (f"corruptions_mce{suffix}", mce)):
                put(e, field, r, col)
            _verdict(e, r, ("clean", acc, mce))
            out.append(e)
    return out


def robustbench_entries(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """RobustBench ``model_info`` entries of the comparable numbers (fields of RobustBench's ``ModelInfo``;
    accuracies as two-decimal percent strings; ``eps`` as RobustBench writes it) and, for each entry left out,
    one line saying why."""
    written, skipped = [], []
    for e in json_entries(rows):
        threat, ds = e["threat_model"], e["dataset"]
        acc = {"Linf": "autoattack_acc", "L2": "autoattack_acc", "corruptions_3d": "corruptions_acc_3d"}.get(
            threat, "corruptions_acc")
        proto = e.get(f"{acc}_protocol") or {}
        why = []
        if e.get(acc) is None:
            why.append(f"no {ACC_WHAT[acc]} number")
        elif str(proto.get("name", "")) != f"robustbench:{ds}:{threat}":
            why.append(f"{proto.get('name') or 'no'} protocol, not RobustBench {ds} {threat}")
        cells = [e.get(f"{f}_protocol") or {} for f in ("clean_acc", acc) if e.get(f) is not None]
        why = list(dict.fromkeys(why + [d for p in cells for d in p.get("deviations") or []]))
        if e.get("clean_acc") is None:
            why.append("no clean accuracy")
        if why:
            skipped.append(f"not written to RobustBench: {e['name']} {e['data']} {threat}: {'; '.join(why)}")
            continue
        entry: dict[str, Any] = {"name": e["name"], "number_forward_passes": 1, "dataset": ds,
                                 "architecture": e["architecture"], "clean_acc": e["clean_acc"]}
        if threat in ("Linf", "L2"):
            entry.update(eps=e["eps"], autoattack_acc=e["autoattack_acc"])
        else:
            mce = acc.replace("_acc", "_mce")
            entry[acc] = e[acc]
            if ds == "imagenet" and e.get(mce) is not None:
                entry[mce] = e[mce]
        written.append({"threat_model": threat, "entry": entry})
    return written, skipped


#: What a RobustBench entry's number is, by its field.
ACC_WHAT = {"autoattack_acc": "AutoAttack", "corruptions_acc": "15 × 5 corruptions",
            "corruptions_acc_3d": "ImageNet-3DCC 12 × 5 corruptions"}


def write_robustbench(rows: list[dict[str, Any]], out: str | Path) -> list[Path]:
    """Write ``out/<dataset>/<threat_model>/<model>.json`` for each comparable entry (RobustBench's
    ``model_info`` layout; ``corruptions_3d`` into the model's ``corruptions/`` file, merged with its
    ``corruptions`` entry as RobustBench's ``update_json``); one line on stderr for each entry left out. Returns the
    files written."""
    written, skipped = robustbench_entries(rows)
    for line in skipped:
        print(f"robustvit: {line}", file=sys.stderr)
    files: dict[Path, dict[str, Any]] = {}
    for w in written:
        e = w["entry"]
        folder = "corruptions" if w["threat_model"] == "corruptions_3d" else w["threat_model"]
        path = Path(out) / e["dataset"] / folder / (re.sub(r"[^A-Za-z0-9_.+-]+", "_", e["name"]) + ".json")
        files[path] = {**files.get(path, {}), **e}
    for path, e in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, json.dumps(e, indent=2) + "\n")
    return list(files)


def format_rows(rows: list[dict[str, Any]], fmt: str = "md") -> str:
    """The rows as Markdown, CSV (raw fractions, with ``_n`` and ``_ci95`` columns), LaTeX (booktabs), an HTML
    table or robustvit's JSON entries (:func:`json_entries`)."""
    if fmt not in FORMATS or fmt == "robustbench":
        raise RobustvitError(f"unknown --format {fmt!r}; use one of {', '.join(f for f in FORMATS if f != 'robustbench')}"
                             + (" (robustbench writes a folder: give --out DIR)" if fmt == "robustbench" else ""))
    if fmt == "json":
        return json.dumps(json_entries(rows), indent=2) + "\n"
    cols = _columns(rows)
    if fmt == "csv":
        ccols = _csv_columns(rows)
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(ccols)
        w.writerows([["" if r.get(c) is None else json.dumps(r[c]) if isinstance(r.get(c), list) else r.get(c)
                      for c in ccols] for r in rows])
        return buf.getvalue()
    best = best_cells(rows, cols)
    cells = [[_cell(c, r, (i, c) in best) for c in cols] for i, r in enumerate(rows)]
    heads = [_header(c) for c in cols]
    said = summary(rows)
    if fmt == "md":
        esc = lambda s: s.replace("|", "\\|")  # noqa: E731
        lines = ["| " + " | ".join(heads) + " |", "|" + "|".join("---" for _ in cols) + "|"]
        body = "\n".join(lines + ["| " + " | ".join(esc(v) for v in row) + " |" for row in cells]) + "\n"
        return "".join(f"{s}\n\n" for s in said) + body + f"\n{NOTE}\n"
    if fmt == "latex":
        lines = ["\\begin{tabular}{" + "l" * 4 + "r" * (len(cols) - 5) + "l}", "\\toprule",
                 " & ".join(_tex(h) for h in heads) + " \\\\", "\\midrule"]
        lines += [" & ".join(_tex(v) for v in row) + " \\\\" for row in cells]
        return "\n".join(lines + ["\\bottomrule", "\\end{tabular}"]) + "\n"
    from robustvit.report.html import inline
    head = "".join(f"<th>{html.escape(h)}</th>" for h in heads)
    body = "".join("<tr>" + "".join(f"<td class='best' title='best of this column'>{inline(v)}</td>" if BEST in v
                                    else f"<td>{inline(v)}</td>" for v in row) + "</tr>" for row in cells)
    top = "".join(f"<p>{inline(s)}</p>\n" for s in said)
    return (f"{top}<table id='leaderboard'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>\n"
            f"<p>{html.escape(NOTE)}</p>\n")


def leaderboard(paths: list[str | Path], db: str | Path | None = None, fmt: str = "md", out: str | Path | None = None,
                sort: str | None = None) -> list[dict[str, Any]]:
    """Rows of the runs in ``paths`` (with ``db``: added to the database first, then every run it holds);
    writes the formatted table to ``out`` when given. Returns the rows."""
    if fmt not in FORMATS:
        raise RobustvitError(f"unknown --format {fmt!r}; use one of {', '.join(FORMATS)}")
    runs = load_runs(list(paths))
    if db is not None:
        if runs:
            add_runs(db, runs)
        runs = read_runs(db)
    elif not runs:
        raise RobustvitError("give at least one run folder (or --db FILE)")
    rows = table_rows(runs, sort)
    if fmt == "robustbench":
        if out is None:
            raise RobustvitError("--format robustbench writes OUT/<dataset>/<threat_model>/<model>.json; give --out DIR")
        write_robustbench(rows, out)
    elif out is not None:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        write_text(out, format_rows(rows, fmt))          # atomic: a killed run leaves the old table or none
    return rows


__all__ = ["FORMATS", "add_runs", "format_rows", "json_entries", "leaderboard", "read_runs", "robustbench_entries",
           "table_rows", "write_robustbench"]
