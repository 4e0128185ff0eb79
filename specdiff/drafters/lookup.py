"""Prompt lookup: a drafter that needs no model (Saxena 2023; HF's prompt lookup decoding, llama.cpp's
lookup decoding).

Rule, per row: take the last n committed tokens (n = max_ngram, then smaller down to min_ngram); find
the most recent earlier place where the same n tokens occur in the row's committed tokens (the prompt
and the text so far); draft the tokens that followed there, at most B of them. A row with no match
drafts nothing that round (`Draft.lengths` 0): the verifier's forward then yields one plain token.

The draft is a deterministic function of the committed tokens, so its law is a point mass on the
drafted tokens: verification uses q = onehot(y) (`Draft.probs` None, `point_mass`), which is exact
for every rule's target (the first paper's Proposition 2 with q a point mass).
"""
from __future__ import annotations

import torch

from specdiff.drafters.base import Draft, Drafter, point_mass_draft
from specdiff.drafters.registry import KindSpec, register


class PromptLookupDrafter(Drafter):
    """max_ngram, min_ngram: the n-gram sizes tried, longest first (HF's prompt lookup: 3 down to 1,
    llama.cpp's lookup: up to 4). max_draft: at most this many tokens per round (default: the block size)."""

    exact_marginal = True  # a point mass is the exact law of a deterministic draft
    point_mass = True  # the engine verifies with q = onehot(y), whatever its proposal setting

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1, max_draft: int | None = None):
        if not 1 <= int(min_ngram) <= int(max_ngram):
            raise ValueError(f"PromptLookupDrafter needs 1 <= min_ngram <= max_ngram, got {min_ngram}, {max_ngram}")
        if max_draft is not None and int(max_draft) < 1:
            raise ValueError(f"PromptLookupDrafter: max_draft must be >= 1, got {max_draft}")
        self.max_ngram, self.min_ngram = int(max_ngram), int(min_ngram)
        self.max_draft = None if max_draft is None else int(max_draft)
        self.model = None
        self._vocab_size = None
        self.match_lengths: list[int] = []  # per row, the n-gram size of the last proposal's match (0: none)

    @property
    def vocab_size(self) -> int | None:
        """None: it drafts ids it has read, so it fits any verifier (`adopt_vocabulary` records the verifier's)."""
        return self._vocab_size

    def adopt_vocabulary(self, vocab_size: int) -> None:
        self._vocab_size = int(vocab_size)

    @property
    def max_length(self) -> int | None:
        return None

    def propose(self, ids: torch.Tensor, key_mask: torch.Tensor, block_size: int,
                generator: torch.Generator | None = None) -> Draft:
        """ids [b, L] committed tokens, left-padded. Returns Draft(tokens [b, W], probs None, lengths [b]) with
        W = the longest draft (>= 1 column; rows past their length hold a filler that is never verified)."""
        limit = block_size if self.max_draft is None else min(block_size, self.max_draft)
        rows = [row[mask].tolist() for row, mask in zip(ids.cpu(), key_mask.cpu())]  # host: one copy per round
        found = [self._lookup(row, limit) for row in rows]
        self.match_lengths = [n for _, n in found]
        return point_mass_draft([d for d, _ in found], ids.device)

    def _lookup(self, row: list[int], limit: int) -> tuple[list[int], int]:
        """(the tokens after the most recent earlier occurrence of the row's last n tokens that is followed by
        `limit` tokens (else the one followed by the most), longest n first; that n, 0 without a match)."""
        length = len(row)
        for n in range(min(self.max_ngram, length - 1), self.min_ngram - 1, -1):
            tail, best = row[length - n:], []
            # an occurrence starting at i < length - n, latest first; its continuation starts at i + n
            for i in range(length - n - 1, -1, -1):
                if row[i] == tail[0] and row[i:i + n] == tail:
                    found = row[i + n:i + n + limit]
                    if len(found) == limit:
                        return found, n
                    best = found if len(found) > len(best) else best
            if best:
                return best, n
        return [], 0


class LookupKind(KindSpec):
    """Prompt lookup: no model; its n-gram sizes and longest draft come from a run's `extra` settings."""

    rank = 5

    name, needs_model, ignores_effort, priority = "lookup", False, True, 95
    describes = "prompt lookup (no model)"
    option_keys = ("max_ngram", "min_ngram", "max_draft")

    def build(self, model=None, config=None, defaults=None, tokenizer=None, target=None, **options):
        unknown = sorted(set(options) - set(self.option_keys))
        if unknown:
            raise ValueError(f"{', '.join(unknown)} do(es) not apply to prompt lookup; it takes "
                             f"{', '.join(self.option_keys)}")
        return PromptLookupDrafter(**options)

    def bench_candidates(self, block, grid):
        """One candidate per longest n-gram size (`ngrams`) at this B."""
        return [(f"lookup B={block} n={n}", {"block_size": block, "extra": {"max_ngram": n}})
                for n in grid.get("ngrams") or [3]]

    def run_options(self, run):
        return self.extra_options(run)


register(LookupKind())
