"""The digits testbed: scikit-learn's 8x8 digits and the small classifier whose penultimate features
define the Frechet distance (metrics.py). Used by the metric and by the training scripts (train.py)."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def load_digits(split: str = "all") -> tuple[torch.Tensor, torch.Tensor]:
    """scikit-learn digits as images [n, 1, 8, 8] in [-1, 1] and labels [n]; split: all/train/test (last 297)."""
    from sklearn.datasets import load_digits as sklearn_digits

    data = sklearn_digits()
    images = torch.tensor(data.images, dtype=torch.float32).unsqueeze(1) / 8.0 - 1.0
    labels = torch.tensor(data.target, dtype=torch.long)
    if split == "train":
        return images[:1500], labels[:1500]
    if split == "test":
        return images[1500:], labels[1500:]
    return images, labels


class DigitsClassifier(torch.nn.Module):
    """A small CNN on 8x8 digits; `features` (16-d, penultimate) feed the Frechet distance."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(16, 32, 3, padding=1, stride=2)
        self.hidden = torch.nn.Linear(32 * 4 * 4, 16)
        self.head = torch.nn.Linear(16, 10)

    def features(self, images: torch.Tensor) -> torch.Tensor:  # [n, 1, 8, 8] -> [n, 16]
        h = F.silu(self.conv1(images))
        h = F.silu(self.conv2(h))
        return F.silu(self.hidden(h.flatten(1)))

    def forward(self, images: torch.Tensor) -> torch.Tensor:  # [n, 1, 8, 8] -> [n, 10] logits
        return self.head(self.features(images))
