"""The KV-cached target model of speculative decoding.

The prompt is encoded once (`start`). Each round is ONE forward over the new tokens only, the last
committed token and the B drafted ones, on the cached prefix (`score`), which gives the target
distributions p_1..p_{B+1}; `commit` then keeps in the cache only the last committed token and the
accepted drafted tokens. The prompt is never re-encoded.

The batch is left-padded and right-aligned; rows that keep different numbers of tokens are
compacted with one gather per layer (`specdiff.lm.cache.keep_columns`), a crop at batch 1.

Hybrid models (Gated DeltaNet, Mamba-2, short convolutions: `specdiff.lm.state`) also keep recurrent and
convolution state: `score` snapshots it and records each stateful layer's kernel inputs, and `commit`
rolls every row back to its kept prefix (conv windows gathered from the chunk's inputs, recurrent states
replayed with the rejected columns' step sizes zeroed; nothing replayed when every row kept everything).
A model whose chunked kernel cannot be replayed (Jamba) is scored one token per forward with a copy of
its state after each, and `rollback_stats["stepwise_forwards"]` counts those forwards.

p is shaped exactly as the model's own sampling would shape it: temperature, then top-k, then
top-p, as transformers' generate applies them. `score` returns those sampling logits (-inf on
excluded tokens), which `specdiff.verify(..., inputs="logits")` takes directly.
"""
from __future__ import annotations

import torch

from specdiff.lm.cache import cache_kwargs, keep_columns, new_cache
from specdiff.lm.masks import position_ids
from specdiff.lm.state import check_stateful_layers, is_stateful
from specdiff.lm.sampling import check_finite, check_sampling, sampling_logits


class Verifier:
    """model: any transformers causal LM (`AutoModelForCausalLM`), e.g. `specdiff.zoo.load("verifier")`."""

    def __init__(self, model, temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0):
        check_sampling(temperature, top_p, top_k, "Verifier")
        self.model, self.temperature, self.top_p, self.top_k = model, temperature, top_p, top_k
        self.cache, self.cache_mask, self.rounds = None, None, 0
        self.stateful = is_stateful(model)
        if self.stateful:
            check_stateful_layers(model)  # an unknown stateful layer is refused here, before any generation

    @property
    def rollback_stats(self) -> dict | None:
        """Counts and seconds of the state rollbacks (`specdiff.lm.state`), None for attention-only models."""
        return dict(self.cache.stats) if self.stateful and self.cache is not None else None

    @property
    def vocab_size(self) -> int:
        return int(self.model.config.vocab_size)

    @property
    def max_length(self) -> int | None:
        return getattr(self.model.config, "max_position_embeddings", None)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @torch.inference_mode()
    def start(self, ids: torch.Tensor, key_mask: torch.Tensor,
              hidden_layers: tuple[int, ...] | None = None) -> torch.Tensor | None:
        """Prefills all of the left-padded prompts ids [b, P] but their last token (the first round's
        "last committed token"). Returns the hidden states of those P-1 columns when asked, else None."""
        self.cache, self.rounds = new_cache(self.model), 0
        self.cache_mask = key_mask[:, :0]
        if ids.shape[1] == 1:
            return None if hidden_layers is None else self._empty_hidden(ids, hidden_layers)
        _, hidden = self._forward(ids[:, :-1], key_mask[:, :-1], hidden_layers, logits=False)
        return hidden

    @torch.inference_mode()
    def score(self, chunk: torch.Tensor, hidden_layers: tuple[int, ...] | None = None):
        """chunk [b, n]: the last committed token and the drafted ones. Returns (logits [b, n, V], the
        sampling logits of p_1..p_n, and the chunk's hidden states [b, n, H*] or None)."""
        self.rounds += 1
        chunk_mask = torch.ones_like(chunk, dtype=torch.bool)
        if not self.stateful:
            raw, hidden = self._forward(chunk, chunk_mask, hidden_layers)
        elif not self.cache.stepwise:
            self.cache.begin()
            with self.cache.feeding(chunk.shape[1]):
                raw, hidden = self._forward(chunk, chunk_mask, hidden_layers)
        else:  # one column per forward, every recurrent state copied after each
            self.cache.begin(checkpoints=True)
            outputs = []
            for column in range(chunk.shape[1]):
                outputs.append(self._forward(chunk[:, column:column + 1], chunk_mask[:, :1], hidden_layers))
                self.cache.checkpoint()
            self.cache.stats["stepwise_forwards"] += chunk.shape[1]
            self._last_chunk = chunk.shape[1]
            raw = torch.cat([o[0] for o in outputs], dim=1)  # [b, n, V]
            hidden = None if hidden_layers is None else torch.cat([o[1] for o in outputs], dim=1)
        check_finite(raw, "verifier", self.rounds)
        self._last_raw = raw
        return sampling_logits(raw, self.temperature, self.top_p, self.top_k), hidden

    def untruncated_logits(self) -> torch.Tensor:
        """The last scored chunk's logits at the verifier's temperature, before top-p / top-k, [b, n, V]
        (greedy at temperature 0): what a rule with support="untruncated" measures drafts against."""
        return sampling_logits(self._last_raw, self.temperature)

    @torch.inference_mode()
    def commit(self, num_kept: torch.Tensor) -> None:
        """num_kept [b]: keep the first num_kept[r] columns of the last scored chunk in row r's cache."""
        scored = self._last_chunk
        if self.stateful:
            self.cache.rewind(num_kept)  # recurrent and convolution state: each row's kept prefix
        if self.cache_mask.shape[0] == 1:  # batch 1: a crop
            dropped = scored - int(num_kept[0])
            if dropped:
                self.cache.crop(-dropped)
                self.cache_mask = self.cache_mask[:, :-dropped]
            return
        keep = self.cache_mask.clone()
        keep[:, -scored:] = torch.arange(scored, device=keep.device)[None, :] < num_kept[:, None]
        self.cache_mask = keep_columns(self.cache, keep)

    @torch.inference_mode()
    def select(self, rows: torch.Tensor) -> None:
        """Keep only the batch rows `rows` [n]."""
        self.cache.batch_select_indices(rows)
        self.cache_mask = keep_columns(self.cache, self.cache_mask[rows])

    def _forward(self, chunk, chunk_mask, hidden_layers, logits: bool = True):
        full_mask = torch.cat([self.cache_mask, chunk_mask], dim=1)  # [b, C + n]
        positions = position_ids(full_mask)[:, -chunk.shape[1]:]
        attention = None if bool(full_mask.all()) else full_mask.long()
        out = self.model(input_ids=chunk, attention_mask=attention, position_ids=positions,
                         output_hidden_states=hidden_layers is not None, logits_to_keep=0 if logits else 1,
                         **cache_kwargs(self.model, self.cache))
        self.cache_mask, self._last_chunk = full_mask, chunk.shape[1]
        hidden = None
        if hidden_layers is not None:
            hidden = torch.cat([out.hidden_states[layer] for layer in hidden_layers], dim=-1)
        return out.logits, hidden

    def _empty_hidden(self, ids, hidden_layers):
        width = self.model.config.hidden_size * len(hidden_layers)
        return torch.zeros(ids.shape[0], 0, width, device=ids.device)
