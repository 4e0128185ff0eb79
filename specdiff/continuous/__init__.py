"""Continuous speculative diffusion (the second paper: Soen et al., "Accelerating Speculative
Diffusions via Block Verification"). See docs/continuous.md.

Names load on first use, so the command line does not import torch just to list subcommands."""
from __future__ import annotations

from specdiff.lazy import lazy_exports

_PUBLIC = {
    "gaussian_verify": "specdiff.continuous.gaussian",
    "GaussianVerifyResult": "specdiff.continuous.gaussian",
    "LossyTemperatureWarning": "specdiff.continuous.gaussian",
    "acceptance_probability": "specdiff.continuous.gaussian",
    "from_diffusers": "specdiff.continuous.pipelines",
    "diffusers_target": "specdiff.continuous.pipelines",
    "DiffusersTarget": "specdiff.continuous.pipelines",
}
__all__ = list(_PUBLIC)
__getattr__ = lazy_exports(globals(), _PUBLIC)
