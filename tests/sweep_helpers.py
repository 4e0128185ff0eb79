"""Helpers of the sweep tests: a tiny config, a synthetic store (no models), and a unit function the
runner's worker processes can import."""
from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass

TINY_CONFIG = """\
[models]
drafter = "masked-drafter"
verifier = "verifier"

[task]
name = "arith"
problems = {problems}
max_new_tokens = 40

[grid]
steps = {steps}
rule = ["linear"]
lam = [0.0, 0.5]
block_size = [6]
"""

TIMING = ("wall_s", "draft_s", "verify_s", "written")


def write_config(path, problems: int = 2, steps=(1,)) -> str:
    path.write_text(TINY_CONFIG.format(problems=problems, steps=list(steps)))
    return str(path)


def store_rows(path, timing: bool = False) -> list[tuple]:
    """Every results row (without the timing columns unless asked), sorted."""
    connection = sqlite3.connect(path)
    columns = [row[1] for row in connection.execute("PRAGMA table_info(results)")]
    keep = [c for c in columns if timing or c not in TIMING]
    rows = sorted(connection.execute(f"SELECT {', '.join(keep)} FROM results").fetchall())
    connection.close()
    return rows


@dataclass(frozen=True)
class Item:
    key: str
    group: str


def pid_unit(unit: Item, settings: dict) -> dict:
    """A unit function: which process ran the unit."""
    return {"key": unit.key, "pid": os.getpid(), "scale": settings["scale"]}
