"""Bad input gets a ValueError that names the problem; valid edge cases work."""
import pytest
import torch

import specdiff as sd

from exactness import random_distribution


def _instance(batch=3, block_len=4, vocab=5, seed=0, dtype=torch.float64):
    generator = torch.Generator().manual_seed(seed)
    p = random_distribution(generator, batch, block_len + 1, vocab=vocab, dtype=dtype)
    q = random_distribution(generator, batch, block_len, vocab=vocab, dtype=dtype)
    draft = torch.multinomial(q.reshape(-1, vocab).double(), 1, generator=generator).reshape(batch, block_len)
    return draft, q, p


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d, q, p: (d, q, p[:, :-1]), "expected \\[3, 5, V\\]"),
        (lambda d, q, p: (d, q[:, :, :4] / q[:, :, :4].sum(-1, keepdim=True), p), "vocabularies differ"),
        (lambda d, q, p: (d, q[:2], p), "draft_probs has shape"),
        (lambda d, q, p: (d[0], q, p), "draft_tokens must be a \\[b, B\\]"),
        (lambda d, q, p: (d.double(), q, p), "integer"),
        (lambda d, q, p: (d + 10, q, p), "must lie in"),
        (lambda d, q, p: (d, q, p.clone().index_fill_(2, torch.tensor([0]), float("nan"))), "NaN"),
        (lambda d, q, p: (d, q, p * 1.1), "sum to 1"),
        (lambda d, q, p: (d, q - 0.5, p), "negative"),
        (lambda d, q, p: (d[:, :0], q[:, :0], p[:, :1]), "B >= 1"),
    ],
    ids=["target-shape", "vocab", "draft-shape", "token-rank", "token-dtype", "token-range", "nan", "sum", "negative", "empty-block"],
)
def test_bad_input_is_named(mutate, message):
    draft, q, p = mutate(*_instance())
    with pytest.raises(ValueError, match=message):
        sd.verify(draft, q, p)


def test_unknown_method_rule_and_inputs():
    draft, q, p = _instance()
    with pytest.raises(ValueError, match="unknown method"):
        sd.verify(draft, q, p, method="tree")
    with pytest.raises(ValueError, match="unknown rule"):
        sd.verify(draft, q, p, rule="lossless")
    with pytest.raises(ValueError, match="unknown inputs"):
        sd.verify(draft, q, p, inputs="log_probs")


def test_drafted_token_with_zero_proposal_probability():
    draft, q, p = _instance()
    q = q.clone()
    q[1, 2] = 0.0
    q[1, 2, 0] = 1.0
    draft = draft.clone()
    draft[1, 2] = 3
    draft[1, :2] = torch.argmax(q[1, :2], dim=-1)
    with pytest.raises(ValueError, match="proposal probability 0"):
        sd.verify(draft, q, p)
    logits = torch.log(q)
    with pytest.raises(ValueError, match="proposal probability 0"):
        sd.verify(draft, logits, torch.log(p), inputs="logits")


def test_nan_and_infinite_logits_are_named():
    """Rows that verification reads are checked as they are normalised (position 0 always is)."""
    draft, q, p = _instance()
    bad = torch.log(p).clone()
    bad[0, 0, 2] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        sd.verify(draft, torch.log(q), bad, inputs="logits")
    bad[0, 0, 2] = float("inf")
    with pytest.raises(ValueError, match="\\+inf"):
        sd.verify(draft, torch.log(q), bad, inputs="logits")
    bad[0, 0] = float("-inf")
    with pytest.raises(ValueError, match="every logit is -inf"):
        sd.verify(draft, torch.log(q), bad, inputs="logits")
    with pytest.raises(ValueError, match="NaN"):  # the draft side too, and the block path
        sd.verify(draft, torch.log(q).index_fill(2, torch.tensor([1]), float("nan")), torch.log(p),
                  inputs="logits", method="block")


def test_full_validation_scans_every_logit():
    """A NaN at the bonus position is read only when a row accepts everything; "full" finds it."""
    draft, q, p = _instance()
    bad = torch.log(p).clone()
    bad[:, -1, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        sd.verify(draft, torch.log(q), bad, inputs="logits", validate="full")
    bad[:, -1, 0] = float("inf")
    with pytest.raises(ValueError, match="\\+inf"):
        sd.verify(draft, torch.log(q), bad, inputs="logits", validate="full")


@pytest.mark.parametrize("rule", [sd.Lossless(), sd.Linear(0.5), sd.TVBudget(0.1), sd.Cactus(0.5)], ids=repr)
@pytest.mark.parametrize("method", ["token", "block"])
def test_p_equal_q_accepts_everything(rule, method):
    draft, q, p = _instance(batch=200, block_len=3)
    p = torch.cat([q, q[:, :1]], dim=1)
    result = sd.verify(draft, q, p, rule=rule, method=method, generator=torch.Generator().manual_seed(0))
    assert (result.num_accepted == 3).all()
    assert torch.equal(result.tokens[:, :3], draft)


@pytest.mark.parametrize("method", ["token", "block"])
def test_one_hot_target_and_proposal(method):
    vocab = 6
    batch = 100
    generator = torch.Generator().manual_seed(2)
    draft = torch.randint(0, vocab, (batch, 2), generator=generator)
    q = torch.nn.functional.one_hot(draft, vocab).double()
    # target: one-hot on token 0 everywhere
    p = torch.zeros(batch, 3, vocab, dtype=torch.float64)
    p[..., 0] = 1.0
    result = sd.verify(draft, q, p, method=method, generator=generator)
    # a draft of 0 is accepted, anything else is replaced by 0
    first_is_zero = draft[:, 0] == 0
    assert (result.tokens[:, 0] == 0).all()
    assert ((result.num_accepted >= 1) == first_is_zero).all()
    # the residual [p - q]+ is zero where the draft was 0 ... and a point mass on 0 otherwise
    point = sd.verify(draft, None, p, method=method, generator=generator)
    assert (point.tokens[:, 0] == 0).all()


def test_numerically_empty_residual_falls_back_to_the_relaxed_target():
    """p and q equal up to 1e-12: a rejection is (almost) impossible, but if one is forced the
    next token must still be a valid draw from p~, not an index past the vocabulary."""
    vocab = 4
    q = torch.tensor([[[0.25, 0.25, 0.25, 0.25]]], dtype=torch.float64).expand(1000, 1, vocab)
    p = (q + torch.tensor([1e-12, -1e-12, 0, 0], dtype=torch.float64)).expand(1000, 1, vocab)
    p = torch.cat([p, p], dim=1)
    draft = torch.full((1000, 1), 1)
    result = sd.verify(draft, q, p, generator=torch.Generator().manual_seed(0))
    assert ((result.tokens[:, 0] >= 0) & (result.tokens[:, 0] < vocab)).all()


def test_block_length_one_and_output_layout():
    draft, q, p = _instance(batch=500, block_len=1, vocab=3)
    result = sd.verify(draft, q, p, generator=torch.Generator().manual_seed(0))
    assert result.tokens.shape == (500, 2)
    accepted = result.num_accepted == 1
    assert torch.equal(result.tokens[accepted, 0], draft[accepted, 0])
    assert (result.tokens[~accepted, 1] == -1).all()
    assert (result.tokens[:, :1] >= 0).all()


def test_output_padding_for_longer_blocks():
    draft, q, p = _instance(batch=400, block_len=5, vocab=4, seed=3)
    result = sd.verify(draft, q, p, generator=torch.Generator().manual_seed(1))
    for row in range(400):
        k = int(result.num_accepted[row])
        assert torch.equal(result.tokens[row, :k], draft[row, :k])
        assert 0 <= result.tokens[row, k] < 4
        assert (result.tokens[row, k + 1 :] == -1).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("rule", [sd.Lossless(), sd.Linear(0.3), sd.TVBudget(0.1), sd.Cactus(0.4)], ids=repr)
@pytest.mark.parametrize("method", ["token", "block"])
def test_logits_match_probabilities(dtype, rule, method):
    """inputs='logits' reads the same distributions: same seed, (almost) the same tokens."""
    draft, q, p = _instance(batch=2000, block_len=4, vocab=7, seed=4)
    temperature_scaled_target = torch.log(p) * 1.0 + 3.0  # logits are defined up to a constant
    draft_logits = torch.log(q) - 1.0
    from_probs = sd.verify(draft, q, p, rule=rule, method=method,
                           generator=torch.Generator().manual_seed(9))
    from_logits = sd.verify(draft, draft_logits.to(dtype), temperature_scaled_target.to(dtype), rule=rule, method=method,
                            generator=torch.Generator().manual_seed(9), inputs="logits")
    agreement = (from_probs.tokens == from_logits.tokens).all(dim=1).double().mean().item()
    assert agreement > (0.995 if dtype != torch.bfloat16 else 0.9)
    assert from_logits.accept_prob.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)


def test_filtered_logits_exclude_tokens():
    """-inf logits (top-k filtered) are never emitted."""
    generator = torch.Generator().manual_seed(0)
    batch, vocab = 5000, 10
    target_logits = torch.randn(batch, 2, vocab, generator=generator)
    target_logits[..., 5:] = float("-inf")
    draft_logits = torch.randn(batch, 1, vocab, generator=generator)
    draft = torch.multinomial(torch.softmax(draft_logits[:, 0], -1), 1, generator=generator)
    result = sd.verify(draft, draft_logits, target_logits, inputs="logits", generator=generator)
    assert (result.tokens[:, 0] < 5).all()


def test_large_vocabulary_logits_path_is_exact_on_first_token():
    """A vocabulary big enough to take the blocked log-sum-exp path."""
    generator = torch.Generator().manual_seed(3)
    batch, vocab = 64, 40_000
    target_logits = torch.randn(batch, 3, vocab, generator=generator) * 2
    draft_logits = target_logits[:, :2] + 0.5 * torch.randn(batch, 2, vocab, generator=generator)
    draft = torch.multinomial(torch.softmax(draft_logits.reshape(-1, vocab), -1), 1, generator=generator).reshape(batch, 2)
    via_logits = sd.verify(draft, draft_logits, target_logits, inputs="logits", generator=torch.Generator().manual_seed(1))
    via_probs = sd.verify(draft, torch.softmax(draft_logits, -1), torch.softmax(target_logits, -1),
                          generator=torch.Generator().manual_seed(1))
    assert torch.equal(via_logits.num_accepted, via_probs.num_accepted)
    assert torch.allclose(via_logits.accept_prob, via_probs.accept_prob, atol=1e-5, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_low_precision_probabilities_are_exact_on_first_token(dtype):
    """float32 and bfloat16 probability inputs are computed in float32 and stay exact."""
    from exactness import TV_TOLERANCE, histogram, total_variation_to

    generator = torch.Generator().manual_seed(8)
    num_rows, vocab = 200_000, 8
    p = random_distribution(generator, vocab=vocab).to(dtype)
    q = random_distribution(generator, vocab=vocab).to(dtype)
    draft = torch.multinomial(q.double().expand(num_rows, vocab), 1, replacement=True, generator=generator)
    result = sd.verify(draft, q.expand(num_rows, 1, vocab), p.expand(num_rows, 2, vocab), generator=generator)
    assert result.accept_prob.dtype == torch.float32
    target = p.double() / p.double().sum()  # the distribution bfloat16 actually stores
    assert total_variation_to(histogram(result.tokens[:, 0], vocab), target) <= TV_TOLERANCE


@pytest.mark.parametrize("vocab", [7, 5000, 2048 * 3])
def test_sample_categorical_matches_its_weights(vocab):
    """The two-level inverse-CDF sampler draws from norm(weights), zero weights never drawn."""
    from exactness import histogram, total_variation_to
    from specdiff.verify import sample_categorical

    generator = torch.Generator().manual_seed(vocab)
    num_rows = 40_000
    # a few heavy tokens spread over the chunks, the rest light, some exactly zero
    weights = torch.rand(vocab, generator=generator, dtype=torch.float64) ** 4
    weights[torch.randperm(vocab, generator=generator)[: vocab // 3]] = 0.0
    heavy = torch.randperm(vocab, generator=generator)[:4]
    weights[heavy] = weights.sum() / 2
    draws = sample_categorical(weights.float().expand(num_rows, vocab), generator)
    assert (weights[draws] > 0).all()
    # compare on the heavy tokens plus one pooled "rest" cell (the rest is spread too thinly)
    expected = weights / weights.sum()
    cells = torch.full((vocab,), 4, dtype=torch.long)
    cells[heavy] = torch.arange(4)
    counts = histogram(cells[draws], 5)
    pooled = torch.cat([expected[heavy], (1 - expected[heavy].sum()).reshape(1)])
    assert total_variation_to(counts, pooled) <= 0.012  # noise about 0.004 at 40k draws over 5 cells


@pytest.mark.parametrize("method", ["token", "block"])
@pytest.mark.parametrize("inputs", ["probs", "logits"])
def test_inputs_that_require_grad(method, inputs):
    """Models' outputs taken outside torch.no_grad() verify like detached ones (issue 11, item 5)."""
    draft, q, p = _instance(batch=20, block_len=4, vocab=6, seed=5, dtype=torch.float32)
    if inputs == "logits":
        q, p = torch.log(q), torch.log(p)
    q_grad, p_grad = q.clone().requires_grad_(True), p.clone().requires_grad_(True)
    plain = sd.verify(draft, q, p, method=method, inputs=inputs, generator=torch.Generator().manual_seed(3))
    graded = sd.verify(draft, q_grad * 1.0, p_grad * 1.0, method=method, inputs=inputs,
                       generator=torch.Generator().manual_seed(3))
    assert torch.equal(plain.tokens, graded.tokens)
    assert not graded.accept_prob.requires_grad
    point = sd.verify(draft, None, p_grad * 1.0, method=method, inputs=inputs)
    assert point.tokens.shape == (20, 5)


def test_draft_probs_dtype_is_checked():
    draft, q, p = _instance()
    with pytest.raises(ValueError, match="draft_probs must be floating point, got torch.int64"):
        sd.verify(draft, (q > 0.5).long(), p)


@pytest.mark.parametrize("dtype", [torch.int8, torch.int16, torch.int32, torch.uint8, torch.int64])
def test_every_integer_token_dtype_is_accepted(dtype):
    draft, q, p = _instance()
    result = sd.verify(draft.to(dtype), q, p, generator=torch.Generator().manual_seed(0))
    expected = sd.verify(draft, q, p, generator=torch.Generator().manual_seed(0))
    assert torch.equal(result.tokens, expected.tokens)
    with pytest.raises(ValueError, match="integer tensor .*torch.bool"):
        sd.verify(draft.bool(), q, p)


@pytest.mark.parametrize("validate", ["yes", "Full", 2, None])
def test_unknown_validate_is_rejected(validate):
    draft, q, p = _instance()
    with pytest.raises(ValueError, match="unknown validate"):
        sd.verify(draft, q, p, validate=validate)


def test_numpy_scalars_are_leniencies():
    np = pytest.importorskip("numpy")
    draft, q, p = _instance()
    for rule, value in [(sd.Linear(np.float64(0.3)), 0.3), (sd.TVBudget(np.float32(0.25)), 0.25),
                        (sd.Cactus(np.float32(0.5)), 0.5), (sd.Cactus(np.int64(1)), 1.0),
                        (sd.Linear(torch.tensor(0.5)), 0.5)]:
        number = getattr(rule, {"Linear": "lam", "TVBudget": "eps", "Cactus": "delta"}[type(rule).__name__])
        assert type(number) is float and number == pytest.approx(value)
        sd.verify(draft, q, p, rule=rule)
    for bad in [np.bool_(True), True, np.float64("nan"), "0.3", np.array([0.1, 0.2])]:
        with pytest.raises(ValueError, match="must be a real number"):
            sd.Linear(bad)


def test_sd_verify_stays_callable_after_its_module_is_imported():
    """Importing `specdiff.verify` (as the engine does) rebinds the package attribute to the module."""
    import importlib

    import specdiff as sd

    importlib.import_module("specdiff.verify")
    tokens = torch.zeros(1, 2, dtype=torch.long)
    probs = torch.full((1, 3, 4), 0.25)
    assert sd.verify(tokens, probs[:, :2], probs).num_accepted.item() == 2
