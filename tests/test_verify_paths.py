"""Token verification's two paths give the same draws (issue 11, item 9).

Small inputs (b (B+1) V <= verify.SMALL_ELEMENTS) read every position at once; larger ones walk
the positions left to right in chunks of SCRATCH_ELEMENTS // V rows. Both compute the same
arithmetic on the same uniforms, so for one seed they must agree draw for draw, whatever the rule,
proposal, input kind or chunk size; the statistical exactness tests (N >= 200,000 rows) run the walk.
"""
import importlib
import itertools

import pytest
import torch

import specdiff as sd
verify_module = importlib.import_module("specdiff.verify")

RULES = [sd.Lossless(), sd.Linear(0.3), sd.TVBudget(0.2), sd.Cactus(0.05), sd.Cactus(0.5, solver="taylor")]


def _case(seed, batch, block_len, vocab, inputs):
    generator = torch.Generator().manual_seed(seed)
    target = 2.0 * torch.randn(batch, block_len + 1, vocab, generator=generator)
    draft = target[:, :block_len] + torch.randn(batch, block_len, vocab, generator=generator)
    if seed % 3 == 0:  # filtered logits: some tokens excluded from both
        target[..., :2] = float("-inf")
        draft[..., :2] = float("-inf")
    tokens = torch.multinomial(torch.softmax(draft.reshape(-1, vocab), -1), 1, generator=generator).reshape(batch, block_len)
    if inputs == "probs":
        target, draft = torch.softmax(target, -1), torch.softmax(draft, -1)
    return tokens, draft, target


def _run(monkeypatch, small_elements, scratch_elements, *args, **kwargs):
    monkeypatch.setattr(verify_module, "SMALL_ELEMENTS", small_elements)
    monkeypatch.setattr(verify_module, "SCRATCH_ELEMENTS", scratch_elements)
    return sd.verify(*args, **kwargs)


@pytest.mark.parametrize("rule", RULES, ids=repr)
@pytest.mark.parametrize("inputs, point_mass", [("logits", False), ("probs", False), ("logits", True)])
def test_dense_and_walk_agree_draw_for_draw(monkeypatch, rule, inputs, point_mass):
    for seed, (batch, block_len, vocab) in enumerate(itertools.product([1, 7, 40], [1, 4, 12], [5, 254])):
        tokens, draft, target = _case(seed, batch, block_len, vocab, inputs)
        proposal = None if point_mass else draft
        kwargs = dict(rule=rule, inputs=inputs)
        dense = _run(monkeypatch, 1 << 40, 1 << 18, tokens, proposal, target,
                     generator=torch.Generator().manual_seed(seed), **kwargs)
        # the walk in chunks of 1..3 rows, so that rows of one position stop in different chunks
        walk = _run(monkeypatch, 0, vocab * (1 + seed % 3), tokens, proposal, target,
                    generator=torch.Generator().manual_seed(seed), **kwargs)
        # and in one chunk, where stopped rows are kept and drawn together at the end
        one_chunk = _run(monkeypatch, 0, 1 << 18, tokens, proposal, target,
                         generator=torch.Generator().manual_seed(seed), **kwargs)
        for other in (walk, one_chunk):
            assert torch.equal(dense.num_accepted, other.num_accepted), (seed, batch, block_len, vocab)
            assert torch.equal(dense.tokens, other.tokens), (seed, batch, block_len, vocab)
            assert torch.equal(dense.accept_prob.isnan(), other.accept_prob.isnan())
            assert torch.equal(dense.accept_prob.nan_to_num(-1.0), other.accept_prob.nan_to_num(-1.0))


def test_engine_sizes_take_the_dense_path_and_big_vocabularies_the_walk():
    assert 16 * 17 * 254 <= verify_module.SMALL_ELEMENTS  # the testbed engine: batch <= 16, B = 16, V = 254
    assert 1 * 17 * 151_936 > verify_module.SMALL_ELEMENTS
    assert verify_module.SCRATCH_ELEMENTS * 4 <= 1 << 20  # a float32 scratch block fits in L2


@pytest.mark.parametrize("small_elements", [1 << 40, 0], ids=["dense", "walk"])
def test_logits_past_each_stop_are_never_judged(monkeypatch, small_elements):
    """Both paths validate only the rows they use: a NaN where every row has stopped is no error,
    a NaN at a position some row reads is."""
    monkeypatch.setattr(verify_module, "SMALL_ELEMENTS", small_elements)
    generator = torch.Generator().manual_seed(0)
    batch, block_len, vocab = 6, 4, 30
    target = torch.randn(batch, block_len + 1, vocab, generator=generator)
    draft = torch.randn(batch, block_len, vocab, generator=generator)
    tokens = torch.zeros(batch, block_len, dtype=torch.long)
    target[:, 0, 0] = -1e4  # p(y_1) ~ 0: every row rejects the first draft
    target[:, 2:] = float("nan")
    draft[:, 2:] = float("nan")
    result = sd.verify(tokens, draft, target, inputs="logits", generator=generator)
    assert (result.num_accepted == 0).all() and result.accept_prob[:, 1:].isnan().all()
    target[3, 0, 5] = float("nan")
    with pytest.raises(ValueError, match="target_probs \\(logits\\) contains NaN"):
        sd.verify(tokens, draft, target, inputs="logits", generator=generator)
