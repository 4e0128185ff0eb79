"""Small autoregressive drafter: the classic speculative-decoding baseline (Leviathan et al. 2023).

Drafts B tokens one at a time with a KV cache, each sampled from the drafter's filtered next-token
distribution given the tokens to its left — so marginal-mode verification is exact for it.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from specdiff.drafters.base import Draft, Drafter, cache_kwargs, filter_logits


@dataclass
class AutoregressiveDrafter(Drafter):
    """model: a causal LM, e.g. `specdiff.zoo.load("ar-drafter")`."""

    model: torch.nn.Module
    temperature: float = 0.7
    top_p: float = 0.8
    top_k: int = 20

    @torch.no_grad()
    def draft(self, prefix: torch.Tensor, prefix_mask: torch.Tensor | None, block_size: int,
              generator: torch.Generator | None = None) -> Draft:
        """prefix [b, P] left-padded, prefix_mask [b, P]. Returns Draft(tokens [b, B], probs [b, B, V])."""
        from transformers import DynamicCache

        if prefix_mask is None:
            prefix_mask = torch.ones_like(prefix)
        attention_mask = prefix_mask.long()
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)  # [b, P]
        cache = DynamicCache(config=self.model.config)
        logits = self.model(input_ids=prefix, attention_mask=attention_mask, position_ids=position_ids,
                            **cache_kwargs(self.model, cache)).logits[:, -1].float()  # [b, V]
        tokens, probs = [], []
        for i in range(block_size):
            if self.temperature == 0:
                step_probs = torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
            else:
                step_probs = torch.softmax(filter_logits(logits / self.temperature, self.top_p, self.top_k), -1)
            token = torch.multinomial(step_probs, 1, generator=generator)  # [b, 1]
            tokens.append(token)
            probs.append(step_probs)
            if i + 1 == block_size:
                break
            attention_mask = torch.cat([attention_mask, torch.ones_like(token)], dim=1)
            position_ids = position_ids[:, -1:] + 1
            logits = self.model(input_ids=token, attention_mask=attention_mask, position_ids=position_ids,
                                **cache_kwargs(self.model, cache)).logits[:, -1].float()
        return Draft(tokens=torch.cat(tokens, dim=1), probs=torch.stack(probs, dim=1))
