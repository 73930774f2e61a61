"""SIGKILL at seeded write points of ``eval``, ``analyze``, ``train``, ``corrupt`` and ``leaderboard --db``: the re-run of the same
command (``--resume`` for train) ends with what an uninterrupted run writes — results, weights, images — and no
half-written file is read as complete; two processes on one output folder (issue 25).

Each kill point is a write (a file opened for writing, a torn ``write``, a rename, ``torch.save``, a safetensors
file, a SQLite statement), drawn from a seed; ``benchmarks/faults.py`` runs the longer soak."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest

import scenarios as S

#: Seeded kill points per command here (the soak, benchmarks/faults.py, draws over a hundred).
KILLS = {"eval": 2, "analyze": 1, "train": 2, "corrupt": 1, "corrupt_cifar": 1, "leaderboard": 1}


@pytest.mark.parametrize("name", list(KILLS))
def test_sigkill_at_seeded_write_points_then_rerun_matches(name, ck, refs, tmp_path):
    sc = refs.scen[name]
    ref, n = refs[name]
    assert n > 5 and ref, f"{name}: too few write points ({n}) to interrupt"
    rng = random.Random(f"kill-{name}")
    for at in sorted(rng.sample(range(1, n + 1), KILLS[name])):
        o = S.interrupted(sc, tmp_path / f"k{at}", "kill", at, at, ref)
        assert o.faulted and o.rc == -9, f"{name}: no kill at write point {at} of {n}"
        results = [m for m in o.mismatch if not m.startswith(S.LOGS)]
        assert o.rerun_rc == 0 and not results, f"{name} killed at write {at}/{n}: {o.mismatch[:3]}"


def test_kill_points_cover_the_whole_run(ck, refs, tmp_path):
    """A kill at the very first and the very last write point (before results.json is renamed into place)."""
    sc = S.standard(ck)["eval"]
    ref, n = refs["eval"]
    for at in (1, n):
        o = S.interrupted(sc, tmp_path / f"k{at}", "kill", at, 1, ref)
        assert o.faulted and o.rerun_rc == 0 and not o.mismatch, (at, o.mismatch[:3])


def test_killed_results_file_is_never_read_as_complete(ck, refs, tmp_path):
    """Kill at the last write points (around results.json): either no results.json, or the complete one."""
    sc = S.standard(ck)["eval"]
    ref, n = refs["eval"]
    for at in (n - 1, n):
        out = tmp_path / f"o{at}"
        proc = S.run("kill", at, 0, sc.argv(out))
        assert proc.returncode == -9
        p = out / "results.json"
        if p.exists():                        # present means complete: parsed whole, equal to the reference
            assert S._clean(json.loads(p.read_text())) == ref["results.json"]


def test_two_processes_on_one_output_folder(ck, refs, tmp_path):
    """Two identical ``eval`` commands started together on one --out: each completes or refuses in one line, and
    the folder ends with the reference results."""
    sc = S.standard(ck)["eval"]
    argv = sc.argv(tmp_path / "o")
    cmd = [sys.executable, str(S.KIT), "count", "0", "0", "--", *argv]
    procs = [subprocess.Popen(cmd, env=S.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [(p.wait(timeout=600), p.communicate()[1]) for p in procs]
    for rc, err in outs:
        lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith(("FAULTKIT", "robustvit: warning"))]
        assert rc == 0 or (rc == 2 and len(lines) == 1), (rc, err[-2000:])
    assert any(rc == 0 for rc, _ in outs)
    assert not S.diff(refs["eval"][0], S.snapshot(tmp_path / "o"))


def test_train_killed_inside_a_checkpoint_resumes_identically(ck, refs, tmp_path):
    sc = S.standard(ck)["train"]
    ref, _ = refs["train"]
    points = [i for i, kind, what in S.trace(sc, tmp_path / "trace")
              if "last.tmp/" in what and what.endswith("model.safetensors")]
    assert len(points) >= 2
    o = S.interrupted(sc, tmp_path / "k", "kill", points[1] + 1, 0, ref)   # epoch 2's weights written, its state not
    assert o.faulted and o.rerun_rc == 0
    assert not [m for m in o.mismatch if not m.startswith(S.LOGS)], o.mismatch[:2]


def test_train_killed_before_its_log_line_keeps_the_log(ck, refs, tmp_path):
    sc = S.standard(ck)["train"]
    ref, _ = refs["train"]
    opens = [i for i, kind, what in S.trace(sc, tmp_path / "trace") if kind == "open" and what.endswith("metrics.jsonl")]
    o = S.interrupted(sc, tmp_path / "k", "kill", opens[0], 0, ref)      # epoch 1 checkpointed, its line not written
    assert o.faulted and o.rerun_rc == 0 and not o.mismatch, o.mismatch[:2]


def test_leaderboard_db_killed_mid_add_holds_the_old_rows_or_all_new(ck, refs, tmp_path):
    """A database that already holds a run, then a ``leaderboard --db`` adding two runs killed at each of its
    database writes: the database reads as before the command or with both runs, never with one."""
    sc = refs.scen["leaderboard"]
    refs["leaderboard"]
    before = S.run("count", 0, 0, ["leaderboard", str(refs.root / "eval"), "--db", str(tmp_path / "seed.sqlite")])
    assert before.returncode == 0, before.stderr[-2000:]
    old, new = S.leaderboard_rows(tmp_path / "seed.sqlite"), refs["leaderboard"][0]["board.sqlite"]
    assert len(old) == 1 and len(new) == 2
    sql = [i for i, kind, what in S.trace(sc, tmp_path / "trace") if kind == "sqlite"]
    assert sql, "no database writes traced"
    for at in sql[1:3]:                # each INSERT of the transaction (the CREATE before it writes nothing new)
        out = tmp_path / f"k{at}"
        out.mkdir()
        (out / "board.sqlite").write_bytes((tmp_path / "seed.sqlite").read_bytes())
        proc = S.run("kill", at, 0, sc.argv(out))
        assert proc.returncode == -9, (at, proc.stderr[-500:])
        assert S.leaderboard_rows(out / "board.sqlite") in (old, new), f"kill at write {at}: a partial database"
