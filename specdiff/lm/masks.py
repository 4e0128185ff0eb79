"""Left padding, position ids and prepared attention masks.

Every batch in specdiff is left-padded: row r's real tokens are the last `lengths[r]` columns, so
the newest token of every row is in the last column. `key_mask` [b, L] is True on real tokens.
"""
from __future__ import annotations

import torch


def left_pad(rows: list[list[int]], pad_token_id: int, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pads token rows. Returns ids [b, L] long and key_mask [b, L] bool (True on real tokens)."""
    if not rows or any(len(row) == 0 for row in rows):
        raise ValueError("every row needs at least one token")
    length = max(map(len, rows))
    ids = torch.tensor([[pad_token_id] * (length - len(row)) + list(row) for row in rows], device=device)
    key_mask = torch.tensor([[False] * (length - len(row)) + [True] * len(row) for row in rows], device=device)
    return ids, key_mask


def position_ids(key_mask: torch.Tensor) -> torch.Tensor:
    """Position of every column [b, L]: the number of real tokens before it (0 on left padding)."""
    return (key_mask.long().cumsum(-1) - 1).clamp(min=0)


def bidirectional_mask(key_mask: torch.Tensor, query_length: int | None = None) -> torch.Tensor:
    """Full (non-causal) boolean mask [b, 1, Q, L] from a key mask [b, L]: every query sees every real
    key. Q defaults to L; a shorter Q is the last Q columns (a cached prefix before them)."""
    b, length = key_mask.shape
    return key_mask[:, None, None, :].expand(b, 1, query_length or length, length)


def causal_mask(key_mask: torch.Tensor) -> torch.Tensor:
    """Causal boolean mask [b, 1, L, L]: query i sees real keys j <= i."""
    length = key_mask.shape[-1]
    lower = torch.ones(length, length, dtype=torch.bool, device=key_mask.device).tril()
    return lower[None, None] & key_mask[:, None, None, :]


def block_causal_mask(key_mask: torch.Tensor, block_ids: torch.Tensor) -> torch.Tensor:
    """Block-causal boolean mask [b, 1, L, L] (SDAR, block diffusion): query i sees real keys j whose
    block is not after its own. block_ids [L] or [b, L] is each column's block index."""
    if block_ids.dim() == 1:
        block_ids = block_ids[None].expand_as(key_mask)
    allowed = block_ids[:, None, :, None] >= block_ids[:, None, None, :]  # [b, 1, L, L]
    return allowed & key_mask[:, None, None, :]


def layer_masks(model, mask: torch.Tensor | None) -> dict:
    """A prepared mask for every attention layer type of `model` ({layer type: mask}), which
    transformers passes through unchanged; None means no masking at all (full attention)."""
    kinds = set(getattr(model.config, "layer_types", None) or ["full_attention"])
    return {kind: mask for kind in kinds}
