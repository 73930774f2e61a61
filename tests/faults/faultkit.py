"""Fault injection for robustvit's commands, in a child process: SIGKILL or a full disk at the N-th write.

``python faultkit.py MODE N SEED -- ROBUSTVIT-ARGS…`` runs ``robustvit.cli.main(ROBUSTVIT-ARGS)`` after wrapping
every *write point* of the process — a file opened for writing and each ``write`` to it, ``os.replace`` /
``os.rename``, ``torch.save``, safetensors' ``save_file`` and every writing SQLite statement or commit — with a
counter. MODE:

- ``count``: run to the end; print ``FAULTKIT-POINTS <n>`` (the number of write points) on stderr.
- ``trace``: as ``count``, and one ``FAULTKIT-TRACE <i> <kind> <file or statement>`` line per write point.
- ``kill``: at write point ``N`` the process SIGKILLs itself. A ``write`` is torn first (half its bytes reach the
  file); other points are killed before or after the operation, drawn from ``SEED``.
- ``enospc``: from write point ``N`` on, every write fails as on a full file system: ``OSError(ENOSPC)`` for files,
  ``sqlite3.OperationalError("database or disk is full")`` for SQLite, the messages torch and safetensors give.

Names bound at import (``from safetensors.torch import save_file``) are re-bound in robustvit's loaded modules.
:func:`fork_run` does the same in a child forked from an already-importing process (no interpreter start per
run: what makes hundreds of kill points affordable); the child's stdout/stderr go to a file the parent reads.
Used by ``tests/faults`` and ``benchmarks/faults.py``.
"""

from __future__ import annotations

import builtins
import errno
import io
import os
import random
import signal
import sqlite3
import sys
from collections.abc import Callable
from typing import Any

WRITE_SQL = ("INSERT", "REPLACE", "UPDATE", "DELETE", "CREATE", "DROP", "BEGIN", "COMMIT", "PRAGMA", "END")


class Faults:
    """The counter of write points and the fault to inject at point ``at`` (``mode``: count, kill, enospc)."""

    def __init__(self, mode: str, at: int, seed: int) -> None:
        if mode not in ("count", "trace", "kill", "enospc"):
            raise SystemExit(f"faultkit: unknown mode {mode!r}")
        self.mode, self.at, self.rng, self.n = mode, at, random.Random(seed), 0
        self.full = False

    def point(self, kind: str, torn: Callable[[], None] | None = None, detail: Any = "") -> bool:
        """Count one write point; kill or fail here when it is the chosen one. Returns True when the operation
        should run after the point and the process is then to be killed (a kill *after* the operation)."""
        self.n += 1
        if self.mode == "trace":
            print(f"FAULTKIT-TRACE {self.n} {kind} {detail}", file=sys.__stderr__, flush=True)
        if self.mode == "enospc" and (self.full or self.n >= self.at):
            self.full = True
            raise _full_error(kind)
        if self.mode != "kill" or self.n != self.at:
            return False
        if torn is not None:
            torn()
            _die()
        if self.rng.random() < 0.5:
            _die()
        return True


def _die() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def _full_error(kind: str) -> Exception:
    if kind == "sqlite":
        return sqlite3.OperationalError("database or disk is full")
    if kind == "torch.save":
        return RuntimeError("[enforce fail at inline_container.cc:603] . unexpected pos 64 vs 0: file write failed")
    if kind == "safetensors":
        from safetensors import SafetensorError

        return SafetensorError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, '
                               'message: "No space left on device" })')
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


class _File:
    """A file opened for writing whose ``write`` calls are write points (a kill there tears the write)."""

    def __init__(self, f: Any, faults: Faults) -> None:
        self._f, self._faults = f, faults

    def write(self, data: Any) -> int:
        def torn() -> None:
            self._f.write(data[: len(data) // 2])
            self._f.flush()

        after = self._faults.point("write", torn if len(data) > 1 else None, getattr(self._f, "name", ""))
        out = self._f.write(data)
        if after:
            self._f.flush()
            _die()
        return out

    def __enter__(self) -> "_File":
        return self

    def __exit__(self, *exc: Any) -> None:
        self._f.close()

    def __iter__(self) -> Any:
        return iter(self._f)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)


def install(faults: Faults) -> None:
    """Wrap the process's write points (before robustvit is imported)."""
    real_open = io.open

    def open_(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if not any(c in mode for c in "wax+"):
            return real_open(file, mode, *args, **kwargs)
        after = faults.point("open", None, file)
        f = real_open(file, mode, *args, **kwargs)
        if after:
            _die()
        return _File(f, faults)

    builtins.open = io.open = open_

    def wrap(obj: Any, name: str, kind: str) -> None:
        real = getattr(obj, name)

        def fn(*args: Any, **kwargs: Any) -> Any:
            after = faults.point(kind, None, args[-1] if args and isinstance(args[-1], (str, os.PathLike)) else "")
            out = real(*args, **kwargs)
            if after:
                _die()
            return out
        setattr(obj, name, fn)

    wrap(os, "replace", "replace")
    wrap(os, "rename", "replace")
    import torch
    import safetensors.torch

    real_save_file = safetensors.torch.save_file
    wrap(torch, "save", "torch.save")
    wrap(safetensors.torch, "save_file", "safetensors")
    for name, mod in list(sys.modules.items()):          # names bound by ``from … import`` before install
        if name.startswith("robustvit") and getattr(mod, "save_file", None) is real_save_file:
            mod.save_file = safetensors.torch.save_file

    class Connection(sqlite3.Connection):
        def execute(self, sql: str, *args: Any) -> Any:
            after = faults.point("sqlite", None, sql[:30]) if sql.lstrip().upper().startswith(WRITE_SQL) else False
            out = super().execute(sql, *args)
            if after:
                _die()
            return out

        def executemany(self, sql: str, *args: Any) -> Any:
            after = faults.point("sqlite")
            out = super().executemany(sql, *args)
            if after:
                _die()
            return out

        def commit(self) -> None:
            after = faults.point("sqlite")
            super().commit()
            if after:
                _die()

    real_connect = sqlite3.connect

    def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        kwargs.setdefault("factory", Connection)
        return real_connect(*args, **kwargs)

    sqlite3.connect = connect


def fork_run(mode: str, at: int, seed: int, argv: list[str], log: str, timeout: float = 900) -> tuple[int, str]:
    """Run ``robustvit.cli.main(argv)`` with faults in a forked child; returns (exit status — ``-9`` when killed
    by SIGKILL —, its stdout + stderr). ``log`` is the file the child writes them to. Call with one torch thread
    (``OMP_NUM_THREADS=1``): a fork after a multi-threaded OpenMP region may hang the child."""
    import time

    pid = os.fork()
    if pid == 0:                                           # the child: never returns
        code = 70
        try:
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), line_buffering=True)
            sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), line_buffering=True)
            faults = Faults(mode, at, seed)
            install(faults)
            from robustvit.cli import main as cli_main

            code = cli_main(argv)
            print(f"FAULTKIT-POINTS {faults.n}", file=sys.stderr, flush=True)
        except BaseException as e:  # noqa: BLE001  the child must not return into the parent's code
            print(f"FAULTKIT-CHILD {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        finally:
            os._exit(code)
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise TimeoutError(f"faultkit child {argv[:1]} ran past {timeout} s")
        time.sleep(0.05)
    rc = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    with open(log, encoding="utf-8", errors="replace") as f:
        return rc, f.read()


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[3] != "--":
        raise SystemExit("usage: faultkit.py count|kill|enospc N SEED -- ROBUSTVIT-ARGS…")
    faults = Faults(argv[0], int(argv[1]), int(argv[2]))
    install(faults)
    import torch

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    from robustvit.cli import main as cli_main

    code = cli_main(argv[4:])
    print(f"FAULTKIT-POINTS {faults.n}", file=sys.stderr, flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
