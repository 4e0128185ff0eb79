"""The hybrid proposer: free drafts first, the model drafter otherwise (vLLM's n-gram-then-EAGLE rule).

Terms:
- free drafters: drafters without a model whose drafts are point masses, tried in order (prompt lookup, then
  the datastore); each reports per row the length of the match its draft came from (`match_lengths`);
- long match: a free draft from a match of at least `min_match` tokens;
- model drafter: a drafter with a model (DFlash, masked, AR), called only for the rows without a long match.

Per round: every free drafter proposes; a row takes the first free draft with a long match. When every row
has one, the model drafter is not called at all (it is told of the round with `skip`, so that a drafter fed
the verifier's hidden states keeps them); otherwise it proposes for the whole batch and the rows with a long
match take their free draft, with q = onehot(y) in place of the model's q.

Exactness: each row's draft is verified against the q it was drawn from: a point mass for a free draft (exact
for every rule, the first paper's Proposition 2), the model's q otherwise (exact where the model drafter's is).
Which of the two a row takes depends only on the committed tokens, never on the model's draw.
"""
from __future__ import annotations

import torch

from specdiff.drafters.base import Draft, Drafter, point_mass_draft
from specdiff.drafters.registry import KindSpec, register


class HybridDrafter(Drafter):
    """model: the model drafter; free: the free drafters (module docstring); min_match: a long match's length."""

    free_point_masses = True  # `Draft.probs` None on a round where every row took a free draft: point masses

    def __init__(self, model: Drafter, free: list[Drafter], min_match: int = 3):
        if not free:
            raise ValueError("a hybrid proposer needs at least one free drafter (lookup, datastore)")
        if int(min_match) < 1:
            raise ValueError(f"min_match must be >= 1, got {min_match}")
        self.drafter, self.free, self.min_match = model, list(free), int(min_match)
        self.model = getattr(model, "model", None)
        self.verifier_hidden_layers = model.verifier_hidden_layers
        self.exact_marginal = model.exact_marginal
        self.point_mass = model.point_mass  # a deterministic model drafter (greedy): every draft a point mass
        self.draft_to_target, self.target_vocab = model.draft_to_target, model.target_vocab
        self.called = False  # whether the model drafter proposed this round
        self.rounds = self.free_rounds = self.mixed_rounds = 0  # rounds; without a model call; with both in a batch

    @property
    def vocab_size(self) -> int:
        return self.drafter.vocab_size

    @property
    def model_vocab_size(self):
        return self.drafter.model_vocab_size

    def adopt_vocabulary(self, vocab_size: int) -> None:
        for drafter in (self.drafter, *self.free):
            drafter.adopt_vocabulary(vocab_size)

    @property
    def max_length(self) -> int | None:
        return self.drafter.max_length

    def exact_marginal_with(self, steps_vary: bool = False, reorders: bool = False) -> bool:
        return self.drafter.exact_marginal_with(steps_vary, reorders)

    def start(self, ids, key_mask, verifier_hidden=None) -> None:
        self.drafter.start(ids, key_mask, verifier_hidden=verifier_hidden)
        for drafter in self.free:
            drafter.start(ids, key_mask)

    def propose(self, ids: torch.Tensor, key_mask: torch.Tensor, block_size: int,
                generator: torch.Generator | None = None) -> Draft:
        """ids [b, L] committed tokens, left-padded. Returns Draft(tokens [b, W], probs [b, W, V] or None where
        every row took a free draft, lengths [b])."""
        batch = ids.shape[0]
        chosen: list[list[int] | None] = [None] * batch  # per row, its free draft (None: the model's)
        for drafter in self.free:
            draft = drafter.propose(ids, key_mask, block_size, generator)
            lengths = draft.lengths.tolist()
            for r, (n, tokens) in enumerate(zip(drafter.match_lengths, draft.tokens.tolist())):
                if chosen[r] is None and n >= self.min_match and lengths[r] > 0:
                    chosen[r] = tokens[: lengths[r]]
        self.rounds += 1
        self.called = any(c is None for c in chosen)
        if not self.called:  # every row has a long match: no model call
            self.free_rounds += 1
            return point_mass_draft(chosen, ids.device)
        draft = self.drafter.propose(ids, key_mask, block_size, generator)  # tokens [b, B], probs [b, B, V]
        lengths = torch.full((batch,), draft.tokens.shape[1], dtype=torch.long) if draft.lengths is None \
            else draft.lengths.cpu().clone()
        if any(c is not None for c in chosen):
            self.mixed_rounds += 1
            width = max(draft.tokens.shape[1], max(len(c) for c in chosen if c is not None))
            tokens = torch.zeros(batch, width, dtype=torch.long, device=ids.device)
            tokens[:, : draft.tokens.shape[1]] = draft.tokens
            probs = None
            if draft.probs is not None:
                probs = draft.probs.new_zeros(batch, width, draft.probs.shape[-1])  # [b, W, V]
                probs[:, : draft.probs.shape[1]] = draft.probs
            for r, free in enumerate(chosen):
                if free is None:
                    continue
                tokens[r] = 0
                tokens[r, : len(free)] = torch.tensor(free, dtype=torch.long)
                lengths[r] = len(free)
                if probs is not None:  # q = onehot(y): the free draft's law (the filler past its end too)
                    probs[r] = 0
                    probs[r, torch.arange(width), tokens[r]] = 1.0
            draft = Draft(tokens=tokens, probs=probs, lengths=lengths.to(ids.device))
        return draft

    def propose_tree(self, ids: torch.Tensor, depth: int, budget: int):
        """A draft tree at batch 1: the free drafts with a long match as branches, then the model drafter's tree,
        merged into one trie of at most `budget` nodes (free branches first)."""
        from specdiff.drafters.tree import chain_tree, merge_trees

        mask, branches = torch.ones_like(ids, dtype=torch.bool), []
        for drafter in self.free:
            draft = drafter.propose(ids, mask, depth)
            length = int(draft.lengths[0])
            if drafter.match_lengths[0] >= self.min_match and length:
                branches.append(chain_tree(draft.tokens[0, :length].tolist()))
        self.called, self.rounds = True, self.rounds + 1
        return merge_trees(*branches, self.drafter.propose_tree(ids, depth, budget), budget=budget)

    def commit(self, num_accepted: torch.Tensor, verifier_hidden: torch.Tensor | None = None) -> None:
        if self.called:
            self.drafter.commit(num_accepted, verifier_hidden)
        else:
            self.drafter.skip(num_accepted, verifier_hidden)
        for drafter in self.free:
            drafter.commit(num_accepted)

    def select(self, rows: torch.Tensor) -> None:
        self.drafter.select(rows)
        for drafter in self.free:
            drafter.select(rows)


class HybridKind(KindSpec):
    """The hybrid proposer: its parts are drafters the model cache builds (`parts`): the verifier's default model
    drafter (or `drafter=`), then prompt lookup and, where the verifier has a datastore, the datastore."""

    rank = 7

    name, needs_model, ignores_effort, priority = "hybrid", False, True, 97
    describes = "the hybrid proposer (lookup / datastore first, a model drafter otherwise)"
    option_keys = ("min_match", "drafter", "max_ngram")

    def parts(self, verifier_name: str | None, options: dict) -> list[tuple[str | None, dict]]:
        """(drafter name, options) of its parts, the model drafter first (None: the verifier's default drafter,
        which the model cache that builds the parts names)."""
        from specdiff.drafters.datastore import data_folder

        if not verifier_name:
            raise ValueError("the hybrid proposer is built beside its verifier")
        lookup = {"max_ngram": options["max_ngram"]} if options.get("max_ngram") else {}
        out = [(options.get("drafter"), {}), ("lookup", lookup)]
        try:
            data_folder(verifier_name)
            out.append(("datastore", {}))
        except ValueError:
            pass  # no datastore for this verifier: lookup alone
        return out

    def build(self, model=None, config=None, defaults=None, tokenizer=None, target=None, parts=(), **options):
        if len(parts) < 2:
            raise ValueError("the hybrid proposer needs a model drafter and a free drafter (its parts)")
        return HybridDrafter(parts[0], list(parts[1:]), min_match=options.get("min_match", 3))

    def bench_candidates(self, block, grid):
        """One candidate per long-match length (`min_matches`) at this B."""
        return [(f"hybrid B={block} m={m}", {"block_size": block, "extra": {"min_match": m}})
                for m in grid.get("min_matches") or [3]]

    def run_options(self, run):
        return self.extra_options(run)


register(HybridKind())
