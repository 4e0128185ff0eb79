"""`sd.PromptLookupDrafter` (issue 30, item 4): n-gram lookup in the prompt and the text so far, batched with
ragged drafts (possibly none), verified with a point mass, so exact for any verifier."""
from __future__ import annotations

import pytest
import torch
from tiny_models import (LENGTH, PROMPT, ROWS, SAMPLING, VOCAB, assert_matches_exact, exact_continuations,
                         tiny_qwen3)

import specdiff as sd
from specdiff.drafters.lookup import PromptLookupDrafter


def test_lookup_drafts_what_followed_the_latest_match_longest_ngram_first():
    drafter = PromptLookupDrafter(max_ngram=3)
    assert drafter._lookup([5, 6, 7, 8, 9, 5, 6], limit=3) == ([7, 8, 9], 2)  # bigram (5, 6) seen at 0
    # the trigram (1, 2, 3) wins over the later unigram match of 3
    assert drafter._lookup([1, 2, 3, 4, 9, 3, 7, 1, 2, 3], limit=2) == ([4, 9], 3)
    assert drafter._lookup([1, 2, 3, 4], limit=4) == ([], 0)  # nothing repeats: no draft
    # a match followed by fewer tokens than the limit gives way to an earlier one followed by enough
    assert drafter._lookup([4, 1, 2, 3, 5, 4, 4], limit=2) == ([1, 2], 1)
    assert drafter._lookup([7, 7, 7], limit=4) == ([7], 2)


def test_propose_is_ragged_and_pads_rows_without_a_match():
    drafter = PromptLookupDrafter()
    ids = torch.tensor([[0, 0, 1, 2, 3, 1, 2], [4, 5, 6, 7, 8, 9, 10]])  # row 1: no repeat at all
    mask = torch.tensor([[False, False, True, True, True, True, True], [True] * 7])
    draft = drafter.propose(ids, mask, block_size=4)
    assert draft.probs is None and draft.lengths.tolist() == [3, 0] and drafter.match_lengths == [2, 0]
    assert draft.tokens[0, :3].tolist() == [3, 1, 2]
    none = drafter.propose(ids[1:], mask[1:], block_size=4)
    assert none.lengths.tolist() == [0] and none.tokens.shape == (1, 1)


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="min_ngram"):
        PromptLookupDrafter(max_ngram=1, min_ngram=2)
    with pytest.raises(ValueError, match="max_draft"):
        PromptLookupDrafter(max_draft=0)


def test_lookup_is_verified_with_a_point_mass_and_is_exact_in_law():
    """ROWS rows of one prompt in one batched call, sampled: the first LENGTH tokens follow the verifier's own
    law (TV and chi-square bounds of tests/tiny_models.py), whatever the proposal setting says."""
    verifier_model = tiny_qwen3(VOCAB, seed=0, layers=2)
    gen = sd.SpeculativeGenerator(PromptLookupDrafter(), sd.Verifier(verifier_model, **SAMPLING), block_size=3,
                                  proposal="marginal", eos_token_id=[], batch_size=ROWS)
    assert gen.proposal == "point_mass" and gen.exact
    out = gen.generate([PROMPT] * ROWS, max_new_tokens=LENGTH, generator=torch.Generator().manual_seed(0))
    accepted = sum(sum(s.accepted) for s in out.stats)
    assert accepted > ROWS // 10  # lookup drafts were accepted, not only bonus tokens emitted
    assert_matches_exact(out.token_ids, exact_continuations(verifier_model, PROMPT, LENGTH, **SAMPLING), "lookup")


def test_greedy_lookup_equals_plain_greedy_decoding_at_batch_1_and_4():
    from architectures import build, hf_greedy

    model = build("llama")
    prompts = [[5, 6, 7, 5, 6, 7, 5, 6], [9, 10], [11, 12, 13, 11, 12], [14]]
    references = [hf_greedy(model, p, new_tokens=24)[0] for p in prompts]
    for batch_size in (1, 4):
        gen = sd.SpeculativeGenerator(PromptLookupDrafter(), sd.Verifier(model, temperature=0.0), block_size=4,
                                      eos_token_id=[], batch_size=batch_size)
        out = gen.generate(prompts, max_new_tokens=24)
        assert out.token_ids == references
        assert gen.drafter.vocab_size == model.config.vocab_size  # adopted from the verifier


def test_rounds_where_no_row_drafts_emit_one_verifier_token_each():
    model = tiny_qwen3(8, seed=3)
    gen = sd.SpeculativeGenerator(PromptLookupDrafter(min_ngram=3), sd.Verifier(model, temperature=0.0),
                                  block_size=4, eos_token_id=[])
    out = gen.generate([[1, 2, 3, 4]], max_new_tokens=2)
    assert out.stats[0].rounds == 2 and out.stats[0].accepted == [0, 0] and out.stats[0].drafted == [0, 0]
    plain = model.generate(torch.tensor([[1, 2, 3, 4]]), max_new_tokens=2, do_sample=False, pad_token_id=0)
    assert out.token_ids[0] == plain[0, 4:].tolist()


def test_lookup_through_models_load_and_the_drafter_kind():
    from specdiff import models
    from specdiff.models import resolve

    assert isinstance(models.load("lookup", role="drafter"), PromptLookupDrafter)
    assert resolve("lookup") == ("lookup", "lookup")
