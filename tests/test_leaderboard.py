"""``robustvit leaderboard``: rows per model × data × threat model from hand-made results.json files, the SQLite
database (runs added at different times in one table, idempotent re-adds), formats and sorting."""

import csv
import io
import json
import sqlite3
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "report"))
from fixtures import eval_result, write_run  # noqa: E402

from robustvit.cli import main  # noqa: E402
from robustvit.errors import RobustvitError  # noqa: E402
from robustvit.leaderboard import format_rows, leaderboard  # noqa: E402


@pytest.fixture
def runs(tmp_path):
    a = write_run(tmp_path / "a", eval_result("vit_s", 0.8, {1 / 255: 0.6, 4 / 255: 0.3}, aa=0.25, corr=0.55,
                                              comparable=False))
    b = write_run(tmp_path / "b", eval_result("resnet", 0.9, {4 / 255: 0.1}, aa=0.05, schema=2))
    return a, b


def test_rows_per_model_and_threat_model(runs):
    rows = leaderboard(list(runs))
    got = {(r["model"], round(r["eps"] * 255)): r for r in rows}
    assert set(got) == {("vit_s", 1), ("vit_s", 4), ("resnet", 4)}
    assert got[("vit_s", 4)]["pgd"] == 0.3 and got[("vit_s", 4)]["autoattack"] == 0.25
    assert got[("vit_s", 1)]["pgd"] == 0.6 and got[("vit_s", 1)]["autoattack"] is None
    assert got[("vit_s", 1)]["clean"] == got[("vit_s", 4)]["clean"] == 0.8         # repeated on each row
    assert got[("vit_s", 4)]["corruption_mean"] == 0.55 and got[("vit_s", 4)]["mce"] == 55.5
    assert got[("resnet", 4)]["corruption_mean"] is None and got[("resnet", 4)]["threat_model"] == "Linf"
    assert "subset" not in got[("resnet", 4)]["labels"] and got[("vit_s", 4)]["labels"].startswith("subset 100/10000")
    assert got[("vit_s", 4)]["comparable"] is False


def test_csv_has_model_and_clean_columns(runs, tmp_path):
    out = tmp_path / "board.csv"
    assert main(["leaderboard", *map(str, runs), "--format", "csv", "--out", str(out)]) == 0
    table = list(csv.DictReader(io.StringIO(out.read_text())))
    header = list(table[0])
    assert header[0] == "model" and any(h.startswith("clean") for h in header) and "labels" in header
    assert sorted(float(r["clean"]) for r in table) == [0.8, 0.8, 0.9]
    assert {r["model"] for r in table} == {"vit_s", "resnet"}


def test_sort_best_first_and_lower_is_better(runs):
    rows = leaderboard(list(runs), sort="autoattack")
    assert [r["autoattack"] for r in rows] == [0.25, 0.05, None]
    rows = leaderboard(list(runs), sort="PGD")            # by header text too
    assert [r["pgd"] for r in rows] == [0.6, 0.3, 0.1]
    extra = eval_result("c", 0.7, {}, corr=0.5)
    extra["suites"]["corruptions"]["mce"] = 40.0
    rows = leaderboard([*runs, write_run(runs[0].parent / "c", extra)], sort="mce")
    assert [r["mce"] for r in rows][:3] == [40.0, 55.5, 55.5]
    with pytest.raises(RobustvitError, match="not a column"):
        leaderboard(list(runs), sort="speed")


def test_db_collects_runs_over_time_and_readds_idempotently(runs, tmp_path):
    db = tmp_path / "board.sqlite"
    first = leaderboard([runs[0]], db=db)
    assert {r["model"] for r in first} == {"vit_s"}
    later = leaderboard([runs[1]], db=db)                 # months later: the table holds both
    assert {r["model"] for r in later} == {"vit_s", "resnet"}
    again = leaderboard(list(runs), db=db)                # re-adding changes nothing
    assert again == later
    assert sqlite3.connect(db).execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 2
    assert leaderboard([], db=db) == later                # reading alone
    # a re-run of the same model (same weights and data) replaces its row
    write_run(runs[1], eval_result("resnet", 0.95, {4 / 255: 0.2}, aa=0.1, schema=2, finished="2026-06-01T00:00:00"))
    newest = {r["model"]: r for r in leaderboard([runs[1]], db=db)}
    assert newest["resnet"]["clean"] == 0.95 and newest["resnet"]["autoattack"] == 0.1
    assert sqlite3.connect(db).execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 2


def test_json_entries_per_threat_model_and_one_for_corruptions(runs):
    entries = json.loads(format_rows(leaderboard(list(runs)), "json"))
    vit = next(e for e in entries if e["name"] == "vit_s" and e.get("eps") == "4/255")
    assert vit["clean_acc"] == "80.00" and vit["autoattack_acc"] == "25.00" and "corruptions_acc" not in vit
    assert vit["dataset"] == "cifar10" and vit["threat_model"] == "Linf" and vit["clean_acc_n"] == 100
    assert vit["clean_acc_ci95"] == [71.12, 86.66]                          # Wilson, 80 of 100
    corr = [e for e in entries if e["threat_model"] == "corruptions"]
    assert [(e["name"], e["corruptions_acc"]) for e in corr] == [("vit_s", "55.00")]   # once, not per Linf entry
    assert corr[0]["comparable"] is False and any("subset" in d for d in corr[0]["labels"])


@pytest.mark.parametrize("fmt, marker", [("md", "| model |"), ("latex", "\\toprule"), ("html", "<table id='leaderboard'>")])
def test_text_formats(runs, fmt, marker):
    text = format_rows(leaderboard(list(runs)), fmt)
    assert marker in text
    assert ("vit\\_s" if fmt == "latex" else "vit_s") in text
    if fmt == "md":
        assert "| vit_s | cifar10:test | Linf | 4/255 | 80.0 [71.1, 86.7] (n=100) |" in text


def test_robustbench_format_needs_a_folder(runs, capsys):
    assert main(["leaderboard", str(runs[1]), "--format", "robustbench"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--out DIR" in err


def test_cli_errors_are_one_line(tmp_path, capsys):
    assert main(["leaderboard", str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds no results.json" in err
    assert main(["leaderboard"]) == 2
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "results.json").write_text("{")
    assert main(["leaderboard", str(tmp_path / "bad")]) == 2
    assert "not valid JSON" in capsys.readouterr().err


def test_a_file_that_is_not_a_leaderboard_database_is_refused_in_one_line(runs, tmp_path):
    text = tmp_path / "notes.sqlite"
    text.write_text("not a database at all, " * 100)
    other = tmp_path / "other.sqlite"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE runs (name TEXT)")         # a table of that name, another schema
    con.commit()
    con.close()
    for db in (text, other):
        with pytest.raises(RobustvitError, match="is not a leaderboard database"):
            leaderboard([runs[0]], db=db)
    made = leaderboard([runs[0]], db=tmp_path / "new" / "folder" / "board.sqlite")   # the folder is made
    assert {r["model"] for r in made} == {"vit_s"}
