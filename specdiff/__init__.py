"""specdiff: speculative diffusion.

Draft with a cheap diffusion model, verify with an expensive target model, exactly or with a
leniency the user controls. See README.md and docs/.

The public names load on first use, so `specdiff --help` does not pay for importing torch.
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"

_PUBLIC = {
    "verify": "specdiff.verify",
    "VerifyResult": "specdiff.verify",
    "Lossless": "specdiff.acceptance",
    "Linear": "specdiff.acceptance",
    "TVBudget": "specdiff.acceptance",
    "Cactus": "specdiff.acceptance",
}
__all__ = list(_PUBLIC)


def __getattr__(name: str):
    if name in _PUBLIC:
        value = getattr(importlib.import_module(_PUBLIC[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'specdiff' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + __all__)
