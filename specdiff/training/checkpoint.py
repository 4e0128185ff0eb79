"""Training checkpoints: written atomically (a temporary name, then renamed), read back with the format checked.

Format `specdiff.training/1`: a `torch.save`d dict with `format`, `step` (optimiser steps done), `model` (the
trainable weights), `optimizer`, `generator` (the batch generator's state), `seconds`, `losses` (one per step),
`log` (probe records) and the recipe's own keys (e.g. distillation's kind, verifier, settings and d2t).
Checkpoints of the two trainers before it (no `format` key) are read as well: `specdiff zoo train`'s
(model, optimizer, step, log) and `specdiff distill`'s (the format above without `format` and `log`).
"""
from __future__ import annotations

import os
from pathlib import Path

import torch

FORMAT = "specdiff.training/1"
REQUIRED = ("model", "optimizer", "step")


def read(path: Path) -> dict | None:
    """The checkpoint at `path` (None if there is none), with the defaults of the older formats filled in."""
    if not Path(path).exists():
        return None
    state = torch.load(path, weights_only=False)
    if not isinstance(state, dict) or state.get("format", FORMAT) != FORMAT or any(k not in state for k in REQUIRED):
        found = state.get("format", f"keys {sorted(state)}") if isinstance(state, dict) else type(state).__name__
        raise ValueError(f"{path} is not a checkpoint this trainer resumes: expected format {FORMAT!r} (or the "
                         f"unversioned zoo/distill checkpoints with {', '.join(REQUIRED)}), found {found}; "
                         "use another output folder or --fresh")
    return {"generator": None, "seconds": 0.0, "losses": [], "log": [], **state, "format": FORMAT}


def write(path: Path, state: dict) -> None:
    """Saves `state` (with the format tag) under a temporary name, then renames it over `path`."""
    partial = Path(path).with_suffix(".partial")
    torch.save({**state, "format": FORMAT}, partial)
    os.replace(partial, path)
