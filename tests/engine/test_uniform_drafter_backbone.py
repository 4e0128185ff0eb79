"""The uniform drafter on a causal-LM backbone run block-causally (issue 24: the zoo's uniform drafter is a
Qwen3 with Dream's shift): marginal-mode exactness by enumeration, as tests/engine/test_drafters_exactness.py
does for DiffusionGemma (40,000 rows, TV <= 0.03, chi-square p >= 1e-4), at K = 3 with the entropy order and
entropy-bound stopping (the multi-step case, where a token's q must be recorded given the state entering the
last step), and its cache across rounds."""
from __future__ import annotations

import pytest
import torch
from tiny_models import LENGTH, PROMPT, ROWS, SAMPLING, VOCAB, assert_matches_exact, exact_continuations, tiny_qwen3

import specdiff as sd


@pytest.fixture(scope="module")
def models():
    verifier = tiny_qwen3(VOCAB, seed=0, layers=2)
    backbone = tiny_qwen3(VOCAB, seed=7, bidirectional=True)  # Dream's shift, as the zoo's uniform drafter
    return dict(verifier=verifier, backbone=backbone, exact=exact_continuations(verifier, PROMPT, LENGTH, **SAMPLING))


def _uniform(m, **kw):
    return sd.UniformDiffusionDrafter(m["backbone"], top_p=1.0, **kw)


CASES = [  # one enumeration (40,000 rows) keeps the test fast; K = 1 and other orders: test_drafters_exactness.py
    ("K=3 entropy order, entropy bound, marginal",
     lambda m: _uniform(m, steps=3, temperature=(1.2, 0.9), entropy_bound=0.6), 3, "token"),
]


@pytest.mark.parametrize("label, make, block_size, method", CASES, ids=[c[0] for c in CASES])
def test_block_causal_uniform_drafter_is_exact_in_marginal_mode(models, label, make, block_size, method):
    drafter = make(models)
    assert drafter.exact_marginal and not drafter.encoder_decoder and drafter.shift_logits
    gen = sd.SpeculativeGenerator(drafter, sd.Verifier(models["verifier"], **SAMPLING), block_size=block_size,
                                  method=method, proposal="marginal", eos_token_id=[], batch_size=ROWS)
    assert gen.exact
    out = gen.generate([PROMPT] * ROWS, max_new_tokens=LENGTH, generator=torch.Generator().manual_seed(0))
    assert all(len(row) == LENGTH for row in out.token_ids)
    assert_matches_exact(out.token_ids, models["exact"], label)


def test_cached_rounds_match_an_uncached_draft(models):
    """The prefix cache kept across rounds gives the same one-step logits as encoding everything afresh."""
    drafter = _uniform(models, steps=1, temperature=(1.0, 1.0))
    ids = torch.tensor([[1, 2, 0, 3, 1, 2]])
    mask = torch.ones_like(ids, dtype=torch.bool)
    drafter.start(ids[:, :4], mask[:, :4])
    first = drafter.propose(ids[:, :4], mask[:, :4], 3, torch.Generator().manual_seed(1))
    drafter.commit(torch.tensor([1]))
    cached = drafter.propose(ids, mask, 3, torch.Generator().manual_seed(2))
    fresh = _uniform(models, steps=1, temperature=(1.0, 1.0)).draft(ids, mask, 3, torch.Generator().manual_seed(2))
    assert first.tokens.shape == (1, 3)
    assert torch.allclose(cached.probs, fresh.probs, atol=1e-5) and torch.equal(cached.tokens, fresh.tokens)


def test_orders_and_bounds_are_checked(models):
    with pytest.raises(ValueError, match="unknown order"):
        _uniform(models, order="confidence")
    with pytest.raises(ValueError, match="entropy_bound"):
        _uniform(models, entropy_bound=-1.0)
    with pytest.raises(ValueError, match="causal-LM class"):
        sd.UniformDiffusionDrafter(torch.nn.Linear(2, 2))
