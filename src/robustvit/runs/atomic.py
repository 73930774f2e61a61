"""Atomic file writes: a reader sees the old file or the new one, never half of one.

The bytes go to a temporary file in the same folder, are flushed and ``fsync``-ed, and the temporary file is
renamed over the target with ``os.replace`` (atomic on POSIX and Windows); the folder is then ``fsync``-ed where
the platform allows, so the rename survives a power cut. A run killed at any moment leaves either the previous
file or the complete new one (and at worst a stray ``.NAME.*.tmp``). ``durable=False`` skips the fsyncs (still
atomic against a killed process, not against a power cut): for many small files such as exported images.
The file gets the permissions of any file the process creates (0644 under the usual umask 022), not the
temporary file's 0600.

>>> write_json("out/results.json", {"schema": 2})      # doctest: +SKIP
>>> with replacing("out/big.npy", suffix=".npy") as tmp:   # doctest: +SKIP
...     np.save(tmp, array)                             # a writer that wants a path
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def replacing(path: str | Path, *, suffix: str = ".tmp", durable: bool = True) -> Iterator[Path]:
    """A temporary path beside ``path`` (ending in ``suffix``) to write to; on success it replaces ``path``
    (after an fsync), on an exception it is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~_umask())    # mkstemp's (and safetensors') 0600 → a created file's usual mode
        if durable:
            _fsync(tmp, os.O_RDONLY)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if durable:
        _fsync(path.parent, os.O_RDONLY)


def write_bytes(path: str | Path, data: bytes, *, durable: bool = True) -> Path:
    """Write ``data`` to ``path`` atomically (creating its folder); returns the path."""
    path = Path(path)
    with replacing(path, durable=durable) as tmp:
        tmp.write_bytes(data)
    return path


def write_text(path: str | Path, text: str, *, durable: bool = True) -> Path:
    """Write UTF-8 ``text`` to ``path`` atomically."""
    return write_bytes(path, text.encode("utf-8"), durable=durable)


def write_json(path: str | Path, obj: Any, indent: int | None = 2) -> Path:
    """Write ``obj`` as JSON to ``path`` atomically."""
    return write_text(path, json.dumps(obj, indent=indent) + "\n")


def _umask() -> int:
    """The process's umask: from /proc on Linux, else by setting it and setting it back."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _fsync(path: Path, flags: int) -> None:
    try:
        fd = os.open(path, flags)
    except OSError:          # e.g. Windows: folders cannot be opened
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


__all__ = ["replacing", "write_bytes", "write_json", "write_text"]
