"""One bidirectional forward of a decoder or masked-LM class (masked diffusion drafters and their prefix caches):
the logits of every position, or of some columns, with or without Dream's shift."""
from __future__ import annotations

import torch

from specdiff.lm.cache import cache_kwargs
from specdiff.lm.masks import bidirectional_mask, layer_masks, position_ids


def bidirectional_logits(model, tokens: torch.Tensor, key_mask: torch.Tensor, columns: torch.Tensor | None = None,
                         shift: bool = True, cache=None, positions: torch.Tensor | None = None,
                         padded: bool | None = None) -> torch.Tensor:
    """One bidirectional forward. Returns logits [b, L, V] where row j is the distribution of token j,
    or only the rows `columns` [C]: [b, C, V]. With shift (Dream), row j is the model's output at j-1
    (row 0 copies row 1's source); without (LLaDA, BERT), it is the output at j.

    A causal-LM class gets its attention mask already prepared ({layer type: mask}, passed through by
    transformers) and `is_causal=False`: no mask when no row is padded (SDPA runs unmasked, i.e.
    bidirectional), else a 4D boolean mask hiding only the padding. A masked-LM class gets a 2D mask."""
    positions = position_ids(key_mask) if positions is None else positions  # [b, L], left padding aware
    if not is_causal_lm_class(model):
        logits = model(input_ids=tokens, attention_mask=key_mask.long(), **_position_kwargs(model, positions)).logits
        logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1) if shift else logits
        return logits if columns is None else logits[:, columns]
    padded = not bool(key_mask.all()) if padded is None else padded
    mask = bidirectional_mask(key_mask) if padded else None
    if columns is None:
        keep = 0
    else:
        keep = columns - 1 if shift else columns
    extra = {} if cache is None else cache_kwargs(model, cache)
    logits = model(input_ids=tokens, attention_mask=layer_masks(model, mask), position_ids=positions,
                   is_causal=False, logits_to_keep=keep, **extra).logits
    if columns is not None:
        return logits  # [b, C, V]
    return torch.cat([logits[:, :1], logits[:, :-1]], dim=1) if shift else logits


def is_causal_lm_class(model) -> bool:
    """True for a decoder class run bidirectionally (Qwen3ForCausalLM, Dream); False for a masked LM."""
    name = type(model).__name__
    if "MaskedLM" in name or "BertFor" in name or getattr(model.config, "model_type", "") == "llada":
        return False
    return "CausalLM" in name or getattr(model.config, "model_type", "") == "Dream"


def _position_kwargs(model, positions: torch.Tensor) -> dict:
    import inspect

    return {"position_ids": positions} if "position_ids" in inspect.signature(model.forward).parameters else {}
