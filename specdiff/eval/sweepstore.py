"""The store of a language sweep: one SQLite file per sweep, one row per (configuration, problem).

Tables (schema version SCHEMA_VERSION, also in `PRAGMA user_version`; WAL mode):

- `sweep_meta(key, value)`: `kind` = "specdiff-sweep", `schema_version`, `settings` (the sweep's
  canonical settings as JSON: models, task, run options and grid), `settings_id` (their sha1), `source`
  (the TOML text that made them, for the report), `created`.
- `configurations(config_id, position, name, effort, params)`: one per grid point; `params` is JSON.
- `results(config_id, problem_id, ...)` with UNIQUE (config_id, problem_id): the generated text,
  correctness, token counts (prompt and new), rounds, the accepted length of every round (JSON list),
  draft / verify / wall seconds, whether the configuration is exact, when it was written, and (schema
  version 2) `calls`: the verifier's and the drafter's forwards and tokens processed (JSON), the
  noise-free cost axis (`specdiff frontier --cost calls`).
- `artifacts(name, payload, written)`: results computed from the sweep (e.g. a calibration), JSON.

A row is written in one transaction when its problem finishes, so a kill loses at most the problems
in flight; UNIQUE makes a second write of the same (configuration, problem) a no-op.

A version-1 store (no `calls`) is read as it is, and gains the column when a sweep opens it to write
(its older rows keep `calls` NULL). A file that is not this kind of store, has a schema version this
specdiff does not know, or was written by other settings is refused when it opens (a `StoreError` naming what differs), so that two sweeps are never mixed.
"""
from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

from specdiff.eval.store import StoreError, open_checked, settings_id

KIND = "specdiff-sweep"
SCHEMA_VERSION = 2
FLAG = "--store"
V1_COLUMNS = ("config_id", "problem_id", "problem_index", "text", "correct", "extracted", "prompt_tokens",
              "new_tokens", "rounds", "accepted", "draft_s", "verify_s", "wall_s", "exact", "written")
RESULT_COLUMNS = V1_COLUMNS + ("calls",)
COLUMNS_OF_VERSION = {"1": V1_COLUMNS, "2": RESULT_COLUMNS}
SCHEMA = """
CREATE TABLE IF NOT EXISTS sweep_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS configurations (
    config_id TEXT PRIMARY KEY, position INTEGER NOT NULL, name TEXT NOT NULL, effort TEXT NOT NULL,
    params TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS results (
    config_id TEXT NOT NULL REFERENCES configurations (config_id),
    problem_id TEXT NOT NULL,
    problem_index INTEGER NOT NULL,
    text TEXT,
    correct INTEGER,
    extracted TEXT,
    prompt_tokens INTEGER,
    new_tokens INTEGER NOT NULL,
    rounds INTEGER,
    accepted TEXT,
    draft_s REAL,
    verify_s REAL,
    wall_s REAL NOT NULL,
    exact INTEGER,
    written REAL NOT NULL,
    calls TEXT,
    UNIQUE (config_id, problem_id)
);
CREATE TABLE IF NOT EXISTS artifacts (name TEXT PRIMARY KEY, payload TEXT NOT NULL, written REAL NOT NULL);
"""


def differing_keys(a: dict, b: dict, prefix: str = "") -> list[str]:
    """Dotted paths of the keys whose values differ between two nested dicts."""
    keys = []
    for key in sorted(set(a) | set(b)):
        x, y = a.get(key), b.get(key)
        if isinstance(x, dict) and isinstance(y, dict):
            keys += differing_keys(x, y, f"{prefix}{key}.")
        elif x != y:
            keys.append(prefix + key)
    return keys


class SweepStore:
    """A sweep's SQLite file. `settings` (the canonical settings dict) opens it for writing: a new
    file is stamped with them, an existing one must hold the same. Without settings the file is
    opened to read (frontier, report) and must already be a sweep store. Only one process writes."""

    def __init__(self, path: Path | str, settings: dict | None = None, source: str = ""):
        self.path = Path(path)
        if settings is None and not (self.path.exists() and self.path.stat().st_size > 0):
            raise StoreError(self.path, "does not exist or is empty: run `specdiff sweep CONFIG.toml --store "
                                        f"{self.path}` first", FLAG)
        self.connection, existing = open_checked(self.path, FLAG)
        self.connection.row_factory = sqlite3.Row
        try:
            if existing:
                self._check(settings)
            else:
                self._create(settings, source)
        except sqlite3.DatabaseError as error:
            self.connection.close()
            raise StoreError(self.path, f"is damaged ({error})", FLAG) from None
        except StoreError:
            self.connection.close()
            raise
        self.settings = json.loads(self.meta("settings"))

    def _refuse(self, problem: str):
        raise StoreError(self.path, problem, FLAG)

    def _check(self, settings: dict | None) -> None:
        tables = {name for (name,) in self.connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "sweep_meta" not in tables:
            columns = tuple(row[1] for row in self.connection.execute("PRAGMA table_info(results)"))
            what = "a results store of another kind (the continuous bench's)" if columns == (
                "sweep", "key", "payload", "written") else f"another schema (tables {sorted(tables)})"
            self._refuse(f"is {what}, not a sweep store")
        if self.meta("kind") != KIND:
            self._refuse(f"is not a sweep store (kind {self.meta('kind')!r})")
        version = self.meta("schema_version")
        if version not in COLUMNS_OF_VERSION:
            self._refuse(f"has sweep schema version {version}; this specdiff reads versions "
                         f"{', '.join(COLUMNS_OF_VERSION)}")
        columns = tuple(row[1] for row in self.connection.execute("PRAGMA table_info(results)"))
        if columns != COLUMNS_OF_VERSION[version]:
            self._refuse(f"has another results table (columns {columns})")
        if settings is not None and self.meta("settings_id") != settings_id(settings):
            stored = json.loads(self.meta("settings"))
            differ = ", ".join(differing_keys(stored, settings)) or "the settings"
            self._refuse(f"was written by another sweep configuration (differs in: {differ}); results of two "
                         "configurations are never mixed. Give this config its own store")
        self.connection.execute("PRAGMA journal_mode=WAL")
        if settings is not None and version == "1":  # a sweep resumes a version-1 store: add the calls column
            with self.connection:
                self.connection.execute("ALTER TABLE results ADD COLUMN calls TEXT")
                self.connection.execute("UPDATE sweep_meta SET value = ? WHERE key = 'schema_version'",
                                        (str(SCHEMA_VERSION),))
                self.connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _create(self, settings: dict, source: str) -> None:
        self.connection.execute("PRAGMA journal_mode=WAL")
        with self.connection:
            self.connection.executescript(SCHEMA)
            meta = dict(kind=KIND, schema_version=str(SCHEMA_VERSION), settings=json.dumps(settings, sort_keys=True),
                        settings_id=settings_id(settings), source=source, created=str(time.time()))
            self.connection.executemany("INSERT INTO sweep_meta VALUES (?, ?)", meta.items())
            self.connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def meta(self, key: str) -> str | None:
        row = self.connection.execute("SELECT value FROM sweep_meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else row[0]

    def add_configurations(self, configurations: list[dict]) -> None:
        """Records the grid: dicts with config_id, name, effort and params (idempotent)."""
        with self.connection:
            self.connection.executemany(
                "INSERT OR IGNORE INTO configurations VALUES (?, ?, ?, ?, ?)",
                [(c["config_id"], i, c["name"], c["effort"], json.dumps(c["params"], sort_keys=True))
                 for i, c in enumerate(configurations)])

    def configurations(self) -> list[dict]:
        rows = self.connection.execute("SELECT * FROM configurations ORDER BY position")
        return [dict(config_id=r["config_id"], name=r["name"], effort=r["effort"], params=json.loads(r["params"]))
                for r in rows]

    def done(self) -> set[tuple[str, str]]:
        """(config_id, problem_id) of every row written."""
        return {(a, b) for a, b in self.connection.execute("SELECT config_id, problem_id FROM results")}

    def put(self, row: dict) -> bool:
        """Writes one (configuration, problem) row; False (nothing written) if it was already there."""
        values = dict(row, accepted=json.dumps(row.get("accepted")) if row.get("accepted") is not None else None,
                      calls=json.dumps(row["calls"], sort_keys=True) if row.get("calls") is not None else None,
                      written=time.time())
        try:
            with self.connection:
                cursor = self.connection.execute(
                    f"INSERT OR IGNORE INTO results ({', '.join(RESULT_COLUMNS)}) "
                    f"VALUES ({', '.join('?' * len(RESULT_COLUMNS))})", [values.get(c) for c in RESULT_COLUMNS])
        except sqlite3.DatabaseError as error:
            raise StoreError(self.path, f"could not be written ({error})", FLAG) from None
        return cursor.rowcount == 1

    def rows(self, config_id: str | None = None) -> list[dict]:
        """Result rows (all, or of one configuration) in (configuration, problem) order; `accepted` decoded."""
        query = "SELECT * FROM results" + (" WHERE config_id = ?" if config_id else "")
        rows = self.connection.execute(query + " ORDER BY config_id, problem_index", (config_id,) if config_id else ())
        out = []
        for r in rows:
            record = dict(r)
            record["accepted"] = json.loads(record["accepted"]) if record["accepted"] is not None else None
            record["calls"] = json.loads(record["calls"]) if record.get("calls") is not None else None
            out.append(record)
        return out

    def put_artifact(self, name: str, payload: dict) -> None:
        """Stores (or replaces) a result computed from the sweep, e.g. "calibration"."""
        with self.connection:
            self.connection.execute("INSERT OR REPLACE INTO artifacts VALUES (?, ?, ?)",
                                    (name, json.dumps(payload), time.time()))

    def artifacts(self) -> dict[str, dict]:
        return {name: json.loads(payload) for name, payload in
                self.connection.execute("SELECT name, payload FROM artifacts ORDER BY name")}

    def close(self) -> None:
        self.connection.close()
