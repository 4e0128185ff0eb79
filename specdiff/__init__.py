"""specdiff: speculative diffusion.

Draft with a cheap diffusion model, verify with an expensive target model, exactly or with a
leniency the user controls. See README.md and docs/.

The public names load on first use, so `specdiff --help` does not pay for importing torch.
"""
from __future__ import annotations

from specdiff.lazy import lazy_exports

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
__getattr__ = lazy_exports(globals(), _PUBLIC)


def __dir__():
    return sorted(list(globals()) + __all__)
