"""The unit store: one SQLite file per run folder; the units of a chunk are committed together when it ends.

A unit is (task, part, chunk) — a suite or an analysis, an independent piece of it (a corruption × severity,
a lesioned block), and a chunk of images — holding JSON statistics that are additive over chunks (counts and
sums, not means). Beside the units, the store records facts about the run's data: its images that could not be
read (:meth:`UnitStore.put_unreadable`), committed with the chunk that read them. Re-running the same command
skips stored units, so a run killed even with SIGKILL loses at most the work in flight: the chunk being run
(:meth:`UnitStore.chunk` commits its units in one transaction when it ends; a :meth:`UnitStore.put` outside one
commits at once). The file is in WAL mode with ``synchronous=NORMAL``: a commit costs no fsync (the WAL is synced
at checkpoints), a killed process loses no committed unit, and a power cut or an OS crash may roll back the last
commits but never corrupts the file.
Several processes (``torchrun`` ranks) write to it at once and share out the chunks by *claims*
(:meth:`UnitStore.claim`); a shard (``--shard K/N``) writes its own file, and :meth:`UnitStore.merge_from`
joins them.

The settings a run's units depend on are its *fingerprint* (one per scope: ``"run"`` for an evaluation, the
analysis name for an analysis); a folder refuses units of other settings in one line.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from robustvit.errors import RobustvitError
from robustvit.utils import to_plain

DB_NAME = "units.sqlite"
RUN_SCOPE = "run"
TIME_FORMAT = "%Y-%m-%dT%H:%M:%S%z"
_COLUMNS = ("task", "part", "chunk", "stats", "seconds", "finished", "worker")
_INSERT = "INSERT OR REPLACE INTO units VALUES (?, ?, ?, ?, ?, ?, ?)"
_INSERT_UNREADABLE = "INSERT OR REPLACE INTO unreadable VALUES (?, ?)"


def now() -> str:
    """The local time as results.json records it (ISO 8601 with the UTC offset)."""
    return time.strftime(TIME_FORMAT)


#: How :func:`robustvit.runs.header.weights_id` names random weights in a fingerprint (a digest, drawn anew by
#: each command).
RANDOM_WEIGHTS = "random:"


def _tolist(obj: Any) -> Any:
    tolist = getattr(obj, "tolist", None)
    if not callable(tolist):
        raise TypeError(f"unit statistics must be JSON data or tensors, not {type(obj).__name__}")
    return tolist()


def _dumps(stats: Any) -> str:
    # plain data is serialised as is; json calls ``default`` only for a tensor or NumPy value left in it
    return json.dumps(stats, default=_tolist)


class UnitStore:
    """Units, fingerprints, run metadata and chunk claims of one folder (``directory/name``; ``directory=None``:
    in memory)."""

    def __init__(self, directory: str | Path | None, name: str = DB_NAME) -> None:
        self.path = Path(directory) / name if directory is not None else Path(":memory:")
        if directory is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._rows: list[tuple[str, tuple[Any, ...]]] | None = None   # the open chunk's writes (None: none open)
        self.db = sqlite3.connect(self.path if directory is not None else ":memory:", timeout=120,
                                  isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")           # per connection: no fsync per commit under WAL
        cols = [r[1] for r in self.db.execute("PRAGMA table_info(units)")]
        if cols and cols != list(_COLUMNS):
            self.db.close()
            raise RobustvitError(f"{self.path} was written by an older robustvit (another unit-store layout); "
                                 "finish that run with the version that started it, or use another --out folder")
        self.db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
        self.db.execute("CREATE TABLE IF NOT EXISTS fingerprints (scope TEXT PRIMARY KEY, value TEXT)")
        self.db.execute("CREATE TABLE IF NOT EXISTS units (task TEXT, part TEXT, chunk INTEGER, stats TEXT, "
                        "seconds REAL, finished REAL, worker TEXT, PRIMARY KEY (task, part, chunk))")
        self.db.execute("CREATE TABLE IF NOT EXISTS unreadable (idx INTEGER PRIMARY KEY, file TEXT)")
        self.db.execute("CREATE TABLE IF NOT EXISTS claims (tag TEXT, chunk INTEGER, worker TEXT, "
                        "PRIMARY KEY (tag, chunk))")
        self.db.execute("INSERT OR IGNORE INTO meta VALUES ('started', ?)", (now(),))

    # ------------------------------------------------------------------ settings
    def check_fingerprint(self, fingerprint: dict[str, Any], scope: str = RUN_SCOPE) -> None:
        """Remember the settings of ``scope``; refuse (one line) to mix units of other settings in this folder."""
        text = json.dumps(fingerprint, sort_keys=True)
        self.db.execute("INSERT OR IGNORE INTO fingerprints VALUES (?, ?)", (scope, text))
        old_text = self.fingerprint_text(scope)
        if old_text != text:
            old = json.loads(old_text or "{}")
            diff = sorted(k for k in set(old) | set(fingerprint) if old.get(k) != fingerprint.get(k))
            what = "a run" if scope == RUN_SCOPE else f"{scope} results of a run"
            random = any(str(d.get(k)).startswith(RANDOM_WEIGHTS) for k in diff for d in (old, fingerprint))
            hint = ("; the model has random weights, drawn anew by each command: save them (a checkpoint folder) "
                    "or give pretrained ones to resume" if random else "")
            raise RobustvitError(f"{self.path.parent} holds {what} with other settings ({', '.join(diff)}){hint}; "
                                 "use another --out folder, or delete it to start over")

    def fingerprint_text(self, scope: str = RUN_SCOPE) -> str | None:
        row = self.db.execute("SELECT value FROM fingerprints WHERE scope=?", (scope,)).fetchone()
        return None if row is None else row[0]

    def meta(self, key: str) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return None if row is None else row[0]

    def set_meta(self, key: str, value: str) -> None:
        self.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    # ------------------------------------------------------------------ units
    def done(self, task: str | None = None) -> set[tuple[str, str, int]]:
        """The stored units as (task, part, chunk), of one task or of all."""
        sql, args = "SELECT task, part, chunk FROM units", ()
        if task is not None:
            sql, args = sql + " WHERE task=?", (task,)
        return {(t, p, c) for t, p, c in self.db.execute(sql, args)}

    def put(self, task: str, part: str, chunk: int, stats: Any, seconds: float, worker: str = "") -> None:
        """Store a unit: committed at once, or inside :meth:`chunk` with the chunk's other units when it ends.
        Tensors in ``stats`` are stored as plain numbers (:func:`to_plain`)."""
        self._put(_INSERT, (task, part, int(chunk), _dumps(stats), float(seconds), time.time(), worker))

    def _put(self, sql: str, row: tuple[Any, ...]) -> None:
        if self._rows is not None:
            self._rows.append((sql, row))
        else:
            self.db.execute(sql, row)

    @contextmanager
    def chunk(self) -> Iterator[None]:
        """Commit the units :meth:`put` inside the block in one transaction when it ends (no write lock is held
        meanwhile: other processes keep writing). If the block raises, the units put so far are committed all the
        same, then the error goes on; a killed process loses them all. Units put here are not visible to
        :meth:`get` / :meth:`done` before the block ends. Nested blocks join the outermost."""
        if self._rows is not None:
            yield
            return
        self._rows = []
        try:
            yield
        except BaseException:
            rows, self._rows = self._rows, None
            with suppress(sqlite3.Error):
                self._write(rows)
            raise
        rows, self._rows = self._rows, None
        self._write(rows)

    def _write(self, rows: list[tuple[str, tuple[Any, ...]]]) -> None:
        if rows:
            with self.transaction():
                for sql, row in rows:
                    self.db.execute(sql, row)

    def get(self, task: str, part: str, chunk: int) -> Any:
        row = self.db.execute("SELECT stats FROM units WHERE task=? AND part=? AND chunk=?",
                              (task, part, int(chunk))).fetchone()
        return None if row is None else json.loads(row[0])

    def stats(self, task: str) -> dict[str, list[Any]]:
        """All stored statistics of a task: {part: [stats of each chunk, in chunk order]}."""
        out: dict[str, list[Any]] = {}
        for part, stats in self.db.execute("SELECT part, stats FROM units WHERE task=? ORDER BY chunk", (task,)):
            out.setdefault(part, []).append(json.loads(stats))
        return out

    def seconds(self, task: str) -> float:
        row = self.db.execute("SELECT SUM(seconds) FROM units WHERE task=?", (task,)).fetchone()
        return float(row[0] or 0.0)

    # ------------------------------------------------------------------ data facts
    def put_unreadable(self, images: dict[int, str | None]) -> None:
        """Record images of the run's data set that could not be read: {index in the data set: its file, None where
        the data set has no files}; committed with the chunk's units inside :meth:`chunk`, else at once."""
        for idx, file in images.items():
            self._put(_INSERT_UNREADABLE, (int(idx), file))

    def unreadable(self) -> dict[int, str | None]:
        """Every image recorded by :meth:`put_unreadable`: {index in the data set: file or None}."""
        return dict(self.db.execute("SELECT idx, file FROM unreadable"))

    # ------------------------------------------------------------------ claims
    def claim(self, tag: str, chunk: int, worker: str) -> bool:
        """Claim chunk ``chunk`` of the pass ``tag`` for ``worker``: True when this call took it, False when a
        worker holds it already (it runs it). Processes sharing the store run each chunk once, whichever is free."""
        cur = self.db.execute("INSERT OR IGNORE INTO claims VALUES (?, ?, ?)", (tag, int(chunk), worker))
        return cur.rowcount == 1

    def claims(self, tag: str | None = None) -> dict[tuple[str, int], str]:
        """The claims held: {(tag, chunk): worker}, of one pass or of all."""
        sql, args = "SELECT tag, chunk, worker FROM claims", ()
        if tag is not None:
            sql, args = sql + " WHERE tag=?", (tag,)
        return {(t, c): w for t, c, w in self.db.execute(sql, args)}

    def clear_claims(self) -> None:
        """Forget every claim: a run's first process calls it before the others start (``open_shared_store``),
        so the chunks a killed run had claimed but not finished are run again."""
        self.db.execute("DELETE FROM claims")

    # ------------------------------------------------------------------ shards
    def merge_from(self, other: "UnitStore") -> int:
        """Copy ``other``'s units and data facts here (a shard's): fingerprints must agree; returns the units
        copied. The earlier ``started`` of the two is kept."""
        for scope, text in other.db.execute("SELECT scope, value FROM fingerprints"):
            self.check_fingerprint(json.loads(text), scope)
        rows = other.db.execute(f"SELECT {', '.join(_COLUMNS)} FROM units").fetchall()
        with self.transaction():
            self.db.executemany(_INSERT, rows)
            self.db.executemany(_INSERT_UNREADABLE, other.db.execute("SELECT idx, file FROM unreadable").fetchall())
        started = [s for s in (self.meta("started"), other.meta("started")) if s]
        if started:
            self.set_meta("started", min(started))
        return len(rows)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> "UnitStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class MemoryStore(UnitStore):
    """The same store in memory (the Python API without an output folder)."""

    def __init__(self) -> None:
        super().__init__(None)

    def merge_from(self, other: UnitStore) -> int:
        raise RobustvitError("an in-memory store cannot merge shards; give an output folder")


__all__ = ["DB_NAME", "MemoryStore", "RUN_SCOPE", "UnitStore", "now", "to_plain"]
