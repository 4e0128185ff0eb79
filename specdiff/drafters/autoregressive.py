"""Small autoregressive drafter: the classic speculative-decoding baseline (Leviathan et al. 2023),
and the first paper's Figure 2(b).

Drafts B tokens one at a time, each sampled from the drafter's filtered next-token distribution
given the tokens to its left, so marginal-mode verification is exact for it. At temperature 0 the draft is
the argmax chain, a deterministic function of the committed tokens: the drafter is then a `point_mass`
drafter and forms no distribution. It keeps its own KV
cache across rounds: each round feeds only the committed tokens it has not cached yet (the
correction or bonus token, and the last drafted token after a fully accepted round), and
`commit` crops what it cached for rejected drafts.

A hybrid drafter (recurrent or convolution state, `specdiff.lm.state`) drafts one token per forward
anyway, so it keeps a copy of its recurrent states after each drafted token and `commit` selects, per
row, the copy after its last accepted one (conv windows are gathered from the recorded inputs). Rows
whose pending tokens differ in number (a fully accepted row has two, the others one) are fed one
column per forward, the rows without a token in a column rolled back at once.
"""
from __future__ import annotations

import torch

from specdiff.drafters.base import Draft, Drafter
from specdiff.drafters.registry import KindSpec, register
from specdiff.lm.cache import cache_kwargs, keep_columns, new_cache
from specdiff.lm.masks import position_ids
from specdiff.lm.sampling import check_finite, check_sampling, sample_rows, sampling_probs
from specdiff.lm.state import check_stateful_layers, is_stateful


class AutoregressiveDrafter(Drafter):
    """model: a causal LM, e.g. `specdiff.zoo.load("ar-drafter")`."""

    exact_marginal = True

    def __init__(self, model, temperature: float = 0.7, top_p: float = 0.8, top_k: int = 20):
        check_sampling(temperature, top_p, top_k, "AutoregressiveDrafter")
        self.model, self.temperature, self.top_p, self.top_k = model, temperature, top_p, top_k
        self.point_mass = temperature == 0  # greedy drafts are deterministic: verified with q = onehot(y)
        self.cache, self.cache_mask, self.drafted_in_cache = None, None, 0
        self.stateful = is_stateful(model)
        if self.stateful:
            check_stateful_layers(model)  # an unknown stateful layer is refused here, before any generation

    @torch.inference_mode()
    def start(self, ids, key_mask, verifier_hidden=None) -> None:
        self.cache = new_cache(self.model)
        self.cache_mask = key_mask[:, :0]  # [b, 0]: which cache columns hold real tokens
        self.drafted_in_cache = 0

    @torch.inference_mode()
    def propose(self, ids: torch.Tensor, key_mask: torch.Tensor, block_size: int,
                generator: torch.Generator | None = None) -> Draft:
        """ids [b, L] committed tokens, left-padded. Returns Draft(tokens [b, B], probs [b, B, V])."""
        if self.cache is None:
            self.start(ids, key_mask)
        pending = key_mask.sum(-1) - self.cache_mask.sum(-1)  # [b] committed tokens not cached yet, >= 1
        width = int(pending.max())
        columns = torch.arange(width, device=ids.device)[None, :]
        chunk_mask = columns >= (width - pending)[:, None]  # [b, width]: each row's own pending tokens
        ragged = self.stateful and width > 1 and self.cache_mask.shape[1] > 0 and (
            self.cache.stepwise or not bool(chunk_mask.all()))
        if ragged:
            logits = self._feed_by_column(ids[:, -width:], chunk_mask)
        else:
            logits = self._forward(ids[:, -width:], chunk_mask)  # [b, V]
        if self.stateful:
            self.cache.begin(checkpoints=True)
        tokens, probs, confidence = [], [], []
        for i in range(block_size):
            if self.point_mass:  # greedy: the argmax and its probability (a controller's floor), no q formed
                token = logits.argmax(-1, keepdim=True)  # [b, 1]
                confidence.append(torch.exp(logits.amax(-1) - torch.logsumexp(logits, -1)))  # [b]: max softmax, unformed
            else:
                step_probs = sampling_probs(logits, self.temperature, self.top_p, self.top_k)  # [b, V]
                token = sample_rows(step_probs, generator)[:, None]  # [b, 1]
                probs.append(step_probs)
            tokens.append(token)
            if i + 1 < block_size:  # the last drafted token is never fed: the verifier decides its successor
                logits = self._forward(token, torch.ones_like(token, dtype=torch.bool))
                if self.stateful:
                    self.cache.checkpoint()
        self.drafted_in_cache = block_size - 1
        return Draft(tokens=torch.cat(tokens, dim=1), probs=torch.stack(probs, dim=1) if probs else None,
                     confidence=torch.stack(confidence, dim=1) if confidence else None)

    def _forward(self, chunk: torch.Tensor, chunk_mask: torch.Tensor) -> torch.Tensor:
        """Feeds chunk [b, n] (chunk_mask False on columns to skip) on the cache; logits of the last column."""
        full_mask = torch.cat([self.cache_mask, chunk_mask], dim=1)  # [b, C + n]
        positions = position_ids(full_mask)[:, -chunk.shape[1]:]
        attention = None if bool(full_mask.all()) else full_mask.long()
        out = self.model(input_ids=chunk, attention_mask=attention, position_ids=positions, logits_to_keep=1,
                         **cache_kwargs(self.model, self.cache))
        self.cache_mask = full_mask
        check_finite(out.logits, "drafter")
        return self.trim(out.logits[:, -1]).float()

    def _feed_by_column(self, chunk: torch.Tensor, chunk_mask: torch.Tensor) -> torch.Tensor:
        """A hybrid drafter's ragged pending tokens chunk [b, w] (chunk_mask False left of each row's own), one
        column per forward: a row without a token in a column feeds a filler there and is rolled back at once
        (its key is masked out and dropped at commit). Returns the logits of the last column [b, V]."""
        for column in range(chunk.shape[1]):
            real = chunk_mask[:, column:column + 1]  # [b, 1]
            self.cache.begin(checkpoints=True)
            logits = self._forward(chunk[:, column:column + 1], real)
            self.cache.checkpoint()
            self.cache.rewind(real[:, 0].long())
        return logits

    @torch.inference_mode()
    def commit(self, num_accepted: torch.Tensor, verifier_hidden=None) -> None:
        """Keeps the cached drafted tokens that were accepted; drops the rest and skipped columns."""
        drafted = self.drafted_in_cache
        self.drafted_in_cache = 0
        if self.stateful:
            self.cache.rewind(torch.clamp(num_accepted, max=drafted))
        if self.cache_mask.shape[0] == 1:  # batch 1: a crop
            dropped = drafted - min(int(num_accepted[0]), drafted)
            if dropped:
                self.cache.crop(-dropped)
                self.cache_mask = self.cache_mask[:, :-dropped]
            return
        keep = self.cache_mask.clone()
        if drafted:
            keep[:, -drafted:] &= torch.arange(drafted, device=keep.device)[None, :] < num_accepted[:, None]
        self.cache_mask = keep_columns(self.cache, keep)

    @torch.inference_mode()
    def select(self, rows: torch.Tensor) -> None:
        self.cache.batch_select_indices(rows)
        self.cache_mask = keep_columns(self.cache, self.cache_mask[rows])


class AutoregressiveKind(KindSpec):
    """Causal LMs (*ForCausalLM: Qwen2, Qwen3, Gemma, Llama, ...): one token per forward; the only kind that can
    also be a verifier."""

    rank = 4
    distilled_rank = 1

    name, aliases, zoo_model, distilled_role, priority = "ar", ("autoregressive",), "ar-drafter", "distilled-ar", 90
    describes = "causal LMs (*ForCausalLM: Qwen2, Qwen3, Gemma, Llama, ...)"
    can_verify, ignores_effort, label = True, True, "AR drafter"

    def recognise(self, config):
        return ("ForCausalLM" in " ".join(config.get("architectures") or [])
                or config.get("specdiff_role") in ("verifier", "ar-drafter"))

    def build(self, model, config, defaults, tokenizer, target=None, **options):
        self.check_options(options)
        return AutoregressiveDrafter(model, **{**defaults, **options})

    def build_distilled(self, model, verifier, draft_to_target, **options):
        self.check_options(options)
        return AutoregressiveDrafter(model, **{"temperature": 0.0, "top_p": 1.0, "top_k": 0, **options})

    def distilled_model(self, model_config, weights, target, draft_to_target):
        """A small causal LM whose embeddings are the verifier's, tied to its head."""
        import transformers

        weights["model.embed_tokens.weight"] = target.get_input_embeddings().weight.detach()
        return transformers.AutoModelForCausalLM.from_config(model_config), {"lm_head.weight"}

    def finish_distilled(self, model):
        model.tie_weights()

    def article(self):
        return "an autoregressive"


register(AutoregressiveKind())
