"""Continuous speculative diffusion (the second paper: Soen et al., "Accelerating Speculative
Diffusions via Block Verification"). See docs/continuous.md."""
from specdiff.continuous.gaussian import GaussianVerifyResult, LossyTemperatureWarning, acceptance_probability, gaussian_verify

__all__ = ["gaussian_verify", "GaussianVerifyResult", "LossyTemperatureWarning", "acceptance_probability"]
