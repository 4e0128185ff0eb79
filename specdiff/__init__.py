"""specdiff: speculative diffusion.

Draft with a cheap diffusion model, verify with an expensive target model, exactly or with a
leniency the user controls. See README.md and docs/.

The public names load on first use, so `specdiff --help` does not pay for importing torch; the
TYPE_CHECKING block below lists them for readers and type checkers.
"""
from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING

from specdiff.lazy import lazy_exports

__version__ = "0.1.0"

if TYPE_CHECKING:
    from specdiff.acceptance import Cactus, Gated, Linear, Lossless, TVBudget, Typical
    from specdiff.drafters.autoregressive import AutoregressiveDrafter
    from specdiff.drafters.base import Draft, Drafter
    from specdiff.drafters.block import BlockDiffusionDrafter
    from specdiff.drafters.dflash import DFlashDrafter
    from specdiff.drafters.lookup import PromptLookupDrafter
    from specdiff.drafters.masked import MaskedDiffusionDrafter
    from specdiff.drafters.uniform import UniformDiffusionDrafter
    from specdiff.engine.generate import GenerationOutput, SpeculativeGenerator
    from specdiff.engine.verifier import Verifier
    from specdiff.verify import VerifyResult, verify

_PUBLIC = {
    "verify": "specdiff.verify",
    "VerifyResult": "specdiff.verify",
    "Lossless": "specdiff.acceptance",
    "Linear": "specdiff.acceptance",
    "TVBudget": "specdiff.acceptance",
    "Cactus": "specdiff.acceptance",
    "Typical": "specdiff.acceptance",
    "Gated": "specdiff.acceptance",
    "Verifier": "specdiff.engine.verifier",
    "PromptLookupDrafter": "specdiff.drafters.lookup",
    "SpeculativeGenerator": "specdiff.engine.generate",
    "GenerationOutput": "specdiff.engine.generate",
    "Drafter": "specdiff.drafters.base",
    "Draft": "specdiff.drafters.base",
    "MaskedDiffusionDrafter": "specdiff.drafters.masked",
    "AutoregressiveDrafter": "specdiff.drafters.autoregressive",
    "UniformDiffusionDrafter": "specdiff.drafters.uniform",
    "BlockDiffusionDrafter": "specdiff.drafters.block",
    "DFlashDrafter": "specdiff.drafters.dflash",
}
__all__ = list(_PUBLIC)
__getattr__ = lazy_exports(globals(), _PUBLIC)


class _Package(types.ModuleType):
    """The package module. Importing the submodule `specdiff.verify` (as the engine does) makes Python
    bind it to the package's name `verify`, which is the public function: keep the function."""

    def __setattr__(self, name, value):
        if isinstance(value, types.ModuleType) and _PUBLIC.get(name) == value.__name__:
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __dir__():
    return sorted(list(globals()) + __all__)
