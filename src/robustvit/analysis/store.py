"""The analysis unit store: one SQLite file per output folder; every finished unit is committed at once.

The same approach as the evaluation store (``robustvit.evaluate.store``, which analysis may not import:
it sits in a layer above): a unit is (analysis, part, chunk) with additive statistics; re-running the same
command skips stored units, so a run killed even with SIGKILL loses at most the unit in flight.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from robustvit.errors import RobustvitError

DB_NAME = "analysis_units.sqlite"


class UnitStore:
    def __init__(self, directory: str | Path) -> None:
        self.path = Path(directory) / DB_NAME
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.path, timeout=120, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("CREATE TABLE IF NOT EXISTS meta (analysis TEXT PRIMARY KEY, fingerprint TEXT)")
        self.db.execute("CREATE TABLE IF NOT EXISTS units (analysis TEXT, part TEXT, chunk INTEGER, stats TEXT, "
                        "seconds REAL, PRIMARY KEY (analysis, part, chunk))")

    def check_fingerprint(self, analysis: str, fingerprint: dict[str, Any]) -> None:
        """Remember an analysis's settings; refuse to mix units of different settings in one folder."""
        text = json.dumps(fingerprint, sort_keys=True)
        row = self.db.execute("SELECT fingerprint FROM meta WHERE analysis=?", (analysis,)).fetchone()
        if row is None:
            self.db.execute("INSERT OR IGNORE INTO meta VALUES (?, ?)", (analysis, text))
        elif row[0] != text:
            old = json.loads(row[0])
            diff = sorted(k for k in set(old) | set(fingerprint) if old.get(k) != fingerprint.get(k))
            raise RobustvitError(f"{self.path.parent} holds {analysis} results of a run with other settings "
                                 f"({', '.join(diff)}); use another --out folder, or delete it to start over")

    def done(self, analysis: str) -> set[tuple[str, int]]:
        return {(p, c) for p, c in self.db.execute("SELECT part, chunk FROM units WHERE analysis=?", (analysis,))}

    def put(self, analysis: str, part: str, chunk: int, stats: Any, seconds: float) -> None:
        self.db.execute("INSERT OR REPLACE INTO units VALUES (?, ?, ?, ?, ?)",
                        (analysis, part, chunk, json.dumps(stats), seconds))

    def get(self, analysis: str, part: str, chunk: int) -> Any:
        row = self.db.execute("SELECT stats FROM units WHERE analysis=? AND part=? AND chunk=?",
                              (analysis, part, chunk)).fetchone()
        return None if row is None else json.loads(row[0])

    def seconds(self, analysis: str) -> float:
        row = self.db.execute("SELECT SUM(seconds) FROM units WHERE analysis=?", (analysis,)).fetchone()
        return float(row[0] or 0.0)

    def close(self) -> None:
        self.db.close()


class MemoryStore(UnitStore):
    """The same interface in memory (the Python API without an output folder)."""

    def __init__(self) -> None:  # noqa: D107  (no super: no file)
        self.units: dict[tuple[str, str, int], Any] = {}
        self.secs: dict[str, float] = {}

    def check_fingerprint(self, analysis: str, fingerprint: dict[str, Any]) -> None:
        pass

    def done(self, analysis: str) -> set[tuple[str, int]]:
        return {(p, c) for a, p, c in self.units if a == analysis}

    def put(self, analysis: str, part: str, chunk: int, stats: Any, seconds: float) -> None:
        self.units[(analysis, part, chunk)] = json.loads(json.dumps(stats))
        self.secs[analysis] = self.secs.get(analysis, 0.0) + seconds

    def get(self, analysis: str, part: str, chunk: int) -> Any:
        return self.units.get((analysis, part, chunk))

    def seconds(self, analysis: str) -> float:
        return self.secs.get(analysis, 0.0)

    def close(self) -> None:
        pass


__all__ = ["DB_NAME", "MemoryStore", "UnitStore"]
