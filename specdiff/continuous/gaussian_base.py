"""What both paths of one round of speculative DDPM verification share: the log-space constants and the
result type. `gaussian.py` (the tensor path) and `gaussian_host.py` (the float64 host path for a few CPU
rows) import it, so that neither imports the other at load time."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

LOG_2 = math.log(2.0)
LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


@dataclass
class GaussianVerifyResult:
    num_accepted: torch.Tensor  # [b] long, tau in 0..gamma
    next_state: torch.Tensor  # [b, d] the state of step tau + 1
    rejected: torch.Tensor  # [b] bool, next_state is a residual draw
    lossless: bool  # False when temperature != 1 (Appendix I)
