"""Kill / full-disk scenarios over robustvit's commands, shared by ``tests/faults`` and ``benchmarks/faults.py``.

A scenario is one command line with ``{out}`` in it. :func:`reference` runs it uninterrupted (counting its write
points); :func:`interrupted` runs it with a fault at write point N (``faultkit.py``), then re-runs the same command
(``--resume`` for ``train``) without faults and compares what it wrote with the reference: :func:`snapshot`
reduces an output folder to the results a user reads, without timings, dates or the folder's own path.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

KIT = Path(__file__).resolve().with_name("faultkit.py")
SRC = Path(__file__).resolve().parents[2] / "src"

#: Keys whose values differ between two identical runs (clock, the command line, the folder).
VOLATILE = {"started", "finished", "command", "seconds", "time", "timestamp", "elapsed", "wall_seconds", "out",
            "images_per_second", "throughput", "updated", "created", "date", "host", "hostname", "pid"}


@dataclass
class Scenario:
    """``name``; ``args``: the robustvit command line with ``{out}``; ``resume``: extra flags of the re-run."""

    name: str
    args: list[str]
    resume: list[str] = field(default_factory=list)

    def argv(self, out: Path, resume: bool = False) -> list[str]:
        return [a.replace("{out}", str(out)) for a in self.args] + (self.resume if resume else [])


def env() -> dict[str, str]:
    e = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "ROBUSTVIT_FROST_DIR": "procedural"}
    e["PYTHONPATH"] = os.pathsep.join([str(SRC), e.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return e


def run(mode: str, at: int, seed: int, argv: list[str], timeout: float = 600) -> subprocess.CompletedProcess:
    """``faultkit.py MODE AT SEED -- argv`` in a child process."""
    cmd = [sys.executable, str(KIT), mode, str(at), str(seed), "--", *argv]
    return subprocess.run(cmd, env=env(), capture_output=True, text=True, timeout=timeout)


def points(proc: subprocess.CompletedProcess) -> int:
    for line in proc.stderr.splitlines()[::-1]:
        if line.startswith("FAULTKIT-POINTS "):
            return int(line.split()[1])
    raise AssertionError(f"no write-point count (rc {proc.returncode}): {proc.stderr[-2000:]}")


def error_lines(proc: subprocess.CompletedProcess) -> list[str]:
    """What robustvit printed on stderr, less faultkit's own line and warnings."""
    return [ln for ln in proc.stderr.splitlines()
            if ln.strip() and not ln.startswith(("FAULTKIT-", "robustvit: warning:"))]


def _clean(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items() if k not in VOLATILE and not k.endswith("_seconds")}
    if isinstance(obj, list):
        return [_clean(v) for v in obj]
    return obj


def snapshot(out: Path) -> dict[str, Any]:
    """The results in ``out``: JSON files without volatile keys; weights as per-tensor digests; other data files
    (images, arrays) as byte digests. Stores (SQLite), temporary files, figures and logs of timings are left out."""
    snap: dict[str, Any] = {}
    for p in sorted(out.rglob("*")):
        rel = p.relative_to(out).as_posix()
        if not p.is_file() or ".sqlite" in p.name or p.suffix in (".png", ".pdf", ".svg", ".lock", ".log"):
            continue
        if p.suffix == ".json":
            try:
                snap[rel] = _clean(json.loads(p.read_text()))
            except ValueError:
                snap[rel] = "UNREADABLE JSON"
        elif p.suffix == ".jsonl":
            snap[rel] = [_clean(json.loads(ln)) for ln in p.read_text().splitlines() if ln.strip()]
        elif p.suffix == ".safetensors":
            from safetensors.torch import load_file

            snap[rel] = {k: hashlib.sha256(v.contiguous().numpy().tobytes()).hexdigest()[:16]
                         for k, v in sorted(load_file(str(p)).items())}
        elif p.name.endswith((".pt", ".yaml")):
            continue       # the trainer's resume state and config (paths); the weights above are the result
        else:
            snap[rel] = hashlib.sha256(p.read_bytes()).hexdigest()[:16]
    return snap


def diff(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """Keys (files) whose content differs between two snapshots, with the first differing value."""
    out = []
    for k in sorted(set(a) | set(b)):
        if a.get(k) != b.get(k):
            out.append(f"{k}: {json.dumps(a.get(k))[:200]} != {json.dumps(b.get(k))[:200]}")
    return out


def reference(sc: Scenario, out: Path) -> tuple[dict[str, Any], int]:
    """The uninterrupted run: its snapshot and its number of write points."""
    proc = run("count", 0, 0, sc.argv(out))
    assert proc.returncode == 0, f"{sc.name} reference run failed: {proc.stderr[-3000:]}"
    return snapshot(out), points(proc)


@dataclass
class Outcome:
    """One interrupted run and its re-run: ``faulted`` (the fault happened), ``rc`` of the faulted run,
    ``rerun_rc``, ``messages`` (stderr lines of the faulted run), ``mismatch`` (differences to the reference)."""

    scenario: str
    mode: str
    at: int
    faulted: bool
    rc: int
    rerun_rc: int
    messages: list[str]
    mismatch: list[str]


def interrupted(sc: Scenario, out: Path, mode: str, at: int, seed: int, ref: dict[str, Any]) -> Outcome:
    """Fault ``mode`` (kill, enospc) at write point ``at``, then re-run without faults until it completes (at most
    twice) and compare with ``ref``. A kill leaves the folder as SIGKILL would; ENOSPC as a full disk would."""
    proc = run(mode, at, seed, sc.argv(out))
    faulted = proc.returncode != 0
    rerun_rc, mismatch = 0, []
    if faulted:
        rerun = run("count", 0, 0, sc.argv(out, resume=bool(sc.resume)))
        if rerun.returncode != 0 and sc.resume and "nothing to resume" in rerun.stderr:
            rerun = run("count", 0, 0, sc.argv(out))            # killed before its first checkpoint
        rerun_rc = rerun.returncode
        if rerun_rc != 0:
            mismatch = [f"re-run failed (rc {rerun_rc}): " + " | ".join(error_lines(rerun))[:300]]
    if not mismatch:
        mismatch = diff(ref, snapshot(out))
    return Outcome(sc.name, mode, at, faulted, proc.returncode, rerun_rc, error_lines(proc), mismatch)
