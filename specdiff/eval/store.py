"""Results of long sweeps in SQLite: killed runs keep what they wrote, reruns resume, no duplicates.

One table, one row per (sweep, key): `sweep` names a sweep and its settings (change a setting and
it is a new sweep), `key` names one unit of work in it, and `payload` is the unit's result as JSON.
A unit is written in one transaction when it finishes, so a kill loses at most the units in
flight; the primary key makes a second write of the same unit a no-op.
"""
from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from pathlib import Path

SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
    sweep TEXT NOT NULL,
    key TEXT NOT NULL,
    payload TEXT NOT NULL,
    written REAL NOT NULL,
    PRIMARY KEY (sweep, key)
)
"""


def settings_id(settings: dict) -> str:
    """A short stable id of a sweep's settings (sorted JSON, sha1)."""
    return hashlib.sha1(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]


class ResultStore:
    """A SQLite file of finished units of work. Only one process should write (the sweep's driver)."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.connection = sqlite3.connect(str(self.path), timeout=30)
        self.connection.execute("PRAGMA journal_mode=WAL")
        with self.connection:
            self.connection.execute(SCHEMA)

    def done(self, sweep: str) -> set[str]:
        """The keys of the units of `sweep` already written."""
        rows = self.connection.execute("SELECT key FROM results WHERE sweep = ?", (sweep,))
        return {key for (key,) in rows}

    def put(self, sweep: str, key: str, payload: dict) -> bool:
        """Write one finished unit; False (and nothing written) if it was already there."""
        with self.connection:
            cursor = self.connection.execute(
                "INSERT OR IGNORE INTO results (sweep, key, payload, written) VALUES (?, ?, ?, ?)",
                (sweep, key, json.dumps(payload), time.time()),
            )
        return cursor.rowcount == 1

    def load(self, sweep: str) -> dict[str, dict]:
        """key -> payload for every unit of `sweep` written so far."""
        rows = self.connection.execute("SELECT key, payload FROM results WHERE sweep = ?", (sweep,))
        return {key: json.loads(payload) for key, payload in rows}

    def forget(self, sweep: str) -> int:
        """Delete a sweep's units (a fresh start); returns how many."""
        with self.connection:
            return self.connection.execute("DELETE FROM results WHERE sweep = ?", (sweep,)).rowcount

    def close(self) -> None:
        self.connection.close()
