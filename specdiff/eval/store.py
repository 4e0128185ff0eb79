"""Results of long sweeps in SQLite: killed runs keep what they wrote, reruns resume, no duplicates.
(This is the continuous bench's store of units; a language sweep's rows live in `sweepstore`, which
shares `open_checked`.)

One table, one row per (sweep, key): `sweep` names a sweep and its settings (change a setting and
it is a new sweep), `key` names one unit of work in it, and `payload` is the unit's result as JSON.
A unit is written in one transaction when it finishes, so a kill loses at most the units in
flight; the primary key makes a second write of the same unit a no-op.

A damaged or foreign file is refused when the store opens, before any work is done (a `StoreError`,
a ValueError that names the file and says how to start fresh): the file must be SQLite, pass
`PRAGMA quick_check`, and hold this schema (`PRAGMA user_version` = SCHEMA_VERSION, the results table
with its columns). A file written before the version was recorded (version 0, the same table) is
adopted and stamped.
"""
from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from pathlib import Path

SCHEMA_VERSION = 1
COLUMNS = ("sweep", "key", "payload", "written")
SQLITE_MAGIC = b"SQLite format 3\x00"
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


class StoreError(ValueError):
    """The results file cannot be used: not SQLite, damaged, or another schema."""

    def __init__(self, path: Path, problem: str, flag: str = "--db"):
        super().__init__(
            f"results store {path}: {problem}. Nothing was run. To start fresh, move it aside or delete it "
            f"(e.g. `mv {path} {path}.bad`; every unit is then computed again), or give another file with {flag}"
        )


def open_checked(path: Path, flag: str = "--db") -> tuple[sqlite3.Connection, bool]:
    """A connection to `path` after the checks every store shares: not a folder, SQLite's magic
    header, `PRAGMA quick_check`. Returns (connection, whether the file held data); StoreError
    (naming `flag` as the way out) otherwise. The caller checks its own schema."""
    if path.is_dir():
        raise StoreError(path, "is a folder, not a file", flag)
    path.parent.mkdir(parents=True, exist_ok=True)
    existing = path.exists() and path.stat().st_size > 0
    if existing:
        with open(path, "rb") as handle:
            if handle.read(len(SQLITE_MAGIC)) != SQLITE_MAGIC:
                raise StoreError(path, "is not a SQLite file", flag)
    connection = sqlite3.connect(str(path), timeout=30)
    if existing:
        try:
            problems = [row[0] for row in connection.execute("PRAGMA quick_check")]
        except sqlite3.DatabaseError as error:
            connection.close()
            raise StoreError(path, f"is damaged ({error})", flag) from None
        if problems != ["ok"]:
            connection.close()
            raise StoreError(path, f"is damaged (PRAGMA quick_check: {'; '.join(problems[:3])})", flag)
    return connection, existing


class ResultStore:
    """A SQLite file of finished units of work. Only one process should write (the sweep's driver).
    Opening checks the file (see the module docstring) and raises StoreError if it is unusable."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.connection, existing = open_checked(self.path)
        try:
            self._check_and_create(existing)
        except sqlite3.DatabaseError as error:
            self.connection.close()
            raise StoreError(self.path, f"is damaged ({error})") from None
        except StoreError:
            self.connection.close()
            raise

    def _check_and_create(self, existing: bool) -> None:
        """quick_check and the schema of an existing file; then WAL mode and the table."""
        if existing:
            version = self.connection.execute("PRAGMA user_version").fetchone()[0]
            tables = {name for (name,) in self.connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            columns = tuple(row[1] for row in self.connection.execute("PRAGMA table_info(results)"))
            if tables and columns != COLUMNS:  # another kind of store first: its own version means nothing here
                found = f"table results with columns {columns}" if columns else f"tables {sorted(tables)}"
                raise StoreError(self.path, f"has another schema ({found}; expected table results {COLUMNS})")
            if version not in (0, SCHEMA_VERSION):
                raise StoreError(self.path, f"has schema version {version}; this specdiff reads version {SCHEMA_VERSION}")
            if columns:
                self._check_payloads()
        self.connection.execute("PRAGMA journal_mode=WAL")
        with self.connection:
            self.connection.execute(SCHEMA)
            self.connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _check_payloads(self) -> None:
        """Every payload decodes (UTF-8 text, then JSON): quick_check sees the b-tree structure, not a
        damaged byte inside a row, which would otherwise surface only when a sweep loads its results."""
        self.connection.text_factory = bytes
        try:
            for sweep, key, payload in self.connection.execute("SELECT sweep, key, payload FROM results"):
                try:
                    json.loads(payload.decode("utf-8"))
                except (UnicodeDecodeError, ValueError) as error:
                    raise StoreError(self.path, f"is damaged: the result of unit {key.decode(errors='replace')!r} of sweep "
                                                f"{sweep.decode(errors='replace')!r} is "
                                                f"unreadable ({type(error).__name__})") from None
        finally:
            self.connection.text_factory = str

    def done(self, sweep: str) -> set[str]:
        """The keys of the units of `sweep` already written."""
        rows = self.connection.execute("SELECT key FROM results WHERE sweep = ?", (sweep,))
        return {key for (key,) in rows}

    def put(self, sweep: str, key: str, payload: dict) -> bool:
        """Write one finished unit; False (and nothing written) if it was already there."""
        try:
            with self.connection:
                cursor = self.connection.execute(
                    "INSERT OR IGNORE INTO results (sweep, key, payload, written) VALUES (?, ?, ?, ?)",
                    (sweep, key, json.dumps(payload), time.time()),
                )
        except sqlite3.DatabaseError as error:  # damaged after it was opened
            raise StoreError(self.path, f"could not be written ({error})") from None
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
