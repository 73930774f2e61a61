"""The run engine's own cost per unit: the unit store's commit policy, and ``run_units`` around trivial work.

*before* is the store as it was until issue #32: ``PRAGMA synchronous=FULL`` (SQLite's default) and a commit per
unit (each an fsync of the WAL); *after* is the policy now: ``synchronous=NORMAL`` under WAL and one transaction
per chunk (:meth:`UnitStore.chunk`). The statistics stored are those of a typical unit (counts, a loss sum and
per-class counts of 10 classes). ``run_units`` rows time the whole engine (scheduler, the one-late read of tensor
statistics, the chunk's commit, and with ``--world 2`` a claim per chunk) around work that only yields. Each
figure is the median, over ``--repeats`` runs, of the milliseconds per unit, in a plain Python process; the
store lives in ``--dir`` (put it on the file system your runs write to: on a tmpfs an fsync costs nothing).

    PYTHONPATH=src .venv/bin/python benchmarks/engine.py --dir bench-out/engine
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

from robustvit.runs import UnitStore, Worker, run_units  # noqa: E402


def _stats(c: int, i: int) -> dict:
    return {"n": 64, "correct": 50 + i % 7, "loss": 12.5 + c, "per_class": [6 + (i + k) % 3 for k in range(10)]}


def _fresh(d: Path) -> Path:
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    return d


def store_ms(d: Path, policy: str, chunks: int, per_chunk: int) -> float:
    """Milliseconds per unit for ``chunks`` chunks of ``per_chunk`` units put into a fresh store."""
    store = UnitStore(_fresh(d))
    if policy == "before":
        store.db.execute("PRAGMA synchronous=FULL")
    t = time.perf_counter()
    for c in range(chunks):
        if policy == "before":
            for i in range(per_chunk):
                store.put("suite", f"part{i}", c, _stats(c, i), 0.0, "0/1")
        else:
            with store.chunk():
                for i in range(per_chunk):
                    store.put("suite", f"part{i}", c, _stats(c, i), 0.0, "0/1")
    ms = (time.perf_counter() - t) * 1e3 / (chunks * per_chunk)
    store.close()
    return ms


def engine_ms(d: Path, chunks: int, per_chunk: int, world: int) -> float:
    """Milliseconds per unit of ``run_units`` around work that only yields (tensor statistics)."""
    store = UnitStore(_fresh(d))
    parts = [("suite", f"part{i}") for i in range(per_chunk)]

    def work(data, c, pending):  # noqa: ANN001, ANN202
        for i, u in enumerate(pending):
            yield u, {"n": torch.tensor(64), "correct": torch.tensor(50 + i % 7), "loss": torch.tensor(12.5)}

    t = time.perf_counter()
    run_units(store, chunks, lambda c: parts, work, worker=Worker(0, world))
    ms = (time.perf_counter() - t) * 1e3 / (chunks * per_chunk)
    store.close()
    return ms


def _fs(path: Path) -> str:
    best, kind = "", "?"
    try:
        for line in Path("/proc/mounts").read_text().splitlines():
            _, mnt, fstype, *_ = line.split()
            if str(path.resolve()).startswith(mnt) and len(mnt) > len(best):
                best, kind = mnt, fstype
    except OSError:
        pass
    return kind


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="bench-out/engine", help="where the stores are written (a fresh one per run)")
    ap.add_argument("--chunks", type=int, default=20)
    ap.add_argument("--units", default="2,75", help="units per chunk (2: clean + an attack; 75: ImageNet-C)")
    ap.add_argument("--repeats", type=int, default=7)
    a = ap.parse_args()
    d = Path(a.dir)
    d.mkdir(parents=True, exist_ok=True)
    print(f"python {platform.python_version()}, torch {torch.__version__}, sqlite {__import__('sqlite3').sqlite_version}, "
          f"{platform.machine()}, {os.cpu_count()} cores, store on {_fs(d)} ({d})")
    print("| what | units / chunk | before: synchronous=FULL, commit per unit (ms / unit) | "
          "after: synchronous=NORMAL, commit per chunk (ms / unit) | before / after |")
    print("|---|---|---|---|---|")
    for per in map(int, a.units.split(",")):
        before = statistics.median(store_ms(d / "s", "before", a.chunks, per) for _ in range(a.repeats))
        after = statistics.median(store_ms(d / "s", "after", a.chunks, per) for _ in range(a.repeats))
        print(f"| unit store (`put`) | {per} | {before:.3f} | {after:.3f} | {before / after:.0f}× |", flush=True)
    for per in map(int, a.units.split(",")):
        for world in (1, 2):
            ms = statistics.median(engine_ms(d / "e", a.chunks, per, world) for _ in range(a.repeats))
            what = "`run_units`, one process" if world == 1 else "`run_units`, a rank of 2 (a claim per chunk)"
            print(f"| {what} | {per} | | {ms:.3f} | |", flush=True)
    shutil.rmtree(d / "s", ignore_errors=True)
    shutil.rmtree(d / "e", ignore_errors=True)


if __name__ == "__main__":
    main()
