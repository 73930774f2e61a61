"""Fault-injection soak: SIGKILL and a full disk at seeded write points of robustvit's commands; every re-run must
end with the results of an uninterrupted run (issue 25; the figures in docs/reliability.md).

    python benchmarks/faults.py --kills 120 --enospc 20 --seed 0 --out bench-out/faults

For each command (``eval``, ``analyze``, ``train`` with ``--resume``, ``corrupt`` in both layouts, ``leaderboard
--db`` adding the eval and analyze runs to a database) one uninterrupted
run is the reference and counts its write points (files opened for writing and each write to them, renames,
``torch.save``, safetensors files, SQLite statements). Then, per drawn point N: the command is killed with SIGKILL
at write N (a write there is torn: half its bytes reach the file), or every write from N on fails as on a full
disk; the same command is re-run without faults (``--resume`` for train) and what it wrote — results.json,
analysis JSON, weights (per tensor), exported images and arrays — is compared with the reference. A kill that
lands after the last write (none here: points are drawn within the count) would count as not faulted.

Runs fork from this process (robustvit imported once); ``--subprocess`` starts a new interpreter per run instead.
Writes ``OUT/soak.jsonl`` (one line per point, as it goes; a re-run resumes after the points already there) and
prints the table. Run it at low priority on a shared machine (``nice -n 15``); one torch thread.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("ROBUSTVIT_FROST_DIR", "procedural")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests" / "faults"))

import torch  # noqa: E402

torch.set_num_threads(1)

import robustvit.cli  # noqa: E402,F401  (imported once, before the forks)
import scenarios as S  # noqa: E402

#: Share of the kill points each command gets (train and analyze runs cost the most).
WEIGHTS = {"eval": 3, "analyze": 2, "train": 2, "corrupt": 2, "corrupt_cifar": 1, "leaderboard": 1}


def plan(kills: int, enospc: int, seed: int, counts: dict[str, int]) -> list[tuple[str, str, int]]:
    """(scenario, mode, write point) for every trial, drawn from ``seed`` in proportion to :data:`WEIGHTS`."""
    rng = random.Random(seed)
    names = list(WEIGHTS)
    total = sum(WEIGHTS.values())
    trials = []
    for mode, n in (("kill", kills), ("enospc", enospc)):
        per = {k: max(1, round(n * WEIGHTS[k] / total)) for k in names}
        for k in names:
            trials += [(k, mode, rng.randint(1, counts[k])) for _ in range(per[k])]
    rng.shuffle(trials)
    return trials


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=120, help="SIGKILL points in all (default 120)")
    ap.add_argument("--enospc", type=int, default=20, help="full-disk points in all (default 20)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="bench-out/faults")
    ap.add_argument("--subprocess", action="store_true", help="a new interpreter per run instead of a fork")
    ap.add_argument("--torchrun", type=int, default=0, metavar="N",
                    help="only N trials of a 2-process torchrun eval (gloo, CPU) with one rank SIGKILLed mid-run")
    a = ap.parse_args()
    if a.subprocess:
        os.environ["FAULTS_SUBPROCESS"] = "1"
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    ck = S.tiny_checkpoint(out / "ck")
    if a.torchrun:
        return torchrun_trials(a.torchrun, a.seed, ck, out)
    scen = S.standard(ck, out / "ref")         # leaderboard reads the eval and analyze references, made first
    refs: dict[str, tuple[dict, int]] = {}
    for name, sc in scen.items():
        shutil.rmtree(out / "ref" / name, ignore_errors=True)
        refs[name] = S.reference(sc, out / "ref" / name)
        print(f"reference {name}: {refs[name][1]} write points", flush=True)
    trials = plan(a.kills, a.enospc, a.seed, {k: v[1] for k, v in refs.items()})
    log = out / "soak.jsonl"
    done = [json.loads(ln) for ln in log.read_text().splitlines() if ln.strip()] if log.exists() else []
    t0 = time.time()
    with open(log, "a") as f:
        for i, (name, mode, at) in enumerate(trials):
            if i < len(done):
                continue
            work = out / "work" / f"{i:04d}-{name}-{mode}-{at}"
            shutil.rmtree(work, ignore_errors=True)
            o = S.interrupted(scen[name], work, mode, at, a.seed + i, refs[name][0])
            results = [m for m in o.mismatch if not m.startswith(S.LOGS)]
            rec = {"i": i, "scenario": name, "mode": mode, "at": at, "points": refs[name][1], "faulted": o.faulted,
                   "rc": o.rc, "rerun_rc": o.rerun_rc, "one_line": len(o.messages) <= 1,
                   "message": o.messages[-1][:200] if o.messages else "", "mismatch": results[:3],
                   "log_mismatch": [m[:200] for m in o.mismatch if m.startswith(S.LOGS)][:1]}
            f.write(json.dumps(rec) + "\n")
            f.flush()
            done.append(rec)
            shutil.rmtree(work, ignore_errors=True)
            print(f"[{i + 1}/{len(trials)}] {name} {mode}@{at}/{refs[name][1]}: rc {o.rc}, re-run {o.rerun_rc}, "
                  f"{'MISMATCH ' + results[0][:120] if results else 'identical'} ({time.time() - t0:.0f} s)", flush=True)
    print(table(done))
    bad = [r for r in done if r["mismatch"] or r["rerun_rc"] != 0 or not r["one_line"]]
    return 1 if bad else 0


def torchrun_trials(n: int, seed: int, ck: Path, out: Path) -> int:
    """``torchrun --nproc_per_node 2 robustvit eval``: a reference run, then ``n`` runs in which one rank (drawn)
    is SIGKILLed once the store holds a drawn number of finished units; torchrun ends the other rank; the re-run
    of the same command must give the reference results."""
    import signal
    import sqlite3
    import subprocess

    sc = S.standard(ck)["eval"]

    def cmd(o: Path, port: int) -> list[str]:
        return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={port}",
                "-m", "robustvit.cli", *sc.argv(o)]

    def units(o: Path) -> int:
        try:
            with sqlite3.connect(o / "units.sqlite", timeout=1) as db:
                return int(db.execute("SELECT COUNT(*) FROM units").fetchone()[0])
        except sqlite3.Error:
            return 0

    rng = random.Random(seed)
    ref_dir = out / "torchrun-ref"
    shutil.rmtree(ref_dir, ignore_errors=True)
    r = subprocess.run(cmd(ref_dir, 29611), env=S.env(), capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    ref, total = S.snapshot(ref_dir), units(ref_dir)
    log = out / "torchrun.jsonl"
    bad = 0
    for i in range(n):
        work = out / "torchrun" / f"{i:03d}"
        shutil.rmtree(work, ignore_errors=True)
        after, rank = rng.randint(0, max(0, total - 2)), rng.randint(0, 1)
        p = subprocess.Popen(cmd(work, 29612 + i), env=S.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, start_new_session=True)
        killed = None
        while p.poll() is None and killed is None:
            if units(work) >= after:
                kids = subprocess.run(["pgrep", "-P", str(p.pid)], capture_output=True, text=True).stdout.split()
                if len(kids) == 2:
                    killed = int(sorted(kids, key=int)[rank])
                    os.kill(killed, signal.SIGKILL)
            time.sleep(0.05)
        rc = p.wait(timeout=900)
        again = subprocess.run(cmd(work, 29700 + i), env=S.env(), capture_output=True, text=True, timeout=900)
        mismatch = S.diff(ref, S.snapshot(work)) if again.returncode == 0 else [again.stderr[-300:]]
        rec = {"i": i, "kill_after_units": after, "of_units": total, "rank": rank, "killed": killed is not None,
               "rc": rc, "rerun_rc": again.returncode, "mismatch": mismatch[:3]}
        with open(log, "a") as f:
            f.write(json.dumps(rec) + "\n")
        bad += bool(mismatch)
        print(f"torchrun [{i + 1}/{n}] rank {rank} killed after {after}/{total} units: rc {rc}, re-run "
              f"{again.returncode}, {'MISMATCH' if mismatch else 'identical'}", flush=True)
        shutil.rmtree(work, ignore_errors=True)
    return 1 if bad else 0


def table(records: list[dict]) -> str:
    """Markdown: per command and fault, trials, faulted, re-runs identical, mismatches, exit statuses."""
    rows = ["| command | fault | points drawn | faulted | re-run identical | result mismatches | log-only "
            "differences | exit status of the faulted run |", "|---|---|---|---|---|---|---|---|"]
    keys = sorted({(r["scenario"], r["mode"]) for r in records})
    for name, mode in keys:
        rs = [r for r in records if (r["scenario"], r["mode"]) == (name, mode)]
        ok = sum(1 for r in rs if not r["mismatch"] and r["rerun_rc"] == 0)
        codes = sorted({r["rc"] for r in rs})
        rows.append(f"| {name} | {'SIGKILL' if mode == 'kill' else 'ENOSPC'} | {len(rs)} | "
                    f"{sum(r['faulted'] for r in rs)} | {ok} | {sum(1 for r in rs if r['mismatch'])} | "
                    f"{sum(1 for r in rs if r['log_mismatch'])} | {', '.join(map(str, codes))} |")
    n = len(records)
    rows.append(f"| **all** | | {n} | {sum(r['faulted'] for r in records)} | "
                f"{sum(1 for r in records if not r['mismatch'] and r['rerun_rc'] == 0)} | "
                f"{sum(1 for r in records if r['mismatch'])} | {sum(1 for r in records if r['log_mismatch'])} | |")
    return "\n".join(rows)


if __name__ == "__main__":
    sys.exit(main())
