"""``robustvit leaderboard``: one table of many runs — one row per model × data × threat model.

Columns are the headline numbers of ``robustvit.report.headline`` (clean, corruption mean / mCE, PGD,
AutoAttack, occlusion, shape bias, spatial, ImageNet-R/-A/-Sketch/-V2, mFR) with the comparability labels.
``--db FILE`` keeps runs in an SQLite database, so runs made months apart sit in one table (re-adding a run
replaces its row). ``--format json`` writes RobustBench-style model-info entries (Croce et al. 2021,
arXiv:2010.09670: ``clean_acc``, ``autoattack_acc``, ``corruptions_acc`` as percentages, ``dataset``,
``threat_model``, ``eps``).

Example::

    robustvit leaderboard runs/vit runs/resnet --db board.sqlite --format md --sort autoattack
"""

from __future__ import annotations

import csv
import hashlib
import html
import io
import json
import sqlite3
import time
from pathlib import Path
from typing import Any, NoReturn

from robustvit.errors import RobustvitError
from robustvit.report.headline import COLUMNS, eps_text, rows as headline_rows
from robustvit.report.load import load_runs, merge_by_model, model_name
from robustvit.runs.atomic import write_text

FORMATS = ("md", "csv", "latex", "html", "json")
#: Every column of a row, in table order.
TABLE_COLUMNS = ("model", "data", "threat_model", "eps", *COLUMNS, "params", "labels")
HEADERS = {"model": "model", "data": "data", "threat_model": "threat model", "eps": "ε", "params": "params",
           "labels": "labels", **{k: h for k, (h, _) in COLUMNS.items()}}
PERCENT_COLUMNS = ("mce", "mfr")    # already in %


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


def _connect(db: str | Path) -> sqlite3.Connection:
    Path(db).parent.mkdir(parents=True, exist_ok=True)      # as --out: the folder is made
    try:
        con = sqlite3.connect(str(db))
        con.execute("CREATE TABLE IF NOT EXISTS runs (id TEXT PRIMARY KEY, model TEXT, data TEXT, kind TEXT, "
                    "finished TEXT, added TEXT, source TEXT, payload TEXT)")
    except sqlite3.DatabaseError as e:
        _db_error(db, e)
    return con


def add_runs(db: str | Path, runs: list[dict[str, Any]]) -> int:
    """Add (or replace) runs in the SQLite database ``db``; returns how many were written."""
    con = _connect(db)
    try:
        with con:                                   # one transaction: all of the runs or none
            for run in runs:
                payload = {k: v for k, v in run.items() if k not in ("analyses", "train")}   # numbers, not figures
                con.execute("INSERT OR REPLACE INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                            (run_id(run), model_name(run), (run.get("data") or {}).get("spec"),
                             run.get("kind", "eval"), (run.get("run") or {}).get("finished"),
                             time.strftime("%Y-%m-%dT%H:%M:%S%z"), run.get("_dir"), json.dumps(payload, default=str)))
    except sqlite3.DatabaseError as e:
        _db_error(db, e)
    finally:
        con.close()
    return len(runs)


def read_runs(db: str | Path) -> list[dict[str, Any]]:
    """Every run stored in the database, newest first."""
    if not Path(db).is_file():
        raise RobustvitError(f"{db} does not exist; add runs first: robustvit leaderboard RUN_DIR --db {db}")
    con = _connect(db)
    try:
        found = [json.loads(p) for (p,) in con.execute("SELECT payload FROM runs ORDER BY finished DESC, added DESC")]
    except sqlite3.DatabaseError as e:
        _db_error(db, e)
    finally:
        con.close()
    return found


def table_rows(runs: list[dict[str, Any]], sort: str | None = None) -> list[dict[str, Any]]:
    """The leaderboard rows of eval runs (the runs of one model on one data set merged; newer runs first win)."""
    evals = [r for r in runs if r.get("suites")]
    evals.sort(key=lambda r: str((r.get("run") or {}).get("finished") or ""), reverse=True)
    out = [row for entry in merge_by_model(evals, by_data=True) for row in headline_rows(entry)]
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


def _cell(key: str, v: Any) -> str:
    if v is None:
        return "–"
    if key == "eps":
        return eps_text(v)
    if key == "params":
        return f"{v / 1e6:.2f} M"
    if isinstance(v, float):
        return f"{v:.1f}" if key in PERCENT_COLUMNS else f"{100 * v:.1f}"
    return str(v)


def _columns(rows: list[dict[str, Any]]) -> list[str]:
    """Identity columns and the labels always; a number column only when some row has it."""
    keep = ("model", "data", "threat_model", "labels")
    return [c for c in TABLE_COLUMNS if c in keep or any(r.get(c) is not None for r in rows)]


def _header(c: str) -> str:
    h = HEADERS[c]
    return h if c in PERCENT_COLUMNS or c not in COLUMNS else f"{h} (%)"


def robustbench_entries(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """RobustBench model-info entries (its ``model_info/*.json`` fields; accuracies as percentage strings)."""
    pct = lambda v: None if v is None else f"{100 * v:.2f}"  # noqa: E731
    out = []
    for r in rows:
        data = str(r.get("data") or "")
        out.append({"name": r["model"], "link": None, "authors": None, "additional_data": None,
                    "number_forward_passes": 1, "dataset": data.split(":", 1)[0] or None, "data": data,
                    "venue": None, "architecture": r["model"], "threat_model": r["threat_model"],
                    "eps": None if r["eps"] is None else eps_text(r["eps"]), "clean_acc": pct(r.get("clean")),
                    "reported": None, "autoattack_acc": pct(r.get("autoattack")), "pgd_acc": pct(r.get("pgd")),
                    "corruptions_acc": pct(r.get("corruption_mean")), "footnote": r.get("labels"),
                    "comparable": r.get("comparable"), "params": r.get("params")})
    return out


def format_rows(rows: list[dict[str, Any]], fmt: str = "md") -> str:
    """The rows as Markdown, CSV (raw fractions), LaTeX (booktabs), an HTML table or RobustBench JSON."""
    if fmt not in FORMATS:
        raise RobustvitError(f"unknown --format {fmt!r}; use one of {', '.join(FORMATS)}")
    if fmt == "json":
        return json.dumps(robustbench_entries(rows), indent=2) + "\n"
    cols = _columns(rows)
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(cols)
        w.writerows([["" if r.get(c) is None else r.get(c) for c in cols] for r in rows])
        return buf.getvalue()
    cells = [[_cell(c, r.get(c)) for c in cols] for r in rows]
    heads = [_header(c) for c in cols]
    if fmt == "md":
        esc = lambda s: s.replace("|", "\\|")  # noqa: E731
        lines = ["| " + " | ".join(heads) + " |", "|" + "|".join("---" for _ in cols) + "|"]
        return "\n".join(lines + ["| " + " | ".join(esc(v) for v in row) + " |" for row in cells]) + "\n"
    if fmt == "latex":
        tex = lambda s: s.replace("\\", "\\textbackslash{}").replace("_", "\\_").replace("%", "\\%").replace("&", "\\&").replace("ε", "$\\epsilon$").replace("–", "--")  # noqa: E731
        lines = ["\\begin{tabular}{" + "l" * 4 + "r" * (len(cols) - 5) + "l}", "\\toprule",
                 " & ".join(tex(h) for h in heads) + " \\\\", "\\midrule"]
        lines += [" & ".join(tex(v) for v in row) + " \\\\" for row in cells]
        return "\n".join(lines + ["\\bottomrule", "\\end{tabular}"]) + "\n"
    head = "".join(f"<th>{html.escape(h)}</th>" for h in heads)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in row) + "</tr>" for row in cells)
    return f"<table id='leaderboard'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>\n"


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
    if out is not None:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        write_text(out, format_rows(rows, fmt))          # atomic: a killed run leaves the old table or none
    return rows


__all__ = ["FORMATS", "add_runs", "format_rows", "leaderboard", "read_runs", "robustbench_entries", "table_rows"]
