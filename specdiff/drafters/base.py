"""What every drafter provides: `draft(prefix, prefix_mask, block_size) -> Draft`.

A draft is B proposed tokens per row and, per position, the distribution each was sampled from
(q, what `specdiff.verify` takes as `draft_probs`; pass None there for point-mass verification).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Draft:
    tokens: torch.Tensor  # [b, B] drafted token ids
    probs: torch.Tensor | None  # [b, B, V] distribution each token was sampled from, or None


class Drafter:
    """Base class: proposes `block_size` tokens after each row of a left-padded prefix."""

    def draft(self, prefix: torch.Tensor, prefix_mask: torch.Tensor | None, block_size: int,
              generator: torch.Generator | None = None) -> Draft:
        raise NotImplementedError


def filter_logits(logits: torch.Tensor, top_p: float = 1.0, top_k: int = 0) -> torch.Tensor:
    """Top-k then nucleus (top-p) filtering of logits [..., V]: removed entries become -inf.
    The most likely token always survives."""
    if top_k and top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        cumulative = sorted_logits.softmax(-1).cumsum(-1)
        remove_sorted = cumulative - sorted_logits.softmax(-1) >= top_p  # keep the smallest set reaching top_p
        remove = torch.zeros_like(remove_sorted).scatter(-1, order, remove_sorted)
        logits = logits.masked_fill(remove, float("-inf"))
    return logits


def cache_kwargs(model, cache) -> dict:
    """Keyword arguments that pass a KV cache to a transformers model's forward: `cache=` in
    transformers >= 5.24 (`past_key_values` is deprecated there), `past_key_values=` before."""
    import inspect

    name = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    return {name: cache, "use_cache": True}
