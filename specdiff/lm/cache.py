"""KV caches across speculative rounds: how to pass one, roll it back, and compact a batch.

After a round every row keeps a different number of the new entries. A batch of such rows is kept
left-padded and right-aligned: `compaction_index(keep)` says, for each row, which old columns to
gather so that the kept ones end flush right and the batch is no longer than its longest row. One
gather per layer then moves keys and values; at batch 1 (or when every row keeps the same suffix
pattern) it is a crop.
"""
from __future__ import annotations

import functools
import inspect

import torch


def cache_kwargs(model, cache) -> dict:
    """Keyword arguments that pass a KV cache to a transformers model's forward: `cache=` in
    transformers >= 5.24 (`past_key_values` is deprecated there), `past_key_values=` before."""
    return {_cache_keyword(type(model)): cache, "use_cache": True}


@functools.lru_cache(maxsize=None)
def _cache_keyword(model_class) -> str:
    parameters = inspect.signature(model_class.forward).parameters  # ~0.1 ms: once per class
    return "cache" if "cache" in parameters else "past_key_values"


def new_cache(model):
    """An empty DynamicCache for `model`, with full-length layers even where the model has
    sliding-window attention (Gemma 2/3): the window is applied by the attention masks, and every
    layer keeps one column per committed token, which is what per-row rollback and compaction need.
    A hybrid model (recurrent or convolution state) gets a `specdiff.lm.state.StatefulCache`."""
    from transformers import DynamicCache

    from specdiff.lm.state import StatefulCache, is_stateful

    if is_stateful(model):
        return StatefulCache(model)
    return DynamicCache()


def compaction_index(keep: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """keep [b, L] bool: which columns every row keeps. Returns (index [b, L'], key_mask [b, L']) with
    L' = the most columns any row keeps: row r's kept columns, in order, in its last columns, and
    left padding (index 0, key_mask False) before them."""
    kept = keep.sum(-1)  # [b]
    width = int(kept.max())
    order = torch.sort(keep.to(torch.uint8), dim=-1, stable=True).indices  # kept columns last, in order
    index = order[:, keep.shape[-1] - width:]  # [b, L']
    key_mask = torch.arange(width, device=keep.device)[None, :] >= (width - kept)[:, None]
    return torch.where(key_mask, index, torch.zeros_like(index)), key_mask


def gather_columns(x: torch.Tensor, index: torch.Tensor, dim: int) -> torch.Tensor:
    """x gathered along `dim` by a per-row column index [b, L'] (batch is dim 0)."""
    shape = [1] * x.dim()
    shape[0], shape[dim] = index.shape
    full_index = index.view(shape).expand(*[s if d != dim else index.shape[1] for d, s in enumerate(x.shape)])
    return x.gather(dim, full_index)


def keep_columns(cache, keep: torch.Tensor) -> torch.Tensor:
    """Keeps, per row, the cache columns where keep [b, L] is True, left-padded and right-aligned.
    Returns the new key mask [b, L']. A plain crop when every row drops the same trailing columns."""
    width = keep.shape[-1]
    dropped = (~keep).sum(-1)
    trailing = int(dropped[0])
    if bool((dropped == trailing).all()) and (trailing == 0 or not bool(keep[:, width - trailing:].any())):
        if trailing:
            cache.crop(-trailing)
        return keep[:, : width - trailing]
    index, key_mask = compaction_index(keep)
    for layer in cache.layers:
        if getattr(layer, "keys", None) is None or layer.keys.numel() == 0:
            continue
        layer.keys = gather_columns(layer.keys, index, dim=2)  # [b, heads, L', head_dim]
        layer.values = gather_columns(layer.values, index, dim=2)
    return key_mask


def select_rows(cache, rows: torch.Tensor) -> None:
    """Keeps only the batch rows `rows` [n] of the cache (every layer type: `StatefulCache` selects states too)."""
    cache.batch_select_indices(rows)
