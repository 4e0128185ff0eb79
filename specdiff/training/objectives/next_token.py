"""Next-token cross-entropy (the autoregressive objective; also the masked, block and uniform drafters'
auxiliary causal loss on the same weights, which Dream's shifted logits make one head).

batch: `ids` [b, L], `keys` [b, L] bool (real tokens), `labels` [b, L] (the token at each position that
carries a loss, -100 elsewhere: position j - 1 predicts label j), and optionally `causal_mask` (True: an explicit
causal mask, for models configured bidirectional) and `positions` (a random subset of that many labelled
positions per row, drawn with the generator: the head of a large vocabulary dominates the cost); for soft
targets (`objectives.soft`) `target` ("kl", "ce_tv"; default "ce": this loss) and `teacher` over `ids`.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from specdiff.lm.masks import causal_mask
from specdiff.training.objectives.heads import hidden, logits, targets
from specdiff.training.objectives.soft import soft_loss


def next_token(model, batch: dict, generator: torch.Generator | None = None) -> torch.Tensor:
    """Mean cross-entropy over the labelled positions (module docstring), or the soft target's loss there."""
    ids, keys, labels = batch["ids"], batch["keys"], batch["labels"][:, 1:]  # labels [b, L - 1]
    if batch.get("causal_mask"):
        positions = torch.arange(ids.shape[1])[None, :].expand_as(ids)
        states = hidden(model, ids, causal_mask(keys), positions)
    else:
        states = hidden(model, ids, keys)
    keep = labels >= 0  # [b, L - 1]
    if batch.get("positions") is not None:
        chosen = torch.zeros_like(keep)
        for row in range(len(ids)):
            valid = keep[row].nonzero().squeeze(-1)
            chosen[row, valid[torch.randperm(len(valid), generator=generator)[: batch["positions"]]]] = True
        keep = chosen
    if batch.get("target", "ce") != "ce":  # position j - 1 predicts label j: the teacher's output at j - 1
        rows, columns = keep.nonzero(as_tuple=True)  # the order of [keep]
        return soft_loss(logits(model, states[:, :-1][keep]), batch["teacher"](rows, columns), batch["target"],
                         targets(model, labels[keep]))
    return F.cross_entropy(logits(model, states[:, :-1][keep]), targets(model, labels[keep]), ignore_index=-100)
