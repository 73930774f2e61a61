"""Fault injection for robustvit's commands, in a child process: SIGKILL or a full disk at the N-th write.

``python faultkit.py MODE N SEED -- ROBUSTVIT-ARGS…`` runs ``robustvit.cli.main(ROBUSTVIT-ARGS)`` after wrapping
every *write point* of the process — a file opened for writing and each ``write`` to it, ``os.replace`` /
``os.rename``, ``torch.save``, safetensors' ``save_file`` and every writing SQLite statement or commit — with a
counter. MODE:

- ``count``: run to the end; print ``FAULTKIT-POINTS <n>`` (the number of write points) on stderr.
- ``kill``: at write point ``N`` the process SIGKILLs itself. A ``write`` is torn first (half its bytes reach the
  file); other points are killed before or after the operation, drawn from ``SEED``.
- ``enospc``: from write point ``N`` on, every write fails as on a full file system: ``OSError(ENOSPC)`` for files,
  ``sqlite3.OperationalError("database or disk is full")`` for SQLite, the messages torch and safetensors give.

The wrappers are installed before robustvit is imported, so names bound at import (``from safetensors.torch import
save_file``) are wrapped too. Used by ``tests/faults`` and ``benchmarks/faults.py``.
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
        if mode not in ("count", "kill", "enospc"):
            raise SystemExit(f"faultkit: unknown mode {mode!r}")
        self.mode, self.at, self.rng, self.n = mode, at, random.Random(seed), 0
        self.full = False

    def point(self, kind: str, torn: Callable[[], None] | None = None) -> bool:
        """Count one write point; kill or fail here when it is the chosen one. Returns True when the operation
        should run after the point and the process is then to be killed (a kill *after* the operation)."""
        self.n += 1
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

        after = self._faults.point("write", torn if len(data) > 1 else None)
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
        after = faults.point("open")
        f = real_open(file, mode, *args, **kwargs)
        if after:
            _die()
        return _File(f, faults)

    builtins.open = io.open = open_

    def wrap(obj: Any, name: str, kind: str) -> None:
        real = getattr(obj, name)

        def fn(*args: Any, **kwargs: Any) -> Any:
            after = faults.point(kind)
            out = real(*args, **kwargs)
            if after:
                _die()
            return out
        setattr(obj, name, fn)

    wrap(os, "replace", "replace")
    wrap(os, "rename", "replace")
    import torch
    import safetensors.torch

    wrap(torch, "save", "torch.save")
    wrap(safetensors.torch, "save_file", "safetensors")

    class Connection(sqlite3.Connection):
        def execute(self, sql: str, *args: Any) -> Any:
            after = faults.point("sqlite") if sql.lstrip().upper().startswith(WRITE_SQL) else False
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
