"""Quality and speed metrics for continuous speculative sampling.

- Frechet distance (Heusel et al. 2017) between Gaussian fits of classifier features; the
  classifier is the project's small digits CNN (digits.py), since Inception cannot be downloaded.
- Two-sample tests on random projections (used by the exactness tests).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from specdiff.continuous.models import WEIGHTS_DIR


def frechet_distance(features_a: np.ndarray, features_b: np.ndarray) -> float:
    """|mu_a - mu_b|^2 + Tr(C_a + C_b - 2 (C_a C_b)^{1/2}) for features [n, f] (Heusel et al. 2017)."""
    from scipy import linalg

    mu_a, mu_b = features_a.mean(0), features_b.mean(0)
    cov_a = np.cov(features_a, rowvar=False)
    cov_b = np.cov(features_b, rowvar=False)
    sqrt_product = linalg.sqrtm(cov_a @ cov_b)
    sqrt_product = np.real(sqrt_product)
    return float(((mu_a - mu_b) ** 2).sum() + np.trace(cov_a + cov_b - 2 * sqrt_product))


def load_classifier(path: Path | str = WEIGHTS_DIR / "digits_classifier.safetensors"):
    from safetensors.torch import load_file

    from specdiff.continuous.digits import DigitsClassifier

    model = DigitsClassifier()
    model.load_state_dict(load_file(str(path)))
    return model.eval().requires_grad_(False)


def digit_features(images: torch.Tensor, classifier=None) -> np.ndarray:
    """Classifier features [n, 16] of digits given as [n, 64] or [n, 1, 8, 8] in [-1, 1]."""
    classifier = classifier or load_classifier()
    with torch.inference_mode():
        return classifier.features(images.reshape(-1, 1, 8, 8).float().clamp(-1, 1)).double().numpy()


def digits_frechet_distance(samples: torch.Tensor, classifier=None) -> float:
    """Frechet distance between generated digits [n, 64] and all 1797 scikit-learn digits."""
    from specdiff.continuous.digits import load_digits

    classifier = classifier or load_classifier()
    real, _ = load_digits("all")
    return frechet_distance(digit_features(samples, classifier), digit_features(real, classifier))


def projection_two_sample_pvalues(
    samples_a: torch.Tensor,  # [n, d]
    samples_b: torch.Tensor,  # [m, d]
    num_projections: int = 8,
    seed: int = 0,
) -> list[float]:
    """Two-sample Kolmogorov-Smirnov p-values along random unit directions."""
    from scipy import stats

    generator = torch.Generator().manual_seed(seed)
    directions = torch.randn(samples_a.shape[1], num_projections, generator=generator, dtype=torch.float64)
    directions = directions / directions.norm(dim=0, keepdim=True)
    a = (samples_a.double() @ directions).numpy()
    b = (samples_b.double() @ directions).numpy()
    return [float(stats.ks_2samp(a[:, j], b[:, j]).pvalue) for j in range(num_projections)]
