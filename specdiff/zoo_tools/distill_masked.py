"""The masked diffusion drafter `specdiff distill --kind masked` trains for a real verifier (issue 32).

A standalone Dream-style drafter (Ye et al. 2025): a small `Qwen3ForCausalLM` run with bidirectional
attention, Dream's shifted logits (the output at position j - 1 is token j's distribution), a mask token,
and no access to the verifier at drafting time. Its own embeddings over the draft vocabulary are a learned
projection P [H, d] of the verifier's frozen ones (E [V, H]), tied between input and output:

    embed(x) = E[x] P                  (every verifier id can be read: prompts use rare tokens too)
    logits(h) = h (E[d2t] P)^T         [V_d]: the draft vocabulary's rows only (q is 0 outside)

so only P, the decoder layers and the final norm are trained and shipped; `specdiff.zoo.distilled.build`
recomputes both tables from the fetched verifier. P starts at the top-d principal directions of E[d2t], scaled so that
the head's entries have standard deviation d^-1/2.

Terms: B the block (canvas) length; a cut c, a response position: the block is tokens c..c + B - 1 and
nothing after it is seen, as when drafting. Loss per conversation, one cut each:
- diffusion: each block token masked with probability t ~ U(eps, 1) (t = 1 on an `all_masked` share: the
  first denoising step, and K = 1), at least one; cross-entropy of the masked tokens, bidirectional attention
  over the prompt, the response before c and the block;
- next token (Dream's shift makes the two heads one; the testbed found this dense signal essential, see
  `zoo.configs`): causal attention over the same unmasked tokens, cross-entropy on `positions` random
  response positions, weighted `ar_weight`.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from specdiff.lm.masks import bidirectional_mask, causal_mask, layer_masks

MASK_EPS = 1e-3


def build(target, settings: dict, d2t, mask_token_id: int):
    """(model, projection): a fresh Qwen3ForCausalLM drafter of width settings["hidden"] whose lm_head has
    V_d rows, and P [H, d] started at the top principal directions of the verifier's draft-vocabulary rows."""
    import transformers

    tc = target.config
    config = transformers.Qwen3Config(
        vocab_size=tc.vocab_size, hidden_size=settings["hidden"], num_hidden_layers=settings["layers"],
        num_attention_heads=settings["heads"], num_key_value_heads=settings["kv_heads"],
        head_dim=settings["hidden"] // settings["heads"], intermediate_size=settings["intermediate"],
        max_position_embeddings=tc.max_position_embeddings, rope_parameters=dict(tc.rope_parameters),
        rms_norm_eps=tc.rms_norm_eps, tie_word_embeddings=False, bos_token_id=tc.bos_token_id,
        eos_token_id=tc.eos_token_id, pad_token_id=tc.pad_token_id)
    config.mask_token_id, config.logits_shift, config.is_causal = int(mask_token_id), 1, False
    model = transformers.Qwen3ForCausalLM(config)
    model.lm_head = torch.nn.Linear(settings["hidden"], len(d2t), bias=False)
    model.model.embed_tokens.weight.requires_grad_(False)  # recomputed from P (see `tables`)
    model.lm_head.weight.requires_grad_(False)
    rows = target.get_input_embeddings().weight.detach()[torch.as_tensor(d2t)].float()  # [V_d, H]
    _, _, directions = torch.linalg.svd(rows - rows.mean(0), full_matrices=False)  # [H, H]
    projection = directions[: settings["hidden"]].T.contiguous()  # [H, d]
    projection /= (rows @ projection).std() * settings["hidden"] ** 0.5  # logits of unit-RMS states start at std ~1
    projection = torch.nn.Parameter(projection)
    return model.float(), projection


def tables(target_embeddings: torch.Tensor, projection: torch.Tensor, d2t) -> tuple[torch.Tensor, torch.Tensor]:
    """(input embeddings [V, d], output head [V_d, d]) of the module docstring, from E [V, H] and P [H, d]."""
    return target_embeddings @ projection, target_embeddings[torch.as_tensor(d2t)] @ projection


def loss(model, projection, target_embeddings, d2t_rows, to_draft, conversations, settings, generator) -> torch.Tensor:
    """The module docstring's diffusion loss + ar_weight * next-token loss on one cut per conversation.
    target_embeddings E [V, H] (frozen), d2t_rows E[d2t] [V_d, H], to_draft [V] (-100 outside the vocabulary)."""
    block = settings["block"]
    rows, cuts = [], []
    for prompt, response in conversations:
        cut = len(prompt) + int(torch.randint(len(response), (1,), generator=generator))
        rows.append(torch.as_tensor(prompt + response)[: cut + block])
        cuts.append(cut)
    batch, width = len(rows), max(len(r) for r in rows)
    ids = torch.zeros(batch, width, dtype=torch.long)
    real = torch.zeros(batch, width, dtype=torch.bool)
    for b, r in enumerate(rows):
        ids[b, :len(r)], real[b, :len(r)] = r, True
    column = torch.arange(width)[None, :]
    cut = torch.tensor(cuts)[:, None]
    in_block = (column >= cut) & real  # [b, W]
    t = MASK_EPS + (1 - MASK_EPS) * torch.rand(batch, 1, generator=generator)
    t = torch.where(torch.rand(batch, 1, generator=generator) < settings["all_masked"], torch.ones_like(t), t)
    masked = in_block & (torch.rand(batch, width, generator=generator) < t)
    masked |= column == cut  # at least the first block token
    noisy = torch.where(masked, torch.full_like(ids, model.config.mask_token_id), ids)
    head = d2t_rows @ projection  # [V_d, d]
    positions = column.expand(batch, width)

    def hidden(tokens, mask):
        embeds = F.embedding(tokens, target_embeddings) @ projection  # [b, W, d]
        return model.model(inputs_embeds=embeds, attention_mask=layer_masks(model, mask), position_ids=positions,
                           is_causal=False).last_hidden_state  # [b, W, d]

    # Dream's shift: the output at j - 1 is token j's distribution
    states = hidden(noisy, bidirectional_mask(real))[:, :-1][masked[:, 1:]]  # [n, d]
    targets = to_draft[ids[:, 1:][masked[:, 1:]]]
    diffusion = F.cross_entropy(states @ head.T, targets, ignore_index=-100)
    if not settings["ar_weight"]:
        return diffusion
    response = torch.zeros_like(real)
    for b, (prompt, _) in enumerate(conversations):
        response[b, len(prompt):len(rows[b])] = True
    keep = torch.zeros(batch, width - 1, dtype=torch.bool)
    for b in range(batch):
        valid = response[b, 1:].nonzero().squeeze(-1)
        keep[b, valid[torch.randperm(len(valid), generator=generator)[: settings["positions"]]]] = True
    causal_states = hidden(ids, causal_mask(real))[:, :-1][keep]  # [m, d]
    next_token = F.cross_entropy(causal_states @ head.T, to_draft[ids[:, 1:][keep]], ignore_index=-100)
    return diffusion + settings["ar_weight"] * next_token
