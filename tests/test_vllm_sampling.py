"""specdiff.integrations.vllm's pure parts, without vLLM: the settings, and the relaxed rejection
sampling on vLLM's flattened layout (sampling.relaxed_rejection_sample).

One position with a random p and q over V = 6 tokens, many rows in one call: the acceptance of the
first drafted token must match `specdiff.theory.acceptance_rate` (n = 40,000 rows: standard error
<= 0.0025, tolerance 0.015) and the emitted token's law `theory.emitted_distribution` (TV <= 0.02;
an exact sampler's expected TV is about 0.4 sqrt(6 / n) = 0.005)."""
from __future__ import annotations

import pytest
import torch
from exactness import random_distribution

import specdiff as sd
from specdiff import theory
from specdiff.integrations.vllm.sampling import PLACEHOLDER, accepted_counts, relaxed_rejection_sample
from specdiff.integrations.vllm.settings import (RuleSetting, SpecdiffConfigError, engine_rule, engine_settings,
                                                 request_rule)

ROWS, VOCAB = 40_000, 6


def _one_position(rule, point_mass, greedy=False, seed=0):
    generator = torch.Generator().manual_seed(seed)
    p = random_distribution(generator, vocab=VOCAB)  # [V]
    q = random_distribution(generator, vocab=VOCAB)
    torch.manual_seed(seed)
    drafts = torch.multinomial(q.float(), ROWS, replacement=True)  # [N] one drafted token per row
    target = p.log().float().expand(ROWS, VOCAB).contiguous()  # [N, V] logits
    bonus = torch.full((ROWS, 1), 5)
    output = torch.full((ROWS, 2), -7)  # vLLM's output, to be overwritten
    draft_probs = None if point_mass else q.float().expand(ROWS, VOCAB).contiguous()
    relaxed_rejection_sample(output, drafts, [1] * ROWS, draft_probs, target, bonus, [rule] * ROWS,
                             greedy=torch.full((ROWS,), greedy))
    return p, q, drafts, output


@pytest.mark.parametrize("rule", [sd.Linear(0.3), sd.TVBudget(0.2), sd.Cactus(0.3)], ids=str)
@pytest.mark.parametrize("point_mass", [False, True], ids=["marginal", "point mass"])
def test_one_position_matches_theory(rule, point_mass):
    from exactness import expected_acceptance, expected_first_token

    p, q, drafts, output = _one_position(rule, point_mass)
    accepted = accepted_counts(output, [1] * ROWS).double()
    assert abs(accepted.mean().item() - expected_acceptance(rule, p, q, point_mass)) <= 0.015
    first = torch.bincount(output[:, 0], minlength=VOCAB).double() / ROWS
    expected = expected_first_token(rule, p, q, point_mass)
    assert 0.5 * (first - expected).abs().sum().item() <= 0.02
    assert bool(((output[:, 1] == 5) == (accepted == 1)).all())  # the bonus after an accepted draft is vLLM's


def test_linear_one_accepts_everything_and_keeps_the_bonus():
    _, _, drafts, output = _one_position(sd.Linear(1.0), point_mass=True)
    assert bool((output[:, 0] == drafts).all()) and bool((output[:, 1] == 5).all())
    _, _, drafts, output = _one_position(sd.Linear(1.0), point_mass=False)
    assert bool((output[:, 0] == drafts).all())


def test_greedy_requests_accept_with_probability_lam():
    """A greedy request's target is the point mass on the argmax: Linear(lam) accepts a draft that is
    not the argmax with probability lam (point mass), and otherwise emits the argmax."""
    p, _, drafts, output = _one_position(sd.Linear(0.4), point_mass=True, greedy=True)
    top = int(p.argmax())
    off = drafts != top
    accepted = output[:, 0] == drafts
    assert abs(accepted[off].double().mean().item() - 0.4) <= 0.015
    assert bool((output[off & ~accepted, 0] == top).all()) and bool(accepted[~off].all())


def test_lossless_rows_are_left_as_vllm_sampled_them():
    draft_tokens = torch.tensor([1, 2, 0, 3, 3])
    target = torch.randn(5, 4)
    output = torch.tensor([[1, 9, PLACEHOLDER], [8, PLACEHOLDER, PLACEHOLDER], [7, 7, 7]])
    before = output.clone()
    relaxed_rejection_sample(output, draft_tokens, [2, 1, 2], None, target, torch.tensor([3, 3, 3]),
                             [None, sd.Lossless(), sd.Linear(0.0)])
    assert torch.equal(output, before)
    relaxed_rejection_sample(output, draft_tokens, [2, 1, 2], None, target, torch.tensor([3, 3, 3]),
                             [None, sd.Linear(1.0), None])
    assert output[1].tolist() == [0, 3, PLACEHOLDER] and torch.equal(output[[0, 2]], before[[0, 2]])
    kept = output.clone()  # a placeholder draft (-1) leaves the row as vLLM sampled it
    relaxed_rejection_sample(output, torch.tensor([1, 2, -1, 3, 3]), [2, 1, 2], None, target, torch.tensor([3, 3, 3]),
                             [None, sd.Linear(1.0), None])
    assert torch.equal(output, kept)


def test_block_method_and_seeded_rows():
    draft_tokens = torch.tensor([1, 2, 1, 2])
    target = torch.randn(4, 4)
    generators = {0: torch.Generator().manual_seed(3), 1: torch.Generator().manual_seed(3)}
    output = torch.full((2, 3), PLACEHOLDER)
    relaxed_rejection_sample(output, draft_tokens, [2, 2], None, torch.cat([target[:2], target[:2]]),
                             torch.tensor([1, 1]), [sd.Linear(0.5)] * 2, method="block", generators=generators)
    assert torch.equal(output[0], output[1])  # the same seed and inputs: the same draws, row by row


def test_settings():
    assert engine_rule({}) == RuleSetting()
    assert engine_rule({"specdiff": {"rule": "linear", "leniency": 0.2}}) == RuleSetting("linear", 0.2)
    assert engine_rule({"specdiff": {"rule": "TVBudget", "leniency": "0.1"}}) == RuleSetting("tv", 0.1)
    default = RuleSetting("linear", 0.2)
    assert request_rule(None, default) is default
    assert request_rule({"specdiff": {"leniency": 0.7}}, default) == RuleSetting("linear", 0.7)
    assert request_rule({"specdiff_rule": "cactus", "specdiff_leniency": 0.05}, default) == RuleSetting("cactus", 0.05)
    assert request_rule({"specdiff": {"rule": "lossless"}}, default).lossless
    assert engine_settings({"specdiff": {"drafter": "/x", "steps": 4}})["steps"] == 4
    for bad, message in [({"rule": "bogus"}, "unknown rule"), ({"rule": "linear", "leniency": 1.5}, "lam must lie"),
                         ({"rule": "tv", "leniency": -1}, "eps must be"), ({"rule": "linear", "leniency": None}, "real"),
                         ({"typo": 1}, "unknown key"), ({"steps": 0}, "steps"), ({"threshold": 1.5}, "threshold"),
                         ({"steps": 2, "threshold": 0.9}, "not both")]:
        with pytest.raises(SpecdiffConfigError, match=message):
            engine_settings({"specdiff": bad})
    with pytest.raises(SpecdiffConfigError, match="unknown rule"):
        request_rule({"specdiff_rule": "nope"}, default)
