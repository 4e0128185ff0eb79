"""Sampling settings as transformers' generate applies them: temperature, then top-k, then top-p.

`sampling_logits` returns the logits actually sampled from (-inf where a token is excluded), which
is what `specdiff.verify(..., inputs="logits")` takes, and `sampling_probs` their softmax.
"""
from __future__ import annotations

import torch


def check_sampling(temperature: float, top_p: float, top_k: int, who: str) -> None:
    """Clear errors for sampling settings out of range."""
    if not temperature >= 0:
        raise ValueError(f"{who}: temperature must be >= 0, got {temperature}")
    if not 0 < top_p <= 1:
        raise ValueError(f"{who}: top_p must be in (0, 1], got {top_p}")
    if int(top_k) != top_k or top_k < 0:
        raise ValueError(f"{who}: top_k must be an integer >= 0 (0: off), got {top_k}")


def filter_logits(logits: torch.Tensor, top_p: float = 1.0, top_k: int = 0) -> torch.Tensor:
    """Top-k then nucleus (top-p) filtering of logits [..., V]: removed entries become -inf.
    Top-p keeps the smallest set of most likely tokens whose mass reaches top_p; the most likely
    token always survives."""
    if top_k and top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits = logits.sort(dim=-1, descending=True).values
        sorted_probs = sorted_logits.softmax(-1)
        kept = (sorted_probs.cumsum(-1) - sorted_probs < top_p).sum(-1, keepdim=True)  # >= 1: mass before < top_p
        cutoff = sorted_logits.gather(-1, kept - 1)  # the least likely kept logit
        logits = logits.masked_fill(logits < cutoff, float("-inf"))
    return logits


def sampling_logits(logits: torch.Tensor, temperature: float, top_p: float = 1.0, top_k: int = 0) -> torch.Tensor:
    """Logits [..., V] -> the logits sampled from. temperature 0 is greedy: 0 on the argmax, -inf elsewhere."""
    logits = logits.float()
    if temperature == 0:
        greedy = torch.full_like(logits, float("-inf"))
        return greedy.scatter(-1, logits.argmax(-1, keepdim=True), 0.0)
    return filter_logits(logits / temperature, top_p, top_k)


def sampling_probs(logits: torch.Tensor, temperature: float, top_p: float = 1.0, top_k: int = 0) -> torch.Tensor:
    """Logits [..., V] -> the distribution sampled from [..., V]."""
    return torch.softmax(sampling_logits(logits, temperature, top_p, top_k), dim=-1)


class NonFiniteLogits(ValueError):
    """A model's logits hold NaN or inf; names the model and, once known, the round."""

    def __init__(self, who: str, kind: str, round_index: int | None = None):
        self.who, self.kind = who, kind
        where = "" if round_index is None else f" in round {round_index}"
        super().__init__(f"the {who}'s logits hold {kind}{where}; check the model's weights and dtype")


def check_finite(logits: torch.Tensor, who: str, round_index: int | None = None) -> None:
    """Raises NonFiniteLogits when a model's raw logits hold NaN or inf."""
    if not bool(torch.isfinite(logits).all()):
        raise NonFiniteLogits(who, "NaN" if bool(torch.isnan(logits).any()) else "inf", round_index)
