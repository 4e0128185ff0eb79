"""The leniency rules of issue 22 in verify(): Typical, Gated, and support="untruncated", each tested
statistically against the per-position emitted law and acceptance of tests/leniency_reference.py, an independent
reference written from the rules' definitions (numpy, one drafted token at a time; not the library's relax(), nor
theory.emitted_distribution, which enumerates relax()), as tests/test_verify_exact.py does for the paper's rules.
tests/test_leniency_reference.py checks that reference against values computed by hand, theory against it, and
that a threshold or gate perturbed by 10 % fails.

Every statistical case is one batched verify() call over N = 200,000 rows with a fixed seed;
tolerances as there: TV <= TV_TOLERANCE (0.012; sampling noise about 0.004) and chi-square p >= 1e-4.
"""
import pytest
import torch

import specdiff as sd
from exactness import (
    CHI2_MIN_PVALUE,
    TV_TOLERANCE,
    chi_square_pvalue,
    histogram,
    random_distribution,
    total_variation_to,
)
from leniency_reference import reference_acceptance as expected_acceptance
from leniency_reference import reference_law as expected_first_token

NUM_ROWS = 200_000
# a pair where Typical bites with a real proposal: token 1 is typical (p = 0.3 > min(0.2, 0.45 e^-H))
# and q(1) = 0.6 > p(1), so Typical accepts it where Lossless accepts with 0.5
P_TYPICAL = torch.tensor([0.5, 0.3, 0.15, 0.05], dtype=torch.float64)
Q_TYPICAL = torch.tensor([0.2, 0.6, 0.1, 0.1], dtype=torch.float64)

RULES = [
    sd.Typical(0.2),
    sd.Typical(0.1, 0.9),
    sd.Gated(sd.Linear(0.5), max_top=0.7),
    sd.Gated(sd.TVBudget(0.2), min_entropy=1.0),
    sd.Gated(sd.Cactus(0.5), max_top=0.6, min_entropy=0.5),
]
IDS = ["typical0.2", "typical0.1-0.9", "gated-linear", "gated-tv", "gated-cactus"]


def _pair(rule, generator):
    if isinstance(rule, sd.Typical):
        return P_TYPICAL, Q_TYPICAL
    return random_distribution(generator, vocab=8), random_distribution(generator, vocab=8)


def _cases():
    for rule, name in zip(RULES, IDS):
        yield pytest.param(rule, "token", False, id=f"{name}-token-marginal")
        yield pytest.param(rule, "token", True, id=f"{name}-token-pointmass")
        yield pytest.param(rule, "block", True, id=f"{name}-block-pointmass")
        if isinstance(rule, sd.Gated) and isinstance(rule.rule, (sd.Linear, sd.TVBudget)):
            yield pytest.param(rule, "block", False, id=f"{name}-block-marginal")


@pytest.mark.parametrize("rule, method, point_mass", list(_cases()))
def test_one_position_emits_the_rule_target_and_accepts_at_the_reference_rate(rule, method, point_mass):
    generator = torch.Generator().manual_seed(2024)
    p, q = _pair(rule, generator)
    vocab = p.shape[-1]
    draft = torch.multinomial(q.expand(NUM_ROWS, -1), 1, replacement=True, generator=generator)
    draft_probs = None if point_mass else q.expand(NUM_ROWS, 1, vocab)
    result = sd.verify(draft, draft_probs, p.expand(NUM_ROWS, 2, vocab), rule=rule, method=method, generator=generator)

    counts = histogram(result.tokens[:, 0], vocab)
    expected = expected_first_token(rule, p, q, point_mass)
    assert abs(float(expected.sum()) - 1.0) < 1e-9
    assert total_variation_to(counts, expected) <= TV_TOLERANCE
    assert chi_square_pvalue(counts, expected) >= CHI2_MIN_PVALUE
    measured = (result.num_accepted >= 1).double().mean().item()
    assert abs(measured - expected_acceptance(rule, p, q, point_mass)) <= 0.006  # 5 binomial standard errors


def test_the_new_rules_accept_more_than_lossless_where_they_should():
    """Power: the cases above are not all Lossless in disguise."""
    generator = torch.Generator().manual_seed(2024)
    lossless = expected_acceptance(sd.Lossless(), P_TYPICAL, Q_TYPICAL, False)
    assert expected_acceptance(sd.Typical(0.2), P_TYPICAL, Q_TYPICAL, False) >= lossless + 0.1
    p, q = random_distribution(generator, vocab=8), random_distribution(generator, vocab=8)
    base = expected_acceptance(sd.Lossless(), p, q, False)
    assert expected_acceptance(sd.Gated(sd.Linear(0.5), max_top=0.7), p, q, False) >= base + 0.05


@pytest.mark.parametrize("rule", [sd.Typical(0.2), sd.Gated(sd.Linear(0.5), max_top=0.7)], ids=["typical", "gated"])
def test_two_positions_follow_the_rule_chain(rule):
    """Left-to-right drafts y1 ~ q1, y2 ~ q2(. | y1): the joint of the two emitted tokens is the
    chain of per-position targets E1(x1) E2(x2 | x1)."""
    generator = torch.Generator().manual_seed(7)
    vocab = 4
    p1, q1 = random_distribution(generator, vocab=vocab), random_distribution(generator, vocab=vocab)
    p2, q2 = random_distribution(generator, vocab, vocab=vocab), random_distribution(generator, vocab, vocab=vocab)
    y1 = torch.multinomial(q1.expand(NUM_ROWS, -1), 1, replacement=True, generator=generator).squeeze(1)
    y2 = torch.multinomial(q2[y1], 1, generator=generator).squeeze(1)
    bonus = torch.full((NUM_ROWS, vocab), 1.0 / vocab, dtype=torch.float64)
    first = sd.verify(torch.stack([y1, y2], 1), torch.stack([q1.expand(NUM_ROWS, -1), q2[y1]], 1),
                      torch.stack([p1.expand(NUM_ROWS, -1), p2[y1], bonus], 1), rule=rule, generator=generator)
    x1, x2 = first.tokens[:, 0], first.tokens[:, 1].clone()
    again = first.num_accepted == 0  # rejected at position 1: one more round of B = 1 from x1
    prefix = x1[again]
    redraft = torch.multinomial(q2[prefix], 1, generator=generator)
    second = sd.verify(redraft, q2[prefix].unsqueeze(1), torch.stack([p2[prefix], bonus[: len(prefix)]], 1),
                       rule=rule, generator=generator)
    x2[again] = second.tokens[:, 0]
    counts = histogram(x1 * vocab + x2, vocab * vocab)
    e1 = expected_first_token(rule, p1, q1)
    joint = torch.stack([e1[a] * expected_first_token(rule, p2[a], q2[a]) for a in range(vocab)]).reshape(-1)
    assert total_variation_to(counts, joint) <= TV_TOLERANCE
    assert chi_square_pvalue(counts, joint) >= CHI2_MIN_PVALUE


@pytest.mark.parametrize("method", ["token", "block"])
def test_a_closed_gate_is_lossless_and_an_open_one_is_the_inner_rule_draw_for_draw(method):
    generator = torch.Generator().manual_seed(3)
    b, block, vocab = 64, 4, 16
    target = torch.softmax(torch.randn(b, block + 1, vocab, generator=generator), -1)
    draft_probs = torch.softmax(torch.randn(b, block, vocab, generator=generator), -1)
    tokens = torch.multinomial(draft_probs.reshape(-1, vocab), 1, generator=generator).reshape(b, block)

    def run(rule):
        return sd.verify(tokens, draft_probs, target, rule=rule, method=method,
                         generator=torch.Generator().manual_seed(11)).tokens

    assert torch.equal(run(sd.Gated(sd.Linear(0.6), max_top=0.0)), run(sd.Lossless()))
    assert torch.equal(run(sd.Gated(sd.Linear(0.6), max_top=1.0)), run(sd.Linear(0.6)))
    assert not torch.equal(run(sd.Linear(0.6)), run(sd.Lossless()))
    if method == "token":  # a threshold of 1 makes no token typical: Lossless
        assert torch.equal(run(sd.Typical(1.0, 1e9)), run(sd.Lossless()))


@pytest.mark.parametrize("rule", [sd.Lossless(support="untruncated"), sd.Linear(0.3, support="untruncated"),
                                  sd.Gated(sd.Linear(0.5, support="untruncated"), max_top=0.8)],
                         ids=["lossless", "linear", "gated-linear"])
@pytest.mark.parametrize("inputs", ["probs", "logits"])
def test_untruncated_support_measures_drafts_against_the_untruncated_target(rule, inputs):
    """support="untruncated": position 1 emits the rule's target built from the untruncated p_u; the
    bonus after an accepted draft (position 2) still comes from the truncated p."""
    generator = torch.Generator().manual_seed(5)
    vocab = 8
    untruncated = random_distribution(generator, vocab=vocab)
    top = untruncated.topk(3).indices
    truncated = torch.zeros_like(untruncated).index_fill_(0, top, 1.0) * untruncated
    truncated = truncated / truncated.sum()  # top-k = 3
    q = random_distribution(generator, vocab=vocab)
    draft = torch.multinomial(q.expand(NUM_ROWS, -1), 1, replacement=True, generator=generator)
    target = truncated.expand(NUM_ROWS, 2, vocab)
    loose = untruncated.expand(NUM_ROWS, 1, vocab)
    draft_probs = q.expand(NUM_ROWS, 1, vocab)
    if inputs == "logits":
        target, loose, draft_probs = target.log(), loose.log(), draft_probs.log()
    result = sd.verify(draft, draft_probs, target, rule=rule, generator=generator, inputs=inputs,
                       untruncated_probs=loose)
    inner = rule.rule if isinstance(rule, sd.Gated) else rule
    truncated_rule = type(inner)(*[getattr(inner, f) for f in inner.__dataclass_fields__ if f != "support"])
    if isinstance(rule, sd.Gated):
        truncated_rule = sd.Gated(truncated_rule, rule.max_top, rule.min_entropy)
    expected = expected_first_token(truncated_rule, untruncated, q)
    counts = histogram(result.tokens[:, 0], vocab)
    assert total_variation_to(counts, expected) <= TV_TOLERANCE
    assert chi_square_pvalue(counts, expected) >= CHI2_MIN_PVALUE
    assert counts[torch.ones(vocab, dtype=torch.bool).index_fill_(0, top, False)].sum() > 1000  # off-nucleus tokens
    bonus = result.tokens[result.num_accepted == 1, 1]
    assert set(bonus.tolist()) <= set(top.tolist())  # the bonus: truncated p only
    assert not rule.lossless


def test_support_and_rule_errors_are_clear():
    tokens = torch.zeros(2, 1, dtype=torch.long)
    q = torch.full((2, 1, 4), 0.25)
    p = torch.full((2, 2, 4), 0.25)
    with pytest.raises(ValueError, match="untruncated_probs"):
        sd.verify(tokens, q, p, rule=sd.Linear(0.2, support="untruncated"))
    with pytest.raises(ValueError, match="support='truncated'"):
        sd.verify(tokens, q, p, rule=sd.Linear(0.2), untruncated_probs=p[:, :1])
    with pytest.raises(ValueError, match="depends on the drafted token"):
        sd.verify(tokens, q, p, rule=sd.Typical(0.1), method="block")
    with pytest.raises(ValueError, match="depends on the drafted token"):
        sd.verify(tokens, q, p, rule=sd.Gated(sd.Cactus(1.0), max_top=0.9), method="block")
    with pytest.raises(ValueError, match="support must be one of"):
        sd.Linear(0.2, support="nucleus")
    with pytest.raises(ValueError, match="max_top .* or min_entropy"):
        sd.Gated(sd.Linear(0.2))
    with pytest.raises(ValueError, match="rule must be one of"):
        sd.Gated(sd.Gated(sd.Linear(0.2), max_top=0.5), max_top=0.5)
    with pytest.raises(ValueError, match=">= 0"):
        sd.Typical(-0.1)
    assert sd.Typical(0.09).delta == pytest.approx(0.3)
    assert sd.Gated(sd.Lossless(), max_top=0.5).lossless and not sd.Gated(sd.Linear(0.1), max_top=0.5).lossless
