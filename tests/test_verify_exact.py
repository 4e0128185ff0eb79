"""Exactness of verify(), tested statistically.

Every case is one batched verify() call over N >= 200,000 rows with a fixed seed. Tolerances:
total variation between the empirical and the target histogram <= TV_TOLERANCE (0.012; the
sampling noise is about 0.004 here), and a chi-square goodness-of-fit p-value >= 1e-4.
"""
import pytest
import torch

import specdiff as sd
from specdiff import theory

from exactness import (
    CHI2_MIN_PVALUE,
    TV_TOLERANCE,
    chi_square_pvalue,
    expected_acceptance,
    expected_first_token,
    histogram,
    random_distribution,
    total_variation_to,
)

NUM_ROWS = 200_000
VOCAB = 8
RULES = [
    sd.Lossless(),
    sd.Linear(0.4),
    sd.TVBudget(0.15),
    sd.Cactus(0.3),
    sd.Cactus(0.3, solver="taylor"),
]
RULE_IDS = ["lossless", "linear0.4", "tv0.15", "cactus0.3", "cactus0.3-taylor"]


def _draft_from(q, num_rows, generator):
    return torch.multinomial(q.expand(num_rows, -1), 1, replacement=True, generator=generator)  # [N, 1]


@pytest.mark.parametrize("point_mass", [False, True], ids=["marginal", "pointmass"])
@pytest.mark.parametrize("method", ["token", "block"])
@pytest.mark.parametrize("rule", RULES, ids=RULE_IDS)
def test_one_position_emits_the_rule_target_and_accepts_at_the_theory_rate(rule, method, point_mass):
    generator = torch.Generator().manual_seed(1234)
    p = random_distribution(generator, vocab=VOCAB)
    q = random_distribution(generator, vocab=VOCAB)
    draft = _draft_from(q, NUM_ROWS, generator)
    target_probs = p.expand(NUM_ROWS, 2, VOCAB)
    draft_probs = None if point_mass else q.expand(NUM_ROWS, 1, VOCAB)
    result = sd.verify(draft, draft_probs, target_probs, rule=rule, method=method, generator=generator)

    counts = histogram(result.tokens[:, 0], VOCAB)
    expected = expected_first_token(rule, p, q, point_mass)
    assert total_variation_to(counts, expected) <= TV_TOLERANCE
    assert chi_square_pvalue(counts, expected) >= CHI2_MIN_PVALUE

    measured = (result.num_accepted >= 1).double().mean().item()
    wanted = expected_acceptance(rule, p, q, point_mass)
    # binomial standard error at N = 200k is <= 0.0012; allow 5 of them
    assert abs(measured - wanted) <= 0.006, (measured, wanted)


def _two_position_chain(rule, method, point_mass, generator, vocab=4, num_rows=NUM_ROWS):
    """Emit two tokens per row over repeated rounds; return their joint histogram and target.

    The drafter is left to right: y1 ~ q1, y2 ~ q2(. | y1), so the marginal mode is exact too.
    Rows that stop after one token (rejected at position 1) run a second round of B = 1 from
    the emitted token.
    """
    p1 = random_distribution(generator, vocab=vocab)
    p2 = random_distribution(generator, vocab, vocab=vocab)  # p2[x1]
    q1 = random_distribution(generator, vocab=vocab)
    q2 = random_distribution(generator, vocab, vocab=vocab)
    y1 = _draft_from(q1, num_rows, generator).squeeze(1)
    y2 = torch.multinomial(q2[y1], 1, generator=generator).squeeze(1)
    bonus = torch.full((num_rows, vocab), 1.0 / vocab, dtype=p1.dtype)
    target_probs = torch.stack([p1.expand(num_rows, -1), p2[y1], bonus], dim=1)  # [N, 3, V]
    draft_probs = None if point_mass else torch.stack([q1.expand(num_rows, -1), q2[y1]], dim=1)
    first = sd.verify(torch.stack([y1, y2], 1), draft_probs, target_probs, rule=rule, method=method, generator=generator)
    x1 = first.tokens[:, 0]
    x2 = first.tokens[:, 1].clone()

    again = first.num_accepted == 0
    prefix = x1[again]
    redraft = torch.multinomial(q2[prefix], 1, generator=generator)
    target_again = torch.stack([p2[prefix], bonus[: len(prefix)]], dim=1)
    draft_again = None if point_mass else q2[prefix].unsqueeze(1)
    second = sd.verify(redraft, draft_again, target_again, rule=rule, method=method, generator=generator)
    x2[again] = second.tokens[:, 0]

    counts = histogram(x1 * vocab + x2, vocab * vocab)
    marginal = expected_first_token(rule, p1, q1, point_mass)
    joint = torch.stack([marginal[a] * expected_first_token(rule, p2[a], q2[a], point_mass) for a in range(vocab)])
    return counts, joint.reshape(-1)


@pytest.mark.parametrize("point_mass", [False, True], ids=["marginal", "pointmass"])
@pytest.mark.parametrize("method", ["token", "block"])
@pytest.mark.parametrize("rule", RULES, ids=RULE_IDS)
def test_two_positions_follow_the_target_chain(rule, method, point_mass):
    generator = torch.Generator().manual_seed(99)
    counts, expected = _two_position_chain(rule, method, point_mass, generator)
    assert total_variation_to(counts, expected) <= TV_TOLERANCE
    assert chi_square_pvalue(counts, expected) >= CHI2_MIN_PVALUE


def test_out_of_order_unmasking_biases_marginal_mode_but_not_point_mass():
    """docs/architecture.md's counterexample (Exactness): x2 ~ Bern(1/2), then x1 = x2. Target p(x1) = (1/2, 1/2),
    p(x2 | x1) = (0.9, 0.1). Marginal mode lands at TV 0.05 from the target; point mass is exact."""
    generator = torch.Generator().manual_seed(5)
    num_rows = NUM_ROWS
    x2 = torch.randint(0, 2, (num_rows,), generator=generator)
    draft = torch.stack([x2, x2], 1)
    q = torch.stack([torch.nn.functional.one_hot(x2, 2).double(), torch.full((num_rows, 2), 0.5, dtype=torch.float64)], 1)
    p = torch.tensor([[0.5, 0.5], [0.9, 0.1], [0.5, 0.5]], dtype=torch.float64).expand(num_rows, 3, 2)
    target_joint = torch.tensor([0.45, 0.05, 0.45, 0.05], dtype=torch.float64)
    distances = {}
    for mode, draft_probs in (("marginal", q), ("pointmass", None)):
        result = sd.verify(draft, draft_probs, p, generator=generator)
        both = result.num_accepted >= 1  # rows where the first token came with a second one
        x1_out = result.tokens[:, 0]
        x2_out = result.tokens[:, 1].clone()
        x2_out[~both] = torch.multinomial(p[0, 1].expand(int((~both).sum()), 2), 1, generator=generator).squeeze(1)
        counts = histogram(x1_out * 2 + x2_out, 4)
        distances[mode] = total_variation_to(counts, target_joint)
    assert abs(distances["marginal"] - 0.05) < 0.01
    assert distances["pointmass"] < 0.006


def test_block_reproduces_sun_et_al_toy_example():
    """Sun et al. (2025): p = (1/3, 2/3), q = (2/3, 1/3) i.i.d., B = 2: E[tau] is 10/9 by token
    verification and 11/9 by block verification."""
    generator = torch.Generator().manual_seed(7)
    num_rows = 400_000
    p = torch.tensor([1 / 3, 2 / 3], dtype=torch.float64)
    q = torch.tensor([2 / 3, 1 / 3], dtype=torch.float64)
    draft = torch.multinomial(q.expand(num_rows, 2), 2, replacement=True, generator=generator)
    target_probs = p.expand(num_rows, 3, 2)
    draft_probs = q.expand(num_rows, 2, 2)
    token = sd.verify(draft, draft_probs, target_probs, method="token", generator=generator)
    block = sd.verify(draft, draft_probs, target_probs, method="block", generator=generator)
    # standard error of the mean of num_accepted is about 0.0013 here
    assert abs(token.num_accepted.double().mean().item() - 10 / 9) < 0.008
    assert abs(block.num_accepted.double().mean().item() - 11 / 9) < 0.008


@pytest.mark.parametrize("rule", [sd.Lossless(), sd.Linear(0.3), sd.Cactus(0.2)], ids=["lossless", "linear", "cactus"])
def test_block_accepts_at_least_as_many_as_token_on_random_instances(rule):
    """Sun et al.'s optimality: E[tau_block] >= E[tau_token] on every instance."""
    generator = torch.Generator().manual_seed(11)
    num_rows, block_len, vocab = 20_000, 4, 6
    for _ in range(4):
        p = random_distribution(generator, block_len + 1, vocab=vocab)
        q = random_distribution(generator, block_len, vocab=vocab, concentration=0.5)
        draft = torch.stack([torch.multinomial(q[i].expand(num_rows, -1), 1, replacement=True, generator=generator).squeeze(1) for i in range(block_len)], 1)
        token = sd.verify(draft, q.expand(num_rows, -1, -1), p.expand(num_rows, -1, -1), rule=rule, generator=generator)
        block = sd.verify(draft, q.expand(num_rows, -1, -1), p.expand(num_rows, -1, -1), rule=rule, method="block", generator=generator)
        mean_token = token.num_accepted.double().mean().item()
        mean_block = block.num_accepted.double().mean().item()
        # tolerance: about 4 standard errors of the difference at 20k rows
        assert mean_block >= mean_token - 0.04, (mean_token, mean_block)


def test_relaxed_target_chain_for_per_position_lambda():
    """TVBudget's lam = min(1, eps / TV) at each position, checked against theory directly."""
    p = torch.tensor([[0.7, 0.2, 0.1], [0.2, 0.2, 0.6]], dtype=torch.float64)
    q = torch.tensor([[0.1, 0.3, 0.6], [0.2, 0.2, 0.6]], dtype=torch.float64)
    lam = theory.linear_lambda(sd.TVBudget(0.3), p, q)
    assert torch.allclose(lam, torch.tensor([0.5, 0.0], dtype=torch.float64))
