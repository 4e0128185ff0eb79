"""Continuous speculative diffusion (the second paper: Soen et al., "Accelerating Speculative
Diffusions via Block Verification"). See docs/continuous.md.

Names load on first use, so the command line does not import torch just to list subcommands."""
from __future__ import annotations

import importlib

_PUBLIC = {
    "gaussian_verify": "specdiff.continuous.gaussian",
    "GaussianVerifyResult": "specdiff.continuous.gaussian",
    "LossyTemperatureWarning": "specdiff.continuous.gaussian",
    "acceptance_probability": "specdiff.continuous.gaussian",
}
__all__ = list(_PUBLIC)


def __getattr__(name: str):
    if name in _PUBLIC:
        value = getattr(importlib.import_module(_PUBLIC[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'specdiff.continuous' has no attribute {name!r}")
