"""DFlash drafter (Chen et al. 2026, "DFlash: block diffusion for flash speculative decoding"): one
denoising step over the block, conditioned on the verifier's hidden states.

The draft model is transformers' DFlash architecture (`MuseGlimmerAssistantModel`, driven in
transformers 5.24 by `DFlashTokenCandidateGenerator`): a few decoder layers whose keys and values
are the concatenation of (a) a projection of the verifier's hidden states at `target_layer_ids` for
every committed token (`context_hidden_states`) and (b) the block being drafted. The block is
[last committed token (the anchor), B mask tokens], embedded with the verifier's own input
embeddings; its outputs 1..B go through the verifier's LM head. As in transformers, the context's
keys and values are cached across rounds and the block's are dropped after each step, so no
committed token is ever re-projected.

The engine passes the hidden states through the drafter contract (`verifier_hidden_layers`, see
`specdiff.drafters.base`): layer index i of `target_layer_ids` is `output_hidden_states[i + 1]`.

A reduced draft vocabulary (`draft_to_target`, d2t: specdiff's distilled drafters, `specdiff distill`):
the head is the verifier's LM head restricted to those rows, so it costs V_d / V of the verifier's, and q
is 0 outside them (`Drafter.trim`).

Anchor state (`config.specdiff_anchor_state`, specdiff's distilled drafters): the block's input embeddings
also get the projected verifier state of the token just before the anchor (the context projection applied
to it), so every block position sees the verifier's latest state directly rather than having to find it by
attention; the drafter keeps that state per row (`start`, `commit`, `select`).

Width (issue 51, item 1): attention inside the block is bidirectional, so every slot's output depends on how many
slots the block has. A drafter runs at a width it was trained at: a draft of B tokens is the first B of a block
[anchor, W - 1 masks] with W the smallest trained width >= B + 1 (the slots past B are masks whose outputs are
dropped; a block wider than any trained width runs at B + 1). The trained widths are the config's
`specdiff_trained_widths` (the anchor included), else its `block_size`. `at_trained_width=False` drafts from
[anchor, B masks] as before (the ablation's "before" row).

Reading the anchor (DSpark's `sample_from_anchor`, config `sample_from_anchor`): the anchor slot's output predicts
the token after the anchor, slot k the one k after it, so a draft of B reads slots 0..B - 1 of a block of width
>= B; without it (DFlash) slot 0 predicts nothing and a draft of B reads slots 1..B of a block of width >= B + 1.

Markov head (DSpark; config `markov_rank` r > 0): a low-rank bias on the draft vocabulary from the token before
each drafted position, logits_k += markov_w1[row(x_{k-1})] @ markov_w2 with markov_w1 [V_d + 1, r] (the last row
for a previous token outside the draft vocabulary) and markov_w2 [r, V_d]; x_0 is the anchor, x_{k-1} for k > 1
the token drafted at k - 1, so the draft is chosen position by position (`markov_bias`).

Lean forward (`specdiff.drafters.dflash_lean`): for the plain architecture (full attention, default rope, SiLU,
SDPA) the model call is the same arithmetic in plain torch ops, with its own key/value storage (`LeanCache`):
the HF stack's per-module overhead was most of a proposal. Any other model keeps the transformers call.

Exactness (marginal mode): exact. One step: given the committed tokens, the B tokens are drawn
independently, each from its q (the paper's K = 1 case). The paper drafts with DFlash greedily
(temperature 0: q is a point mass on the argmax, and marginal verification is point-mass
verification); then the drafter is a `point_mass` drafter and forms no distribution at all: the argmax of its
(draft-vocabulary) logits, mapped to the verifier's ids, is the draft (issue 41, item 3: no scatter into the
49,152 ids and no softmax over them per position).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from specdiff.drafters.base import Draft, Drafter
from specdiff.drafters.dflash_lean import LeanCache, lean_block_states, lean_weights, project_context
from specdiff.drafters.registry import KindSpec, register
from specdiff.lm.cache import keep_columns
from specdiff.lm.masks import position_ids
from specdiff.lm.sampling import check_finite, check_sampling, sampling_probs


class DFlashDrafter(Drafter):
    """model: a DFlash draft model (`MuseGlimmerAssistantModel`); target: the verifier's causal LM (or an
    `sd.Verifier`), whose input embeddings and LM head the drafter shares."""

    exact_marginal = True

    def __init__(self, model, target, temperature: float = 0.0, top_p: float = 1.0, top_k: int = 0,
                 mask_token_id: int | None = None, draft_to_target: torch.Tensor | None = None,
                 at_trained_width: bool = True):
        check_sampling(temperature, top_p, top_k, "DFlashDrafter")
        target = getattr(target, "model", target) if not hasattr(target, "get_output_embeddings") else target
        config = model.config
        for name in ("target_layer_ids", "block_size"):
            if getattr(config, name, None) is None:
                raise ValueError(f"{type(model).__name__} is not a DFlash draft model: its config has no {name}")
        if config.hidden_size != target.config.hidden_size:
            raise ValueError(f"the DFlash model's hidden size ({config.hidden_size}) differs from its target's "
                             f"({target.config.hidden_size}): it was trained for another verifier")
        self.model, self.target = model, target
        self.temperature, self.top_p, self.top_k = temperature, top_p, top_k
        self.point_mass = temperature == 0  # greedy drafts are deterministic: verified with q = onehot(y)
        self.mask_token_id = int(config.mask_token_id if mask_token_id is None else mask_token_id)
        if not 0 <= self.mask_token_id < target.get_input_embeddings().weight.shape[0]:
            raise ValueError(f"mask_token_id {self.mask_token_id} is outside the verifier's embedding table")
        self.verifier_hidden_layers = tuple(int(i) + 1 for i in config.target_layer_ids)
        self.trained_widths = trained_widths(config)  # block widths trained at, the anchor included
        self.at_trained_width = bool(at_trained_width)
        self.read_anchor = bool(getattr(config, "sample_from_anchor", False))  # DSpark: slot 0 predicts a + 1
        self.markov = getattr(model, "markov_w1", None) is not None  # DSpark's Markov head (module docstring)
        self.cache = self.cache_mask = self.pending = self.pending_mask = self.last_state = None
        self.anchor_state = bool(getattr(config, "specdiff_anchor_state", False))
        self.lean = lean_weights(model)  # None: a model the lean forward does not know, run by transformers
        head = target.get_output_embeddings().weight  # [V, H]
        if draft_to_target is not None:
            self.draft_to_target = torch.as_tensor(draft_to_target, dtype=torch.long, device=head.device)
            self.target_vocab = int(head.shape[0])
            if int(self.draft_to_target.max()) >= self.target_vocab or int(self.draft_to_target.min()) < 0:
                raise ValueError(f"draft_to_target names ids outside the verifier's {self.target_vocab}-token head")
            self.head_weight = head.detach()[self.draft_to_target]  # [V_d, H]: the draft vocabulary's rows
        else:
            self.head_weight = None
        if self.markov:  # verifier id -> row of markov_w1 (the last row: outside the draft vocabulary)
            rows = model.markov_w1.shape[0] - 1
            self.markov_row = torch.full((int(head.shape[0]),), rows, dtype=torch.long, device=head.device)
            self.markov_row[self.draft_to_target if draft_to_target is not None else torch.arange(rows)] = \
                torch.arange(rows, device=head.device)

    @property
    def model_vocab_size(self) -> int:
        return int(self.target.config.get_text_config().vocab_size)

    @property
    def max_length(self) -> int | None:
        return getattr(self.target.config, "max_position_embeddings", None)

    @torch.inference_mode()
    def start(self, ids, key_mask, verifier_hidden=None) -> None:
        """verifier_hidden [b, P-1, H * layers]: the verifier's states of all prompt tokens but the last."""
        from transformers import DynamicCache

        if verifier_hidden is None:
            raise ValueError("DFlashDrafter needs the verifier's hidden states: run it through "
                             "sd.SpeculativeGenerator, which passes them (drafter.verifier_hidden_layers)")
        self.cache = DynamicCache() if self.lean is None else LeanCache(len(self.lean.layers))
        self.cache_mask = key_mask[:, :0]
        self.pending, self.pending_mask = verifier_hidden, key_mask[:, : verifier_hidden.shape[1]]
        if verifier_hidden.shape[1]:  # [b, H * layers]: the state of the token before the anchor (left-padded rows)
            self.last_state = verifier_hidden[:, -1]
        else:
            self.last_state = verifier_hidden.new_zeros(verifier_hidden.shape[0], verifier_hidden.shape[2])

    @torch.inference_mode()
    def propose(self, ids: torch.Tensor, key_mask: torch.Tensor, block_size: int,
                generator: torch.Generator | None = None) -> Draft:
        """ids [b, L] committed tokens, left-padded. Returns Draft(tokens [b, B], probs [b, B, V])."""
        batch = ids.shape[0]
        logits = self._block_logits(ids, block_size)  # [b, B, V or V_d]
        if self.markov:
            return self._propose_markov(ids, logits, generator)
        logits32 = logits.float()  # [b, B, V or V_d]
        confidence = torch.exp(logits32.amax(-1) - torch.logsumexp(logits32, -1))  # [b, B]: max softmax, unformed
        if self.point_mass:  # greedy: the argmax row, no distribution over the verifier's vocabulary formed
            if self.draft_to_target is None:
                tokens = self.trim(logits).argmax(-1)  # [b, B]: a verifier id (trim: a view)
            else:
                tokens = self.draft_to_target[logits.argmax(-1)]  # [b, B]: a draft-vocabulary row, to its id
            return Draft(tokens=tokens, probs=None, confidence=confidence)
        probs = sampling_probs(self.trim(logits), self.temperature, self.top_p, self.top_k)  # [b, B, V]
        tokens = torch.multinomial(probs.view(-1, probs.shape[-1]), 1, generator=generator).view(batch, block_size)
        return Draft(tokens=tokens, probs=probs, confidence=confidence)

    def _propose_markov(self, ids: torch.Tensor, logits: torch.Tensor, generator) -> Draft:
        """Position by position: the Markov bias from the token before (the anchor, then each drafted token)."""
        batch, block_size = logits.shape[:2]
        previous = ids[:, -1]  # [b]: the anchor
        tokens, probs, confidence = [], [], []
        for k in range(block_size):
            row = logits[:, k] + markov_bias(self.model, self.markov_row[previous]).to(logits.dtype)  # [b, V or V_d]
            row32 = row.float()
            confidence.append(torch.exp(row32.amax(-1) - torch.logsumexp(row32, -1)))
            if self.point_mass:
                previous = (self.trim(row).argmax(-1) if self.draft_to_target is None
                            else self.draft_to_target[row.argmax(-1)])
            else:
                law = sampling_probs(self.trim(row), self.temperature, self.top_p, self.top_k)  # [b, V]
                previous = torch.multinomial(law, 1, generator=generator)[:, 0]
                probs.append(law)
            tokens.append(previous)
        return Draft(tokens=torch.stack(tokens, 1), probs=torch.stack(probs, 1) if probs else None,
                     confidence=torch.stack(confidence, 1))

    @torch.inference_mode()
    def propose_tree(self, ids: torch.Tensor, depth: int, budget: int):
        """A draft tree at batch 1 (`specdiff.engine.tree`): DDTree's best-first tree of at most `budget` nodes
        over the block's per-position marginals (log-softmax of the logits, before any temperature)."""
        from specdiff.drafters.tree import Tree, best_first_tree

        logits = self._block_logits(ids, depth)[0].float()  # [D, V or V_d]
        tree = best_first_tree(torch.log_softmax(logits, dim=-1), budget)
        if self.draft_to_target is None:
            return tree
        ids_of = self.draft_to_target.tolist()
        return Tree([ids_of[t] for t in tree.tokens], tree.parents)

    def width(self, block_size: int) -> int:
        """The block's width W (anchor included) for a draft of block_size tokens (module docstring, "Width")."""
        needed = block_size + (0 if self.read_anchor else 1)  # slots the draft reads, the anchor's included
        if not self.at_trained_width:
            return needed
        return next((w for w in self.trained_widths if w >= needed), needed)

    def _block_logits(self, ids: torch.Tensor, block_size: int) -> torch.Tensor:
        """One step over [anchor, W - 1 masks] on the cached context: the first B slots' logits [b, B, V or V_d]."""
        if self.cache is None:
            raise ValueError("DFlashDrafter.propose before start: it needs the verifier's hidden states")
        batch, device = ids.shape[0], ids.device
        slots = self.width(block_size) - 1  # W - 1 mask slots run; the first B are kept
        masks = torch.full((batch, slots), self.mask_token_id, dtype=ids.dtype, device=device)
        noise = self.target.get_input_embeddings()(torch.cat([ids[:, -1:], masks], dim=1))  # [b, W, H]
        dtype, pending = self.model.dtype, self.pending.shape[1]
        if self.lean is not None:  # the pending states and (anchor state) the anchor's predecessor: one fc product
            extra = [self.last_state[:, None].to(self.pending.dtype)] if self.anchor_state else []
            projected = project_context(self.lean, torch.cat([self.pending, *extra], dim=1).to(dtype))  # [b, T(+1), H]
            context, anchor = projected[:, :pending], projected[:, pending:]
        else:
            anchor = self.model.encoder(self.last_state.to(dtype))[:, None] if self.anchor_state else None  # [b, 1, H]
        if self.anchor_state:
            noise = noise + anchor.to(noise.dtype)
        block_mask = torch.ones(batch, slots + 1, dtype=torch.bool, device=device)
        full_mask = torch.cat([self.cache_mask, self.pending_mask, block_mask], dim=1)  # [b, C + T + W]
        positions = position_ids(full_mask)[:, -(pending + slots + 1):]  # [b, T + W]
        if self.lean is not None:
            states = lean_block_states(self.lean, self.cache, noise.to(dtype), context, positions,
                                       full_mask)  # [b, W, H]
        else:
            attend = full_mask[:, None, None, :].expand(batch, 1, slots + 1, full_mask.shape[1])
            types = set(getattr(self.model.config, "layer_types", None) or ["full_attention"])
            states = self.model(noise_embeds=noise.to(dtype), context_hidden_states=self.pending.to(dtype),
                                position_ids=positions, attention_mask={t: attend for t in types},
                                cache=self.cache).last_hidden_state  # [b, W, H]
        self.cache.crop(-(slots + 1))  # the block's keys and values: never kept
        self.cache_mask = keep_columns(self.cache, full_mask[:, : -(slots + 1)])
        self.pending, self.pending_mask = self.pending[:, :0], self.pending_mask[:, :0]
        head = self.target.get_output_embeddings()
        first = 0 if self.read_anchor else 1  # the slot that predicts the token after the anchor
        states = states[:, first:first + block_size].to(head.weight.dtype)  # [b, B, H]: slots past B are dropped
        weight = head.weight if self.head_weight is None else self.head_weight  # [V or V_d, H]
        # as rows [b * B, H]: a 3-D product without bias goes through bmm on the CPU, which copies the transposed
        # weight every round (about 8 of a 15 ms proposal, profiled at 1 thread)
        bias = head.bias if self.head_weight is None else None
        rows = states.reshape(-1, states.shape[-1])  # [b * B, H]
        logits = F.linear(rows, weight, bias).view(batch, block_size, -1)  # [b, B, V or V_d]
        check_finite(logits, "drafter")
        return logits

    @torch.inference_mode()
    def commit(self, num_accepted: torch.Tensor, verifier_hidden: torch.Tensor | None = None) -> None:
        """verifier_hidden [b, B + 1, H * layers]: row r's first num_accepted[r] + 1 are committed. They join the
        states not yet projected (none after a proposal; a skipped round's otherwise)."""
        if verifier_hidden is None:
            raise ValueError("DFlashDrafter.commit needs the verifier's hidden states of the round")
        rows = torch.arange(verifier_hidden.shape[0], device=verifier_hidden.device)
        self.last_state = verifier_hidden[rows, num_accepted.to(verifier_hidden.device)]  # the new anchor's predecessor
        columns = torch.arange(verifier_hidden.shape[1], device=verifier_hidden.device)[None, :]
        self.pending = torch.cat([self.pending, verifier_hidden.to(self.pending.dtype)], dim=1)
        self.pending_mask = torch.cat([self.pending_mask, columns <= num_accepted[:, None]], dim=1)

    skip = commit  # a round without its proposal: the same states to keep

    @torch.inference_mode()
    def select(self, rows: torch.Tensor) -> None:
        self.cache.batch_select_indices(rows)
        self.cache_mask = keep_columns(self.cache, self.cache_mask[rows])
        self.pending, self.pending_mask = self.pending[rows], self.pending_mask[rows]
        self.last_state = self.last_state[rows]


def trained_widths(config) -> list[int]:
    """The block widths a DFlash model was trained at, the anchor included, ascending: its config's
    `specdiff_trained_widths`, else its one `block_size` (module docstring, "Width")."""
    widths = getattr(config, "specdiff_trained_widths", None) or [int(config.block_size)]
    return sorted({int(w) for w in widths})


def markov_bias(model, rows: torch.Tensor) -> torch.Tensor:
    """DSpark's Markov head (module docstring): rows [...] of markov_w1 (the previous tokens' draft rows, V_d for
    one outside the draft vocabulary) -> the bias [..., V_d] on the next position's draft-vocabulary logits."""
    return model.markov_w1[rows] @ model.markov_w2


def add_markov_head(model, rank: int, draft_size: int) -> None:
    """markov_w1 [V_d + 1, r] (zeros: the head starts as no bias) and markov_w2 [r, V_d] (small random) on `model`,
    saved and loaded with its weights under those names."""
    dtype = next(model.parameters()).dtype
    model.markov_w1 = torch.nn.Parameter(torch.zeros(draft_size + 1, rank, dtype=dtype))
    model.markov_w2 = torch.nn.Parameter(torch.randn(rank, draft_size, dtype=dtype) * rank ** -0.5)


class DFlashKind(KindSpec):
    """DFlash draft models (a config with `target_layer_ids` and `block_size`, e.g. `MuseGlimmerAssistantModel`):
    one step per block on the verifier's hidden states; built beside its verifier (`target`)."""

    rank = 3
    distilled_rank = 0

    name, zoo_model, distilled_role, priority = "dflash", "dflash-drafter", "distilled-dflash", 30
    describes = "DFlash draft models (config with target_layer_ids and block_size)"
    option_keys = ("mask_token_id", "at_trained_width")
    needs_target = True

    def recognise(self, config):
        return config.get("specdiff_role") == "dflash-drafter" or (
            config.get("target_layer_ids") is not None and "block_size" in config)

    def loader(self, config, transformers):
        known = [getattr(transformers, a) for a in config.get("architectures") or [] if hasattr(transformers, a)]
        return known[0] if known else transformers.AutoModel

    def build(self, model, config, defaults, tokenizer, target=None, **options):
        self.check_options(options)
        if target is None:
            raise ValueError("a DFlash drafter needs the verifier it was trained for: load(..., verifier=sd.Verifier(...))")
        return DFlashDrafter(model, target, **{**defaults, **options})

    def build_distilled(self, model, verifier, draft_to_target, **options):
        self.check_options(options)
        return DFlashDrafter(model, verifier, draft_to_target=draft_to_target, **{"temperature": 0.0, **options})

    def trained_block(self, config):
        """A distilled DFlash drafter's trained block (its config's block_size, the anchor excluded)."""
        return int(config["block_size"]) - 1 if config.get("specdiff_role") == self.distilled_role else None

    def distilled_model(self, model_config, weights, target, draft_to_target):
        import transformers

        model = transformers.MuseGlimmerAssistantModel(model_config)
        rank = int(getattr(model_config, "markov_rank", 0) or 0)
        if rank:
            add_markov_head(model, rank, int(weights["markov_w2"].shape[1]))
        return model, set()


register(DFlashKind())
