"""A fixed-size KV cache for compiled verifier rounds, rolled back by length.

Layout: rows are left-aligned, with no padding. Row r's token at position t sits in column t of every
layer's buffers, keys / values [b, kv_heads, W, head_dim], and `lengths` [b] counts each row's committed
columns. The rules:
- a forward over n new tokens of row r has positions lengths[r] .. lengths[r] + n - 1, and writes them in
  those columns (a scatter: rows of different lengths write different columns in one call);
- the query at position t reads columns <= t, and nothing else (`row_masks`). So a column at or past a
  row's length that this forward did not write (a rejected draft, a padded chunk's tail, a finished row's
  last round) is never read;
- rolling back is setting `lengths`: nothing is moved, cropped or zeroed.
Shapes never change while a batch runs, so one compiled graph serves every round of a given chunk width.

Hybrid models (recurrent or convolution state, `lm.state`) and attention kinds other than full and
sliding-window attention are refused (`check_static`).
"""
from __future__ import annotations

import torch

LAYER_KINDS = ("full_attention", "sliding_attention")


class NotStaticCacheable(ValueError):
    """The model keeps state a length cannot roll back, or has an attention kind the masks do not build."""


def check_static(model) -> None:
    """Refuses a model the static cache cannot serve exactly, with the reason."""
    from specdiff.lm.state import is_stateful

    name = type(model).__name__
    if is_stateful(model):
        raise NotStaticCacheable(f"{name} keeps recurrent or convolution state, which a static KV cache cannot roll "
                                 "back by length")
    kinds = _layer_kinds(model.config)
    unknown = sorted(kinds - set(LAYER_KINDS))
    if unknown:
        raise NotStaticCacheable(f"{name} has attention layers of kind {', '.join(unknown)}; the static cache builds "
                                 f"masks for {' and '.join(LAYER_KINDS)} only")
    if getattr(model.config, "_attn_implementation", "sdpa") not in ("sdpa", "eager"):
        raise NotStaticCacheable(f"{name} runs attention {model.config._attn_implementation!r}; the static cache "
                                 "takes 'sdpa' or 'eager'")


def row_static_cache(batch: int, width: int):
    """An empty cache of `batch` rows and `width` columns per layer (buffers allocated at the first write)."""
    return _cache_class()(batch, width)


def row_masks(model, positions: torch.Tensor, width: int):
    """The mask of a forward whose tokens have positions [b, n] over a cache of `width` columns: query t reads
    columns <= t (and, in a sliding-window layer, > t - window). [b, 1, n, width], bool (True reads) for sdpa,
    additive for eager attention; {layer kind: mask} for a model that mixes full and sliding-window layers."""
    config = model.config
    columns = torch.arange(width, device=positions.device)[None, None, None, :]  # [1, 1, 1, W]
    queries = positions[:, None, :, None]  # [b, 1, n, 1]
    full = columns <= queries
    kinds = _layer_kinds(config)
    reads = {"full_attention": full}
    if "sliding_attention" in kinds:
        reads["sliding_attention"] = full & (columns > queries - int(config.sliding_window))
    if getattr(config, "_attn_implementation", "sdpa") == "eager":
        dtype = next(model.parameters()).dtype
        reads = {kind: torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, torch.finfo(dtype).min)
                 for kind, mask in reads.items()}
    if len(kinds) == 1:
        return reads[next(iter(kinds))]  # a 4D mask goes through transformers' mask builders unchanged
    return {kind: reads[kind] for kind in kinds}


def _layer_kinds(config) -> set[str]:
    """The attention kinds of the model's layers: its `layer_types`, else sliding-window everywhere where the config
    sets a window (Mistral), else full attention."""
    kinds = getattr(config, "layer_types", None)
    if kinds:
        return set(kinds)
    return {"sliding_attention" if getattr(config, "sliding_window", None) else "full_attention"}


_CLASS = []


def _cache_class():
    """The cache class, built once (transformers is imported lazily)."""
    if _CLASS:
        return _CLASS[0]
    from transformers.cache_utils import Cache, StaticLayer

    class RowStaticLayer(StaticLayer):
        """One layer's keys and values [b, kv_heads, W, head_dim]; writes at the owner's `positions` [b, n]."""

        def __init__(self, owner, width: int):
            super().__init__(max_cache_len=width)
            self.owner = owner

        def update(self, key_states, value_states, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            # key_states [b, kv_heads, n, d] goes to columns positions[r] of row r
            index = self.owner.positions[:, None, :, None]  # [b, 1, n, 1]
            self.keys.scatter_(2, index.expand_as(key_states), key_states)
            self.values.scatter_(2, index.expand_as(value_states), value_states)
            return self.keys, self.values

        def get_seq_length(self) -> int:
            return 0  # positions are always given explicitly

        def crop(self, tokens_to_remove: int) -> None:
            raise RuntimeError("a row static cache is rolled back by its lengths, never cropped")

    class RowStaticCache(Cache):
        """Fixed buffers per layer, rows left-aligned; `lengths` [b] committed columns per row; `positions`
        [b, n] the columns the next forward writes (set by the caller before each forward)."""

        def __init__(self, batch: int, width: int):
            self.batch, self.width = int(batch), int(width)
            self.lengths = torch.zeros(self.batch, dtype=torch.long)
            self.positions = None
            super().__init__(layer_class_to_replicate=lambda: RowStaticLayer(self, self.width))

        def reset(self) -> None:
            self.lengths.zero_()

        def get_seq_length(self, layer_idx: int = 0) -> int:
            return 0

        def get_mask_sizes(self, query_length, layer_idx: int = 0):
            return self.width, 0

        def buffers(self):
            """Every layer's (keys, values), for tests and diagnostics."""
            return [(layer.keys, layer.values) for layer in self.layers if layer.is_initialized]

    _CLASS.append(RowStaticCache)
    return RowStaticCache
