"""Prefix caches for the masked diffusion drafter: what each denoising step does not re-encode.

Both are approximations of the drafter (the committed tokens' keys and values no longer see the
current canvas); q is still the distribution each token was sampled from, so verification keeps
its guarantees. With Dream's shift the first canvas token is predicted at the last committed token.

- `round_cache_steps` (Fast-dLLM's prefix cache): step 1 encodes the whole sequence and keeps the
  keys and values of all committed tokens but the last; steps 2..K encode [last committed, canvas].
- `PersistentPrefix`: a KV cache of the committed tokens kept across rounds, like an
  autoregressive drafter's. Each round's first step encodes the newly committed tokens as one block
  (bidirectional among themselves, attending to the blocks before them, never to the canvas: the
  prompt is the first block), together with the canvas, which attends to everything; later steps
  encode only the canvas. Nothing drafted is ever cached. `committed_attention="causal"` encodes
  each committed token causally instead (the block drafter, trained that way). Block-wise rather than token-wise causal
  encoding of the committed tokens keeps more of the bidirectional context the drafter was trained
  with: 7.54 tokens per round instead of 6.95 at K = 4, B = 16 (40 validation problems).
"""
from __future__ import annotations

import torch

from specdiff.lm.cache import cache_kwargs, keep_columns, new_cache
from specdiff.lm.masks import bidirectional_mask, layer_masks, position_ids


def round_cache_steps(model, tokens: torch.Tensor, key_mask: torch.Tensor, block_size: int, shift: bool):
    """A step function canvas [b, B] -> logits [b, B, V] with a per-round prefix cache.
    tokens [b, L + B] (committed tokens, then the canvas), key_mask [b, L + B]."""
    from specdiff.lm.bidirectional import bidirectional_logits

    cache, positions, first = new_cache(model), position_ids(key_mask), [True]
    chunk = block_size + 1  # last committed token + canvas
    columns = torch.arange(tokens.shape[1] - block_size, tokens.shape[1], device=tokens.device)
    mask = None if bool(key_mask.all()) else bidirectional_mask(key_mask, chunk)
    # outputs over [last, canvas] kept for the canvas: shifted, chunk columns 0..B-1; else 1..B
    keep = torch.arange(0 if shift else 1, block_size + (0 if shift else 1), device=tokens.device)

    def step(canvas):
        tokens[:, -block_size:] = canvas
        if first[0]:
            first[0] = False
            logits = bidirectional_logits(model, tokens, key_mask, columns, shift, cache=cache)
        else:
            logits = model(input_ids=tokens[:, -chunk:], attention_mask=layer_masks(model, mask),
                           position_ids=positions[:, -chunk:], is_causal=False, logits_to_keep=keep,
                           **cache_kwargs(model, cache)).logits
        cache.crop(-chunk)
        return logits
    return step


class PersistentPrefix:
    """The committed tokens' KV cache of a masked drafter, kept across rounds (see module docstring)."""

    def __init__(self, model, shift: bool, key_mask: torch.Tensor, committed_attention: str = "block"):
        if committed_attention not in ("block", "causal"):
            raise ValueError(f"committed_attention must be 'block' or 'causal', got {committed_attention!r}")
        self.model, self.shift, self.committed_attention = model, shift, committed_attention
        self.cache, self.cache_mask = new_cache(model), key_mask[:, :0]  # [b, C]: real cache columns

    def step_logits_fn(self, tokens: torch.Tensor, key_mask: torch.Tensor, block_size: int):
        """tokens [b, L + B] (committed, then canvas), key_mask [b, L + B]. Returns canvas -> logits [b, B, V]."""
        model, shift, cache = self.model, self.shift, self.cache
        committed_mask = key_mask[:, :-block_size]
        pending = committed_mask.sum(-1) - self.cache_mask.sum(-1)  # [b] committed tokens not cached, >= 1
        width = int(pending.max())
        device = tokens.device
        columns = torch.arange(width, device=device)[None, :]
        pending_mask = columns >= (width - pending)[:, None]  # [b, width]
        canvas_mask = torch.ones(tokens.shape[0], block_size, dtype=torch.bool, device=device)
        full_mask = torch.cat([self.cache_mask, pending_mask, canvas_mask], dim=1)  # [b, C + width + B]
        positions = position_ids(full_mask)
        first_mask = _pending_mask(full_mask, width, block_size, self.committed_attention)  # [b, 1, width + B, C + width + B]
        state = {"first": True, "head": None, "canvas_only": None}

        def step(canvas):
            if state["first"]:
                state["first"] = False
                chunk = torch.cat([tokens[:, -block_size - width:-block_size], canvas], dim=1)
                keep = torch.arange(width - 1 if shift else width, width + block_size - (1 if shift else 0), device=device)
                logits = model(input_ids=chunk, attention_mask=layer_masks(model, first_mask),
                               position_ids=positions[:, -block_size - width:], is_causal=False, logits_to_keep=keep,
                               **cache_kwargs(model, cache)).logits  # [b, B, V]
                cache.crop(-block_size)
                self.cache_mask = keep_columns(cache, full_mask[:, :-block_size])
                keys = torch.cat([self.cache_mask, canvas_mask], dim=1)  # the compacted layout
                state["canvas_only"] = None if bool(keys.all()) else bidirectional_mask(keys, block_size)
                state["head"] = logits[:, :1].clone() if shift else None  # token 0's logits: its query never sees the canvas
                return logits
            keep = torch.arange(0, block_size - 1 if shift else block_size, device=device)
            out = model(input_ids=canvas, attention_mask=layer_masks(model, state["canvas_only"]),
                        position_ids=positions[:, -block_size:], is_causal=False, logits_to_keep=keep,
                        **cache_kwargs(model, cache)).logits
            cache.crop(-block_size)
            return torch.cat([state["head"], out], dim=1) if shift else out

        return step

    def select(self, rows: torch.Tensor) -> None:
        self.cache.batch_select_indices(rows)
        self.cache_mask = keep_columns(self.cache, self.cache_mask[rows])


def _pending_mask(full_mask: torch.Tensor, width: int, block_size: int, committed_attention: str) -> torch.Tensor:
    """[b, 1, width + B, C + width + B]: pending committed queries see the real cache keys and, as one
    block, every pending key ("block"), or the pending keys at or before them ("causal"); never the
    canvas. Canvas queries see every real key; every query sees itself (no empty rows)."""
    batch, total = full_mask.shape
    queries = width + block_size
    query_column = torch.arange(total - queries, total, device=full_mask.device)[:, None]  # [Q, 1]
    key_column = torch.arange(total, device=full_mask.device)[None, :]  # [1, K]
    committed_key = key_column < total - block_size  # [1, K]
    if committed_attention == "causal":
        committed_key = committed_key & (key_column <= query_column)  # [Q, K]
    is_canvas_query = query_column >= total - block_size  # [Q, 1]
    allowed = (committed_key | is_canvas_query)[None, None] & full_mask[:, None, None, :]
    return allowed | (key_column == query_column)[None, None]
