"""What every objective shares: reading a model's hidden states, its head, its targets, and block-causal attention.

A model is a transformers causal-LM class (`model.model` the decoder, `model.lm_head` the head). A distilled
masked drafter (`training.build`) carries instead, as non-persistent buffers, the verifier's frozen tables
and reads them through its trained projection P [H, d] (`specdiff_projection`):

    embed(x) = E[x] P          E = specdiff_source_embeddings [V, H]
    head(h)  = h (E[d2t] P)^T  E[d2t] = specdiff_source_head [V_d, H]; targets through specdiff_to_draft [V]
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from specdiff.lm.masks import layer_masks


def hidden(model, tokens: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
    """Last hidden states [b, L, d] of tokens [b, L]; mask: a key mask [b, L] (the model's own causal
    attention) or a prepared boolean mask [b, 1, L, L] (used as it is, for every layer type)."""
    projection = getattr(model, "specdiff_projection", None)
    if projection is None:
        embeds = model.get_input_embeddings()(tokens)
    else:
        embeds = F.embedding(tokens, model.specdiff_source_embeddings) @ projection
    extra = dict(attention_mask=layer_masks(model, mask), is_causal=False) if mask.dim() == 4 else \
        dict(attention_mask=mask.long())
    return model.model(inputs_embeds=embeds, position_ids=positions, **extra).last_hidden_state


def logits(model, states: torch.Tensor) -> torch.Tensor:
    """Head over states [..., d] -> [..., V] (or [..., V_d] for a draft vocabulary), float32."""
    projection = getattr(model, "specdiff_projection", None)
    if projection is None:
        return model.lm_head(states).float()
    return states @ (model.specdiff_source_head @ projection).T


def targets(model, ids: torch.Tensor) -> torch.Tensor:
    """Token ids as the head's rows: unchanged, or draft-vocabulary rows (-100 outside it)."""
    to_draft = getattr(model, "specdiff_to_draft", None)
    return ids if to_draft is None else to_draft[ids]


def block_causal(keys: torch.Tensor, block: torch.Tensor, cut: torch.Tensor) -> torch.Tensor:
    """[b, 1, L, L] bool (SDAR / BD3-LM at one block per row): the prefix before cut [b] causal, the block
    [b, L] bidirectional and attending to the prefix, each query itself; only real keys [b, L]."""
    column = torch.arange(keys.shape[1])[None, :]
    query, key = column[..., None], column[:, None, :]  # [1, L, 1], [1, 1, L]
    allowed = ((key <= query) & (key < cut[:, None, None])) | (block[:, :, None] & block[:, None, :]) | (key == query)
    return (allowed & keys[:, None, :])[:, None]
