"""The DFlash loss (Chen et al. 2026): a one-step block drafter conditioned on the frozen verifier's hidden
states. An anchor a is a token of the response; the block is [token a, B - 1 masks] and predicts tokens
a + 1..a + B - 1, reading the verifier's states of the tokens before a (keys and values of a projection of them)
and, with `specdiff_anchor_state` in the drafter's config, the projected state of the token before a added to
every block input. Per block, DFlash's position weighting (k = 1..B - 1):

    L = sum_k w_k CE(logits_k, x_{a+k}) / sum_k w_k,   w_k = exp(-(k - 1) / gamma)   (gamma = inf: the mean)

DSpark's changes, by the drafter's config (`specdiff.drafters.dflash`): `sample_from_anchor` (block position 0, the
anchor's slot, predicts a + 1 and position k predicts a + k + 1: a block of W yields W predictions, not W - 1) and
`markov_rank` (the Markov head's bias from the true previous token, teacher-forced: the anchor for the first).

batch: `conversations` [(prompt ids, response ids)] * b, `context` [b, W, H_c] the verifier's hidden states at the
drafter's `target_layer_ids`, `embeddings` [V, H] and `head` [V_d, H] (the verifier's frozen input table and the
draft vocabulary's rows of its LM head), `to_draft` [V] (-100 outside the draft vocabulary), `block`, `anchors`
(random blocks per conversation, all in one forward: block j attends to the context before its anchor and
bidirectionally to itself), `gamma`, optionally `anchors_at` [b, A]; for soft targets (`objectives.soft`)
`target` ("kl", "ce_tv"; default "ce": the loss above) and `teacher` over the conversations (prompt + response,
right-padded): block position k of anchor a is the teacher's output at a + k - 1, every position inside the
conversation is trained with the same w_k, the CE term where x_{a+k} is in the draft vocabulary.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from specdiff.drafters.dflash import markov_bias
from specdiff.training.objectives.soft import soft_loss


def dflash(model, batch: dict, generator: torch.Generator | None = None) -> torch.Tensor:
    """The module docstring's weighted cross-entropy (or the soft target's loss on the same positions)."""
    logits, targets, starts, inside = _block_logits(model, batch, generator)  # [b, A, B - 1, V_d], [b, A, B - 1],
    # [b, A], [b, A, B - 1]
    outputs = targets.shape[-1]  # predictions per block: B - 1, or B when the anchor's slot predicts
    weights = torch.exp(-torch.arange(outputs, dtype=torch.float) / batch["gamma"]).expand_as(targets)
    if batch.get("target", "ce") != "ce":
        columns = (starts[:, :, None] + torch.arange(outputs)).expand_as(targets)  # [b, A, outputs]
        rows = torch.arange(len(targets))[:, None, None].expand_as(targets)  # [b, A, B - 1]
        return soft_loss(logits[inside], batch["teacher"](rows[inside], columns[inside]), batch["target"],
                         targets[inside], weights[inside])
    weights = weights * (targets >= 0)
    losses = F.cross_entropy(logits.flatten(0, 2), targets.flatten(), ignore_index=-100, reduction="none")
    return (losses * weights.flatten()).sum() / weights.sum().clamp(min=1)


def dflash_logits(model, batch: dict, generator: torch.Generator | None = None):
    """(logits [b, A, outputs, V_d], targets [b, A, outputs] draft-vocabulary rows, -100 where none); outputs =
    B - 1, or B with `sample_from_anchor`."""
    return _block_logits(model, batch, generator)[:2]


def _block_logits(model, batch: dict, generator: torch.Generator | None = None):
    """dflash_logits's pair, and the anchors [b, A] and which block positions lie inside the conversation
    [b, A, B - 1] bool."""
    conversations, context, block, anchors = batch["conversations"], batch["context"], batch["block"], batch["anchors"]
    rows = [torch.as_tensor(p + r) for p, r in conversations]
    size, width, n = context.shape[-1], max(len(r) for r in rows), len(rows)
    context = torch.nn.functional.pad(context.float(), (0, 0, 0, max(0, width - context.shape[1])))[:, :width]
    starts = torch.zeros(n, anchors, dtype=torch.long)
    for b, (prompt, response) in enumerate(conversations):
        low, high = len(prompt) - 1, len(prompt) + len(response) - 2  # anchor a predicts a + 1.. (the response)
        starts[b] = low + torch.randint(max(high - low + 1, 1), (anchors,), generator=generator)
    if batch.get("anchors_at") is not None:
        starts = torch.as_tensor(batch["anchors_at"]).view(n, anchors)
    positions = starts[:, :, None] + torch.arange(block)  # [b, A, block]
    ids = torch.stack([F.pad(r, (0, width + block + 1 - len(r)), value=-1) for r in rows])  # [b, W + block + 1]
    gathered = ids.gather(1, positions.flatten(1)).view(n, anchors, block)  # [b, A, block], -1 beyond the end
    noise_ids = torch.full_like(gathered, model.config.mask_token_id)
    noise_ids[:, :, 0] = gathered[:, :, 0]
    noise = F.embedding(noise_ids.flatten(1), batch["embeddings"])  # [b, A * block, H]
    if getattr(model.config, "specdiff_anchor_state", False):  # + the projected state of the token before a
        before = context.gather(1, (starts - 1).clamp(min=0)[:, :, None].expand(-1, -1, size))  # [b, A, H_c]
        noise = noise + model.encoder(before).repeat_interleave(block, dim=1)  # [b, A * block, H]
    lengths = torch.tensor([len(r) for r in rows])
    columns = torch.arange(width)
    context_keys = (columns[None, None, :] < starts[:, :, None]) & (columns[None, None, :] < lengths[:, None, None])
    own = torch.eye(anchors, dtype=torch.bool)[None, :, :, None].expand(n, anchors, anchors, block)  # [b, A, A, block]
    keys = torch.cat([context_keys, own.flatten(2)], dim=2)  # [b, A, W + A * block]
    attend = keys[:, :, None, :].expand(n, anchors, block, keys.shape[-1]).reshape(n, 1, anchors * block, -1)
    position_ids = torch.cat([columns.expand(n, width), positions.flatten(1)], dim=1)
    out = model(noise_embeds=noise, context_hidden_states=context, position_ids=position_ids,
                attention_mask={t: attend for t in set(model.config.layer_types)})
    states = out.last_hidden_state.view(n, anchors, block, -1)  # [b, A, block, H]
    if getattr(model.config, "sample_from_anchor", False):  # slot k predicts a + k + 1
        following = ids.gather(1, (positions + 1).flatten(1)).view(n, anchors, block)  # [b, A, block]
        targets, previous = following, torch.cat([gathered[:, :, :1], following[:, :, :-1]], dim=2)
    else:  # slot k >= 1 predicts a + k
        states, targets, previous = states[:, :, 1:], gathered[:, :, 1:], gathered[:, :, :-1]  # [b, A, B - 1, ...]
    inside = targets >= 0  # [b, A, outputs]
    targets = torch.where(inside, batch["to_draft"][targets.clamp(min=0)], -100)  # out of vocabulary: no loss
    logits = states @ batch["head"].T  # [b, A, outputs, V_d]
    if getattr(model, "markov_w1", None) is not None:  # DSpark's bias from the true previous token
        rows = batch["to_draft"][previous.clamp(min=0)]  # [b, A, outputs], -100 outside the draft vocabulary
        logits = logits + markov_bias(model, torch.where(rows >= 0, rows, model.markov_w1.shape[0] - 1))
    return logits, targets, starts, inside
