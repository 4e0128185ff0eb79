"""specdiff: speculative diffusion.

Draft with a cheap diffusion model, verify with an expensive target model, exactly or with a
leniency the user controls. See README.md and docs/.
"""
from specdiff.acceptance import Cactus, Linear, Lossless, TVBudget
from specdiff.verify import VerifyResult, verify

__all__ = ["verify", "VerifyResult", "Lossless", "Linear", "TVBudget", "Cactus"]
__version__ = "0.1.0"
