"""Kill / full-disk scenarios over robustvit's commands, shared by ``tests/faults`` and ``benchmarks/faults.py``.

A scenario is one command line with ``{out}`` in it. :func:`reference` runs it uninterrupted (counting its write
points); :func:`interrupted` runs it with a fault at write point N (``faultkit.py``), then re-runs the same command
(``--resume`` for ``train``) without faults and compares what it wrote with the reference: :func:`snapshot`
reduces an output folder to the results a user reads, without timings, dates or the folder's own path.
"""

from __future__ import annotations

import hashlib
import json
import re
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))        # faultkit

KIT = Path(__file__).resolve().with_name("faultkit.py")
SRC = Path(__file__).resolve().parents[2] / "src"

#: Keys whose values differ between two identical runs (clock, the command line, the folder).
VOLATILE = {"started", "finished", "command", "seconds", "time", "timestamp", "elapsed", "wall_seconds", "out",
            "images_per_second", "throughput", "updated", "created", "date", "host", "hostname", "pid", "fraction_of_attack"}


#: Files that are logs, not results: a mismatch there is reported apart from the results (see LOGS_REASON).
LOGS = ("metrics.jsonl",)
LOGS_REASON = "metrics.jsonl is a log: its lines are checked apart from the results"


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


@dataclass
class Proc:
    """A finished run: exit status (``-9``: killed) and its output (stdout and stderr together)."""

    returncode: int
    stderr: str


def run(mode: str, at: int, seed: int, argv: list[str], timeout: float = 900) -> Proc:
    """``faultkit`` mode ``mode`` at write point ``at`` over ``robustvit argv``: in a child forked from this
    process (robustvit already imported), or with ``FAULTS_SUBPROCESS=1`` in a new interpreter
    (``python faultkit.py MODE AT SEED -- argv``)."""
    if os.environ.get("FAULTS_SUBPROCESS") == "1":
        cmd = [sys.executable, str(KIT), mode, str(at), str(seed), "--", *argv]
        p = subprocess.run(cmd, env=env(), capture_output=True, text=True, timeout=timeout)
        return Proc(p.returncode, p.stdout + p.stderr)
    import tempfile

    import faultkit

    fd, log = tempfile.mkstemp(prefix="faultkit-", suffix=".log")
    os.close(fd)
    try:
        rc, text = faultkit.fork_run(mode, at, seed, argv, log, timeout)
    finally:
        os.unlink(log)
    return Proc(rc, text)


def points(proc: Proc) -> int:
    for line in proc.stderr.splitlines()[::-1]:
        if line.startswith("FAULTKIT-POINTS "):
            return int(line.split()[1])
    raise AssertionError(f"no write-point count (rc {proc.returncode}): {proc.stderr[-2000:]}")


def error_lines(proc: Proc) -> list[str]:
    """The error lines a run printed: robustvit's ``robustvit: error:`` lines, and any traceback or child failure
    (so a one-line refusal is exactly one line here)."""
    return [ln for ln in proc.stderr.splitlines()
            if ln.startswith(("robustvit: error", "Traceback", "FAULTKIT-CHILD", "usage:"))]


def _clean(obj: Any) -> Any:
    if isinstance(obj, dict) and obj.get("kind") == "train" and isinstance(obj.get("model"), dict):
        # a training run's model is named by its run folder, which differs between the reference and a faulted run
        obj = {**obj, "model": {k: v for k, v in obj["model"].items() if k != "name"}}
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items() if k not in VOLATILE and not k.endswith("_seconds")}
    if isinstance(obj, list):
        return [_clean(v) for v in obj]
    return obj


def _line(text: str) -> Any:
    try:
        return _clean(json.loads(text))
    except ValueError:
        return "UNREADABLE LINE"


#: The atomic writer's temporary files (``robustvit.runs.atomic``: ``.NAME.XXXXXXXX[.suffix]`` beside the target); a
#: write killed before its rename leaves one, which nothing reads.
ATOMIC_TEMP = re.compile(r"^\..+\.[A-Za-z0-9_]{8}(\.[A-Za-z0-9]+)?$")


def leaderboard_rows(db: Path) -> Any:
    """A leaderboard database's rows (id, model, data, kind, payload), sorted; its clock columns left out."""
    import sqlite3

    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            rows = con.execute("SELECT id, model, data, kind, payload FROM runs ORDER BY id").fetchall()
        finally:
            con.close()
    except sqlite3.DatabaseError as e:
        return f"UNREADABLE DATABASE ({e})"
    return [[i, m, d, k, _clean(json.loads(p))] for i, m, d, k, p in rows]


def snapshot(out: Path) -> dict[str, Any]:
    """The results in ``out``: JSON files without volatile keys; weights as per-tensor digests; other data files
    (images, arrays) as byte digests. Stores (SQLite), temporary files, figures and logs of timings are left out."""
    snap: dict[str, Any] = {}
    for p in sorted(out.rglob("*")):
        rel = p.relative_to(out).as_posix()
        if p.suffix == ".sqlite" and p.name != "units.sqlite":
            snap[rel] = leaderboard_rows(p)
            continue
        if not p.is_file() or ".sqlite" in p.name or p.suffix in (".png", ".pdf", ".svg", ".lock", ".log"):
            continue
        if ATOMIC_TEMP.match(p.name) or "last.tmp" in p.parts:
            continue
        if p.suffix == ".json":
            try:
                snap[rel] = _clean(json.loads(p.read_text()))
            except ValueError:
                snap[rel] = "UNREADABLE JSON"
        elif p.suffix == ".jsonl":
            snap[rel] = [_line(ln) for ln in p.read_text().splitlines() if ln.strip()]
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


TINY_VIT = '{"embed_dim": 32, "depth": 2, "num_heads": 2, "img_size": 16}'


def tiny_checkpoint(directory: Path) -> Path:
    """A seeded 10-class ViT for 16 × 16 images (random weights), saved as a checkpoint folder."""
    import torch

    from robustvit.models import create_model
    from robustvit.models.factory import save_checkpoint

    if not (directory / "spec.json").is_file():
        torch.manual_seed(0)
        save_checkpoint(create_model("vit_cifar_tiny", num_classes=10, **json.loads(TINY_VIT)), directory)
    return directory


def standard(ck: Path, refs: Path | None = None) -> dict[str, Scenario]:
    """The commands the fault tests and the soak interrupt, on tiny inputs (a second or two each). With ``refs``
    (the folder holding the reference runs ``eval`` and ``analyze``, made first) also ``leaderboard --db``
    adding those two runs to a database and writing its table."""
    common = ["--device", "cpu", "--no-progress"]
    scen = {
        "eval": Scenario("eval", ["eval", "--model", str(ck), "--data", "synthshapes:test", "--limit", "24",
                                  "--suite", "clean,fgsm", "--batch-size", "8", "--out", "{out}", *common]),
        "analyze": Scenario("analyze", ["analyze", "lesion,correlation", "--model", str(ck), "--data", "synthshapes:test",
                                        "--limit", "16", "--batch-size", "8", "--out", "{out}", *common]),
        "train": Scenario("train", ["train", "--model", "vit_cifar_tiny", "--model-kwargs", TINY_VIT, "--data",
                                    "synthshapes:train,count=40", "--epochs", "3", "--batch-size", "10", "--seed", "0",
                                    "--device", "cpu", "--out", "{out}"], resume=["--resume"]),
        "corrupt": Scenario("corrupt", ["corrupt", "--data", "synthshapes:test", "--limit", "8", "--corruptions",
                                        "gaussian_noise,contrast", "--severities", "1,3", "--image-format", "png",
                                        "--out", "{out}", *common]),
        "corrupt_cifar": Scenario("corrupt_cifar", ["corrupt", "--data", "synthshapes:test", "--limit", "8",
                                                    "--format", "cifar-c", "--corruptions", "gaussian_noise",
                                                    "--out", "{out}", *common]),
    }
    if refs is not None:
        scen["leaderboard"] = Scenario("leaderboard", ["leaderboard", str(refs / "eval"), str(refs / "analyze"),
                                                       "--db", "{out}/board.sqlite", "--out", "{out}/board.md"])
    return scen


def trace(sc: Scenario, out: Path) -> list[tuple[int, str, str]]:
    """The write points of an uninterrupted run, in order: (index, kind, file or SQL statement)."""
    proc = run("trace", 0, 0, sc.argv(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [ln.split(" ", 3)[1:] for ln in proc.stderr.splitlines() if ln.startswith("FAULTKIT-TRACE ")]
    return [(int(i), kind, rest) for i, kind, *more in rows for rest in [more[0] if more else ""]]
