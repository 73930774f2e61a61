"""A full disk: every write from a seeded point on fails as on a full file system (``ENOSPC``, SQLite's "database
or disk is full", torch's and safetensors' failed writes). The command ends with one line that says what to free
(exit 2); after space is freed the same command completes with the results of an uninterrupted run (issue 25).
Where the tests run as root, a real tmpfs is filled too."""

from __future__ import annotations

import errno
import os
import random
import shutil
import sqlite3
import subprocess

import pytest

import scenarios as S
from robustvit.cli import environment_error, main


@pytest.mark.parametrize("name", ["eval", "analyze", "train", "corrupt", "leaderboard"])
def test_enospc_at_a_seeded_write_is_one_line_then_rerun_matches(name, ck, refs, tmp_path):
    sc = refs.scen[name]
    ref, n = refs[name]
    at = random.Random(f"enospc-{name}").randint(1, n)
    o = S.interrupted(sc, tmp_path / "full", "enospc", at, 0, ref)
    assert o.faulted and o.rc == 2, (at, n, o.rc, o.messages[-3:])
    assert len(o.messages) == 1 and "disk is full" in o.messages[0] and "free space" in o.messages[0], o.messages
    assert str(tmp_path / "full") in o.messages[0]                   # names where to free it
    assert o.rerun_rc == 0 and not [m for m in o.mismatch if not m.startswith(S.LOGS)], o.mismatch[:3]


def test_full_disk_in_the_leaderboard_database_is_named_as_such(ck, refs, tmp_path):
    """SQLite's "database or disk is full" while ``leaderboard --db`` adds its runs: the disk-full line, not "not a
    leaderboard database" (the soak found that)."""
    sc = refs.scen["leaderboard"]
    refs["leaderboard"]
    first_sql = next(i for i, kind, _ in S.trace(sc, tmp_path / "trace") if kind == "sqlite")
    o = S.interrupted(sc, tmp_path / "full", "enospc", first_sql, 0, refs["leaderboard"][0])
    assert o.rc == 2 and len(o.messages) == 1 and "disk is full" in o.messages[0], o.messages
    assert o.rerun_rc == 0 and not o.mismatch, o.mismatch[:3]


def _full(exc: BaseException) -> BaseException:
    try:
        raise RuntimeError("while writing units") from exc
    except RuntimeError as e:
        return e


@pytest.mark.parametrize("exc", [
    OSError(errno.ENOSPC, "No space left on device"),
    OSError(errno.EDQUOT, "Disk quota exceeded"),
    sqlite3.OperationalError("database or disk is full"),
    RuntimeError("[enforce fail at inline_container.cc:603] . unexpected pos 64 vs 0: file write failed"),
    RuntimeError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space" })'),
    _full(OSError(errno.ENOSPC, "No space left on device")),          # raised from a full-disk error
], ids=["enospc", "edquot", "sqlite", "torch.save", "safetensors", "chained"])
def test_full_disk_errors_map_to_one_line(exc):
    msg = environment_error(exc, "runs/x")
    assert msg is not None and msg.startswith("the disk is full (the file system of runs/x)") and "\n" not in msg


def test_other_errors_are_not_mistaken_for_a_full_disk():
    assert environment_error(ValueError("shape mismatch")) is None
    assert environment_error(OSError(errno.ENOENT, "No such file")) is None
    msg = environment_error(PermissionError(errno.EACCES, "Permission denied", "/r/o"), "o")
    assert msg is not None and "/r/o" in msg and "permissions" in msg


def test_cli_exit_status_for_a_full_disk(monkeypatch, capsys, tmp_path):
    def full(*a, **k):
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr("robustvit.cli.COMMANDS", [_report_parser(full)])
    assert main(["report", str(tmp_path), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("robustvit: error: the disk is full") and str(tmp_path / "r") in err[0]


def _report_parser(func):
    def add(sub):
        p = sub.add_parser("report")
        p.add_argument("results", nargs="+")
        p.add_argument("--out", required=True)
        p.set_defaults(func=func)
    return add


def _mount_tmpfs(path, size: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True).returncode == 0


@pytest.mark.slow
def test_a_real_full_tmpfs_then_space_freed(ck, refs, tmp_path):
    """``eval`` into a 256 KiB tmpfs nearly filled by another file: one line, exit 2; delete that file (space
    freed) and the same command completes with the reference results."""
    disk = tmp_path / "disk"
    if not _mount_tmpfs(disk, "256k"):
        pytest.skip("mounting a tmpfs needs root")
    try:
        sc = S.standard(ck)["eval"]
        ref, _ = refs["eval"]
        ballast = disk / "ballast"
        with open(ballast, "wb") as f:                    # leave ~16 KiB: the store outgrows it mid-run
            f.write(b"\0" * (240 * 1024))
        out = disk / "out"
        proc = S.run("count", 0, 0, sc.argv(out))
        lines = S.error_lines(proc)
        assert proc.returncode == 2 and len(lines) == 1 and "disk is full" in lines[0], proc.stderr[-2000:]
        ballast.unlink()
        again = S.run("count", 0, 0, sc.argv(out))
        assert again.returncode == 0, again.stderr[-2000:]
        assert not S.diff(ref, S.snapshot(out))
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)
