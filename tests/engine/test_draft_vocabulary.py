"""A reduced draft vocabulary (issue 31; `Drafter.draft_to_target`, EAGLE-3's d2t): the drafter's head covers
V_d of the verifier's V ids. Its q is a distribution over the verifier's ids with 0 outside the index, its
drafts are verifier ids inside it, and `fit_vocabulary` refuses an index that does not fit the verifier.
Exactness end to end is in test_drafters_exactness.py (the "draft vocabulary" cases)."""
from __future__ import annotations

import pytest
import torch
from tiny_models import PROMPT, VOCAB, tiny_dflash, tiny_qwen3

import specdiff as sd
from specdiff.drafters.vocab import VocabularyMismatch, fit_vocabulary


@pytest.fixture(scope="module")
def pair():
    verifier = tiny_qwen3(VOCAB, seed=0, layers=2)
    return verifier, tiny_dflash(verifier, block=4, seed=5)


def test_q_is_zero_outside_the_draft_vocabulary_and_drafts_stay_inside(pair):
    verifier, model = pair
    drafter = sd.DFlashDrafter(model, verifier, temperature=1.0, draft_to_target=[3, 1])
    fit_vocabulary(drafter, sd.Verifier(verifier))
    assert drafter.vocab_size == VOCAB and drafter.target_vocab == VOCAB
    gen = sd.SpeculativeGenerator(drafter, sd.Verifier(verifier, temperature=1.0), block_size=3, eos_token_id=[])
    seen = []
    original = drafter.propose

    def spy(*args, **kwargs):
        draft = original(*args, **kwargs)
        seen.append(draft)
        return draft
    drafter.propose = spy
    gen.generate([PROMPT] * 16, max_new_tokens=6, generator=torch.Generator().manual_seed(0))
    assert seen
    for draft in seen:
        assert draft.probs.shape[-1] == VOCAB
        assert torch.all(draft.probs[..., [0, 2]] == 0)  # outside d2t
        torch.testing.assert_close(draft.probs.sum(-1), torch.ones(draft.probs.shape[:-1]))
        assert set(draft.tokens.flatten().tolist()) <= {1, 3}


def test_the_head_is_the_verifiers_rows_at_the_index(pair):
    verifier, model = pair
    full = sd.DFlashDrafter(model, verifier, temperature=1.0)
    reduced = sd.DFlashDrafter(model, verifier, temperature=1.0, draft_to_target=[0, 2, 3])
    logits = torch.randn(2, 3, 3)
    scattered = reduced.trim(logits)  # [2, 3, V]
    assert torch.equal(scattered[..., [0, 2, 3]], logits) and torch.all(scattered[..., 1] == float("-inf"))
    torch.testing.assert_close(reduced.head_weight, verifier.get_output_embeddings().weight[[0, 2, 3]])
    assert full.head_weight is None


@pytest.mark.parametrize("index, message", [([0, 9], "outside the verifier's vocabulary"),
                                            ([1, 1, 2], "names some verifier id twice")])
def test_fit_vocabulary_refuses_an_index_that_does_not_fit(pair, index, message):
    verifier, model = pair
    drafter = sd.DFlashDrafter(model, verifier, temperature=1.0)
    drafter.draft_to_target, drafter.target_vocab = torch.tensor(index), VOCAB
    with pytest.raises(VocabularyMismatch, match=message):
        fit_vocabulary(drafter, sd.Verifier(verifier))


def test_the_drafter_refuses_an_index_beyond_its_verifiers_head(pair):
    verifier, model = pair
    with pytest.raises(ValueError, match="outside the verifier's"):
        sd.DFlashDrafter(model, verifier, draft_to_target=[0, VOCAB])
