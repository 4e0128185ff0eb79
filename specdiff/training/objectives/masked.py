"""The masked-diffusion loss (MDLM, Sahoo et al. 2024, Eq. 11; Dream's shifted logits, Ye et al. 2025), with the
parameters that make it the testbed masked drafter's, the block drafter's (SDAR / BD3-LM, Arriola et al. 2025,
one block per row) and the distilled masked drafter's loss:

    L = sum_{j masked} w_j CE(logits_{j-1}, x_j) / N,  each noisable token masked with probability t

batch: `ids` x0 [b, L], `keys` [b, L] bool (real tokens), `noisable` [b, L] bool (the canvas or block), and:
- `cut` [b] (optional): the block's first token, always masked (at least one), and the prefix before it
  causal under `attention="block_causal"` (default "bidirectional": every real token sees every other);
- `ratio`: "uniform" (t ~ U(eps, 1) per row, default) or "stratified" (MDLM's low-discrepancy sampler: one
  uniform offset, b evenly spaced ratios); `all_masked`: the share of rows with t = 1;
- `weighting`: "inverse_t" (w = 1/t, N = the noisable tokens: the testbed's, an ELBO estimate) or "none"
  (w = 1, N = the masked tokens: the distilled drafter's mean);
- the testbed's masking modes (`mask_tokens`): `group_prob` with `groups` [b, L], `result_prob` with
  `result_rank` [b, L], `prefix_prob` with `prefix_masking`;
- soft targets (`objectives.soft`, with `weighting="none"`): `target` ("kl", "ce_tv"; default "ce": the loss
  above) and `teacher` over `ids` (x0); every masked position is trained, the CE term where x_j is a row of q.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from specdiff.lm.masks import bidirectional_mask
from specdiff.training.objectives.heads import block_causal, hidden, logits, targets
from specdiff.training.objectives.soft import soft_loss

MASK_EPS = 1e-3  # smallest masking ratio t


def masked_diffusion(model, batch: dict, generator: torch.Generator | None = None) -> torch.Tensor:
    """The module docstring's loss; the mask token is `model.config.mask_token_id`."""
    x0, keys, noisable = batch["ids"], batch["keys"], batch["noisable"]
    b, length = x0.shape
    if batch.get("ratio", "uniform") == "stratified":
        u = (torch.rand(1, generator=generator) + torch.arange(b) / b) % 1.0  # [b]
        t = (MASK_EPS + (1 - MASK_EPS) * u)[:, None]  # [b, 1]
    else:
        t = MASK_EPS + (1 - MASK_EPS) * torch.rand(b, 1, generator=generator)  # [b, 1]
    if batch.get("all_masked", 0.0) > 0:
        t = torch.where(torch.rand(b, 1, generator=generator) < batch["all_masked"], torch.ones_like(t), t)
    masked, weight = mask_tokens(batch, t, generator)  # [b, L], [b, L]
    noisy = torch.where(masked, torch.full_like(x0, model.config.mask_token_id), x0)
    column = torch.arange(length)[None, :]
    attention = (block_causal(keys, noisable, batch["cut"]) if batch.get("attention") == "block_causal"
                 else bidirectional_mask(keys))
    states = hidden(model, noisy, attention, column.expand(b, length))  # [b, L, d]
    chosen = masked[:, 1:]  # Dream's shift: the output at j - 1 is token j's distribution
    if batch.get("target", "ce") != "ce":
        if batch.get("weighting", "inverse_t") != "none":
            raise ValueError("soft targets are the distilled drafters': masked_diffusion with weighting='none'")
        rows, columns = chosen.nonzero(as_tuple=True)  # the order of [chosen]; the teacher's output at j - 1
        return soft_loss(logits(model, states[:, :-1][chosen]), batch["teacher"](rows, columns), batch["target"],
                         targets(model, x0[:, 1:][chosen]))
    ce = F.cross_entropy(logits(model, states[:, :-1][chosen]), targets(model, x0[:, 1:][chosen]),
                         ignore_index=-100, reduction="none")  # [n]
    if batch.get("weighting", "inverse_t") == "none":
        return ce.sum() / (targets(model, x0[:, 1:][chosen]) >= 0).sum()
    return (ce * weight[:, 1:][chosen]).sum() / noisable.sum()


def mask_tokens(batch: dict, t: torch.Tensor, generator: torch.Generator | None = None,
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Which noisable tokens a row masks at ratio t [b, 1], and each one's weight: masked [b, L] bool, weight
    [b, L] (0 where not masked).

    - plain (MDLM): each noisable token independently with probability t, weight 1/t; with a `cut`, that token too;
    - grouped (a `group_prob` share of the rows): each number *value* (`groups`) is masked with probability t as
      one unit, at every place it occurs. A chain of thought writes each result 2-3 times (`= 60.`, `so 60 - 33`,
      `#### 60`); under plain masking one copy is nearly always visible, so the model learns to copy results
      instead of computing them from their operands (docs/testbed.md);
    - results (a `result_prob` share, on top): every result value (`result_rank` > 0: not in the prompt) from a
      random rank k on is masked too, everywhere, with weight 1: the state in which entropy-order decoding
      computes result k;
    - clean prefix (a `prefix_prob` share): a random prefix of the canvas stays clean, and after the cut
      `prefix_masking="all"` masks every token (weight 1), the drafting situation, while "ratio" keeps the
      masks drawn above after the cut."""
    prefix_masking = batch.get("prefix_masking", "all")
    if prefix_masking not in ("all", "ratio"):
        raise ValueError(f"prefix_masking must be 'all' or 'ratio', not {prefix_masking!r}")
    noisable = batch["noisable"]
    b, length = noisable.shape
    column = torch.arange(length)[None, :]
    draw = torch.rand(b, length, generator=generator)  # [b, L]
    if batch.get("group_prob", 0.0) > 0:
        groups = batch["groups"]
        group_draw = torch.rand(b, int(groups.max()) + 1, generator=generator).gather(1, groups)  # [b, L]
        grouped = (torch.rand(b, 1, generator=generator) < batch["group_prob"]) & (groups > 0)  # [b, L]
        draw = torch.where(grouped, group_draw, draw)
    masked = noisable & (draw < t)  # [b, L]
    if batch.get("cut") is not None:
        masked |= column == batch["cut"][:, None]  # at least the block's first token
    weight = masked / t
    if batch.get("result_prob", 0.0) > 0:
        rank = batch["result_rank"]
        first = 1 + (torch.rand(b, 1, generator=generator) * rank.max(dim=1, keepdim=True).values).long()  # [b, 1]
        use = torch.rand(b, 1, generator=generator) < batch["result_prob"]  # [b, 1]
        forced = use & (rank >= first) & (rank > 0) & ~masked  # [b, L]
        masked = masked | forced
        weight = torch.where(forced, torch.ones_like(weight), weight)
    if batch.get("prefix_prob", 0.0) > 0:
        start = noisable.float().argmax(dim=1, keepdim=True)  # [b, 1]
        cut = start + (torch.rand(b, 1, generator=generator) * noisable.sum(dim=1, keepdim=True)).long()  # [b, 1]
        use = torch.rand(b, 1, generator=generator) < batch["prefix_prob"]  # [b, 1]
        after_cut = noisable & (column >= cut)  # [b, L]
        if prefix_masking == "all":
            masked = torch.where(use, after_cut, masked)
            weight = torch.where(use, after_cut.float(), weight)
        else:
            masked = masked & (after_cut | ~use)
            weight = weight * masked
    return masked, weight
