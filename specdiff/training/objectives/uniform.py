"""Uniform-noise diffusion on a block (Austin et al. 2021, D3PM's uniform transition; Sahoo et al. 2025): the
testbed's uniform drafter, a Qwen3 backbone with Dream's shift run block-causally as the block drafter.

batch: `ids` x0 [b, L] (the block eos-padded to B, nothing after it), `keys` [b, L], `noisable` [b, L] (the
block), `cut` [b] (its first token), `block_tokens` B, and `t_min`, `t_max` (t ~ U(t_min, t_max): the stage's noise range),
`suffix_prob` (a share of rows whose block keeps a clean head and noises every token from a random offset on:
left-to-right decoding's states), `noised_weight`. Each noised block token is replaced by a token drawn
uniformly from the vocabulary; cross-entropy on every block position (noised ones weighted `noised_weight`,
clean ones 1: copying and correcting are both learned), over the block's tokens.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from specdiff.training.objectives.heads import block_causal, hidden, logits
from specdiff.training.objectives.masked import MASK_EPS


def uniform_diffusion(model, batch: dict, generator: torch.Generator | None = None) -> torch.Tensor:
    """The module docstring's loss."""
    x0, keys, block, cut = batch["ids"], batch["keys"], batch["noisable"], batch["cut"]
    b, length = x0.shape
    t_min, t_max = batch.get("t_min", MASK_EPS), batch.get("t_max", 1.0)
    t = t_min + (t_max - t_min) * torch.rand(b, 1, generator=generator)  # [b, 1]
    noised = block & (torch.rand(x0.shape, generator=generator) < t)  # [b, L]
    if batch.get("suffix_prob", 0.0) > 0:
        offset = (torch.rand(b, 1, generator=generator) * batch["block_tokens"]).long()  # [b, 1] in 0..B-1
        use = torch.rand(b, 1, generator=generator) < batch["suffix_prob"]
        suffix = block & (torch.arange(length)[None, :] >= cut[:, None] + offset)
        noised = torch.where(use, suffix, noised)
    vocab = model.config.get_text_config().vocab_size
    tokens = torch.where(noised, torch.randint(0, vocab, x0.shape, generator=generator), x0)
    states = hidden(model, tokens, block_causal(keys, block, cut), torch.arange(length)[None, :].expand(b, length))
    chosen = block[:, 1:]  # Dream's shift: the output at j - 1 is token j's distribution
    ce = F.cross_entropy(logits(model, states[:, :-1][chosen]), x0[:, 1:][chosen], reduction="none")
    weight = torch.where(noised[:, 1:][chosen], batch.get("noised_weight", 1.0), 1.0)
    return (ce * weight).sum() / block.sum()
