"""The drafter contract: what the engine (`specdiff.engine.generate`) asks of every drafter.

A drafter is stateful. For each batch of prompts the engine calls, in this order:

    drafter.start(ids, key_mask)                   # once: the prompts, left-padded
    repeat until every row is done:
        draft = drafter.propose(ids, key_mask, B)  # B tokens per row, and q
        drafter.commit(num_accepted)               # how many of them were accepted
                                                   # (or skip(num_accepted): a round it did not propose for)
        drafter.select(rows)                       # only when some rows finished

Terms:
- committed tokens: the prompt and every generated token so far. The engine owns them: `ids`
  [b, L] left-padded (row r's tokens are its last `key_mask[r].sum()` columns, the newest last),
  passed again to every `propose`. After a round the engine appends the accepted drafted tokens
  and one correction or bonus token, so the newest committed token was never proposed.
- q: `Draft.probs` [b, B, V], the distribution each drafted token was sampled from, as
  `specdiff.verify` takes it; the engine passes None instead in point-mass mode.
- exact marginal: `drafter.exact_marginal` is True when each drafted token was drawn from its q
  given the drafted tokens to its left (autoregressive drafting, one denoising step, strictly
  left-to-right unmasking). Then marginal-mode verification is lossless (docs/architecture.md, Exactness).

What a drafter may keep: anything it can reuse, typically a KV cache of the committed tokens. It
learns how much of its proposal survived from `commit(num_accepted)` and crops what it cached for
rejected tokens; the tokens it has not cached yet are the last columns of the next `ids`.

Verifier hidden states (DFlash, EAGLE): a drafter that sets `verifier_hidden_layers` (a tuple of
layer indices into `output_hidden_states`) gets the verifier's hidden states of every committed
token exactly once: those of the prompt (all but its last token) in `start(..., verifier_hidden=)`,
and those of each round's verifier input [last committed token, y_1..y_B] in
`commit(..., verifier_hidden=)`, where row r's committed ones are the first num_accepted[r] + 1.
Each is [b, T, H * len(layers)]. When no drafter asks, the verifier computes none: the default
`verifier_hidden_layers = None` costs nothing.

Reduced draft vocabulary (EAGLE-3's d2t, FR-Spec): a drafter whose head covers only some of the verifier's
tokens sets `draft_to_target` [V_d] (the verifier id of each of its output rows, distinct). `trim` scatters
its logits [..., V_d] into the verifier's vocabulary [..., V] with -inf elsewhere, so q is 0 outside the
draft vocabulary and every `Draft.probs` row is a distribution over the verifier's ids as usual; the
drafter's input side still reads every verifier id. `fit_vocabulary` checks the index against the verifier.

Ragged drafts: a drafter may end some rows' drafts early (`Draft.lengths` [b], possibly 0: prompt
lookup without a match); the engine then verifies row r on its first lengths[r] tokens only.

Planned drafts (`specdiff.engine.controllers`): with a controller the engine calls
`propose_planned(ids, key_mask, plan)` instead of `propose`; `plan` gives per row the longest draft
B_r, the steps K_r and a confidence floor. The default drafts max B_r tokens with `propose` and ends
row r's draft at B_r, or with its first position whose confidence is below the floor; `Draft.lengths` [b] says where each draft ends. A multi-step drafter (masked, block) also
spends K_r steps and stops denoising early (`specdiff.drafters.unmasking.unmask_planned`).
Confidence (`Draft.confidence` [b, B]): the largest probability of the drafter's untempered output
at a position when it was sampled, a function of the drafter's state, never of the drawn token;
drafters that do not give it are read from `Draft.probs` (its largest entry).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from specdiff.lm.sampling import filter_logits  # noqa: F401  (re-exported: drafters' users import it here)


@dataclass
class Draft:
    tokens: torch.Tensor  # [b, B] long: the drafted tokens y_1..y_B
    probs: torch.Tensor | None  # [b, B, V]: q_i, the distribution y_i was sampled from; None: not recorded
    lengths: torch.Tensor | None = None  # [b] long: row r's draft is tokens[r, :lengths[r]]; None: all B
    confidence: torch.Tensor | None = None  # [b, B]: each position's confidence (module docstring); None: from probs


class Drafter:
    """Base class of every drafter; subclasses implement `propose` and whatever state they keep."""

    verifier_hidden_layers: tuple[int, ...] | None = None  # see module docstring
    exact_marginal: bool = False  # q_i is exactly the law of y_i given the drafted tokens to its left
    output_vocab: int | None = None  # set by `specdiff.drafters.vocab.fit_vocabulary`: drop rows >= it
    point_mass: bool = False  # the draft is deterministic (prompt lookup): always verified with q = onehot(y)
    draft_to_target: torch.Tensor | None = None  # [V_d] long: verifier id of each output row (module docstring)
    target_vocab: int | None = None  # the verifier's vocabulary size, with draft_to_target

    @property
    def model_vocab_size(self) -> int | None:
        """Rows of the drafter model's output (its embedding size); None for a drafter without a model, which
        drafts ids it has read and so fits any verifier (prompt lookup)."""
        model = getattr(self, "model", None)
        return None if model is None else int(model.config.get_text_config().vocab_size)

    @property
    def vocab_size(self) -> int:
        """Size of the distributions in `Draft.probs` (must equal the verifier's): the model's rows, or
        fewer where `fit_vocabulary` dropped the rows the verifier lacks; the verifier's with a draft vocabulary."""
        if self.draft_to_target is not None and self.target_vocab is not None:
            return int(self.target_vocab)
        return self.model_vocab_size if self.output_vocab is None else int(self.output_vocab)

    def adopt_vocabulary(self, vocab_size: int) -> None:
        """A drafter without a model takes the verifier's vocabulary size (`fit_vocabulary`)."""
        if getattr(self, "model", None) is None:
            self.output_vocab = int(vocab_size)

    def trim(self, logits: torch.Tensor) -> torch.Tensor:
        """logits [..., V_model] -> [..., vocab_size]: the rows the verifier has (a view, no copy); with a draft
        vocabulary, logits [..., V_d] scattered to [..., V] with -inf at the ids outside it."""
        if self.draft_to_target is not None:
            full = logits.new_full((*logits.shape[:-1], int(self.target_vocab)), float("-inf"))
            return full.index_copy_(-1, self.draft_to_target.to(logits.device), logits)
        return logits if self.output_vocab is None else logits[..., : self.output_vocab]

    @property
    def max_length(self) -> int | None:
        """The longest sequence (prompt + generated + one block) the drafter's model takes, if known."""
        config = getattr(getattr(self, "model", None), "config", None)
        config = config.get_text_config() if config is not None else None
        return getattr(config, "max_position_embeddings", None)

    @torch.inference_mode()
    def start(self, ids: torch.Tensor, key_mask: torch.Tensor,
              verifier_hidden: torch.Tensor | None = None) -> None:
        """Begin on a batch of prompts: ids [b, P] left-padded, key_mask [b, P] bool."""

    def propose(self, ids: torch.Tensor, key_mask: torch.Tensor, block_size: int,
                generator: torch.Generator | None = None) -> Draft:
        """Propose block_size tokens after each row of the committed tokens ids [b, L]."""
        raise NotImplementedError

    @torch.inference_mode()
    def commit(self, num_accepted: torch.Tensor, verifier_hidden: torch.Tensor | None = None) -> None:
        """num_accepted [b]: how many leading tokens of the last proposal were accepted."""

    @torch.inference_mode()
    def skip(self, num_accepted: torch.Tensor, verifier_hidden: torch.Tensor | None = None) -> None:
        """A round verified without this drafter's proposal (a hybrid proposer's free draft): its committed tokens
        reach the drafter in the next `ids`, as always; a drafter fed the verifier's hidden states takes this
        round's here (the first num_accepted[r] + 1 of row r, as in `commit`)."""

    @torch.inference_mode()
    def select(self, rows: torch.Tensor) -> None:
        """Keep only the batch rows `rows` [n] (the others finished)."""

    def exact_marginal_with(self, steps_vary: bool = False, reorders: bool = False) -> bool:
        """Whether q stays the exact marginal under a controller that sets the steps per row and round
        (steps_vary) or unmasks confident positions first (reorders); drafters that ignore both: as is."""
        return self.exact_marginal

    def propose_tree(self, ids: torch.Tensor, depth: int, budget: int):
        """A draft tree at batch 1 (`specdiff.engine.tree`): by default one branch, this drafter's draft of
        min(depth, budget) tokens. The tree rule is exact for any tree, however it was drawn."""
        from specdiff.drafters.tree import chain_tree

        draft = self.propose(ids, torch.ones_like(ids, dtype=torch.bool), min(depth, budget))
        length = draft.tokens.shape[1] if draft.lengths is None else int(draft.lengths[0])
        return chain_tree(draft.tokens[0, :length].tolist())

    def propose_planned(self, ids: torch.Tensor, key_mask: torch.Tensor, plan,
                        generator: torch.Generator | None = None) -> Draft:
        """A draft after a controller's plan (`specdiff.engine.controllers.RoundPlan`): max B_r tokens by
        `propose`, then each row's length from B_r and the confidence floor (module docstring)."""
        return bound_draft(self.propose(ids, key_mask, plan.max_block, generator), plan)

    def draft(self, prefix: torch.Tensor, prefix_mask: torch.Tensor | None, block_size: int,
              generator: torch.Generator | None = None) -> Draft:
        """Stateless one-off proposal after a left-padded prefix [b, P] (start, propose, nothing kept)."""
        if prefix_mask is None:
            prefix_mask = torch.ones_like(prefix, dtype=torch.bool)
        self.start(prefix, prefix_mask.bool())
        return self.propose(prefix, prefix_mask.bool(), block_size, generator)


def point_mass_draft(drafts: list[list[int]], device) -> Draft:
    """Deterministic drafts side by side (prompt lookup, datastore, a hybrid's free drafts): tokens [b, W] with
    W the longest (>= 1: rows past their length hold a filler that is never verified), probs None, lengths [b]."""
    tokens = torch.zeros(len(drafts), max(1, max(len(d) for d in drafts)), dtype=torch.long)
    for r, draft in enumerate(drafts):
        tokens[r, : len(draft)] = torch.tensor(draft, dtype=torch.long)
    lengths = torch.tensor([len(d) for d in drafts], dtype=torch.long)
    return Draft(tokens=tokens.to(device), probs=None, lengths=lengths.to(device))


def bound_draft(draft: Draft, plan) -> Draft:
    """Sets draft.lengths [b]: B_r, or up to and with the first position whose confidence is below row r's
    floor, whichever is shorter. The confidence is draft.confidence, else the largest entry of draft.probs."""
    tokens = draft.tokens  # [b, B]
    limits = torch.tensor(plan.block_sizes, device=tokens.device).clamp(max=tokens.shape[1])  # [b]
    if draft.lengths is not None:  # a drafter that already ends some drafts early (prompt lookup)
        limits = torch.minimum(limits, draft.lengths)
    if plan.floors is not None:
        confidence = draft.confidence
        if confidence is None:
            if draft.probs is None:
                raise ValueError("a confidence floor needs the drafter's confidence or its probabilities")
            confidence = draft.probs.amax(-1)  # [b, B]
        floors = torch.tensor(plan.floors, device=tokens.device, dtype=confidence.dtype)[:, None]
        low = confidence < floors  # [b, B]
        first_low = torch.where(low.any(-1), low.int().argmax(-1) + 1, tokens.shape[1])  # [b]: ends with it
        limits = torch.minimum(limits, first_low)
    draft.lengths = limits
    return draft
