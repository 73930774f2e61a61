"""The result store: one SQLite file per evaluation folder; every finished unit is committed at once.

A unit is (suite key, part, chunk). Re-running the same command skips stored units, so a run killed
even with SIGKILL loses at most the units in flight. Several processes (``torchrun`` ranks) may write
to the same store.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

from robustvit.errors import RobustvitError

DB_NAME = "units.sqlite"


class ResultStore:
    def __init__(self, directory: str | Path) -> None:
        self.path = Path(directory) / DB_NAME
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.path, timeout=120, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
        self.db.execute("CREATE TABLE IF NOT EXISTS units (suite TEXT, part TEXT, chunk INTEGER, stats TEXT, "
                        "seconds REAL, finished REAL, PRIMARY KEY (suite, part, chunk))")

    def check_fingerprint(self, fingerprint: dict[str, Any]) -> None:
        """Remember the run's settings; refuse to mix results of different settings in one folder."""
        text = json.dumps(fingerprint, sort_keys=True)
        row = self.db.execute("SELECT value FROM meta WHERE key='fingerprint'").fetchone()
        if row is None:
            self.db.execute("INSERT OR IGNORE INTO meta VALUES ('fingerprint', ?)", (text,))
            self.db.execute("INSERT OR IGNORE INTO meta VALUES ('started', ?)", (time.strftime("%Y-%m-%dT%H:%M:%S%z"),))
        elif row[0] != text:
            old = json.loads(row[0])
            diff = sorted(k for k in set(old) | set(fingerprint) if old.get(k) != fingerprint.get(k))
            raise RobustvitError(f"{self.path.parent} holds results of a run with other settings ({', '.join(diff)}); "
                                 "use another --out folder, or delete it to start over")

    def meta(self, key: str) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return None if row is None else row[0]

    def done(self) -> set[tuple[str, str, int]]:
        return {(s, p, c) for s, p, c in self.db.execute("SELECT suite, part, chunk FROM units")}

    def put(self, suite: str, part: str, chunk: int, stats: dict[str, Any], seconds: float) -> None:
        self.db.execute("INSERT OR REPLACE INTO units VALUES (?, ?, ?, ?, ?, ?)",
                        (suite, part, chunk, json.dumps(stats), seconds, time.time()))

    def stats(self, suite: str) -> dict[str, list[dict[str, Any]]]:
        """All stored statistics of a suite: {part: [stats of each chunk, in chunk order]}."""
        out: dict[str, list[dict[str, Any]]] = {}
        for part, stats in self.db.execute("SELECT part, stats FROM units WHERE suite=? ORDER BY chunk", (suite,)):
            out.setdefault(part, []).append(json.loads(stats))
        return out

    def seconds(self, suite: str) -> float:
        row = self.db.execute("SELECT SUM(seconds) FROM units WHERE suite=?", (suite,)).fetchone()
        return float(row[0] or 0.0)

    def close(self) -> None:
        self.db.close()
