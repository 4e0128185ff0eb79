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
                                                 request_rule, rule_setting)

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


# Every rule `make_rule` and the command line know, with every term, as the plugin reads it from a request's
# extra_args (nested, and flat as vllm_xargs carries it): (extra_args, make_rule's arguments).
EVERY_RULE = [
    ({"specdiff": {"rule": "lossless"}}, ("lossless",)),
    ({"specdiff": {"rule": "linear", "leniency": 0.4}}, ("linear", 0.4)),
    ({"specdiff": {"rule": "tv", "leniency": 0.2}}, ("tv", 0.2)),
    ({"specdiff_rule": "tvbudget", "specdiff_leniency": "0.2"}, ("tv", 0.2)),
    ({"specdiff": {"rule": "cactus", "leniency": 0.3}}, ("cactus", 0.3)),
    ({"specdiff": {"rule": "typical", "leniency": 0.09}}, ("typical", 0.09)),
    ({"specdiff_rule": "typical", "specdiff_leniency": 0.2, "specdiff_typical_delta": "0.5"}, ("typical", 0.2, 0.5)),
    ({"specdiff": {"rule": "linear", "leniency": 0.8, "gate_top": 0.6}}, ("linear", 0.8, None, 0.6)),
    ({"specdiff": {"rule": "cactus", "leniency": 0.5, "gate_entropy": 1.0}}, ("cactus", 0.5, None, None, 1.0)),
    ({"specdiff": {"rule": "typical", "leniency": 0.09, "gate_top": 0.45, "gate_entropy": 2.0}},
     ("typical", 0.09, None, 0.45, 2.0)),
]


@pytest.mark.parametrize("point_mass", [False, True], ids=["marginal", "point mass"])
@pytest.mark.parametrize("extra_args, terms", EVERY_RULE, ids=lambda v: str(v) if isinstance(v, tuple) else "")
def test_every_rule_through_the_plugin_emits_verifys_law(extra_args, terms, point_mass):
    """A request's rule, read by the plugin's settings (over an engine whose own rule is Lossless), and verified
    on vLLM's flattened layout (B = 2 drafted tokens per request), emits what `sd.verify` emits with the rule
    `make_rule` builds from the same terms, on the same p, q and drafts: the law of the number of accepted
    drafts and of the first emitted token agree (two samples of n = 40,000: an exact pair's TV is about
    0.4 sqrt(2 k / n), k cells, <= 0.007 here; tolerance 0.02). The target has low-probability tokens,
    so that Typical(0.09) rejects some drafts: read as Typical(0, 0) it would accept every draft."""
    from specdiff.runs.config import make_rule

    n, block = ROWS, 2
    setting = request_rule(extra_args, engine_rule({"specdiff": {}}))
    rule = setting.acceptance_rule()
    expected_rule = make_rule(*terms)
    p_row = torch.tensor([0.5, 0.3, 0.15, 0.03, 0.01, 0.01], dtype=torch.float64)  # [V]
    q_row = torch.tensor([0.2, 0.1, 0.1, 0.2, 0.2, 0.2], dtype=torch.float64)
    generator = torch.Generator().manual_seed(5)
    drafts = torch.multinomial(q_row.float(), n * block, replacement=True, generator=generator).view(n, block)
    p = p_row.expand(n, block + 1, VOCAB).float()  # [n, B+1, V]
    q = None if point_mass else q_row.expand(n, block, VOCAB).float().contiguous()  # [n, B, V]
    bonus = torch.full((n,), 4)
    p = torch.cat([p[:, :block], torch.nn.functional.one_hot(bonus, VOCAB).float()[:, None]], dim=1)

    output = torch.full((n, block + 1), -7)  # vLLM's output: overwritten unless the rule is Lossless
    torch.manual_seed(1)
    relaxed_rejection_sample(output, drafts.reshape(-1), [block] * n, None if q is None else q.reshape(-1, VOCAB),
                             p[:, :block].reshape(-1, VOCAB), bonus, [None if rule.lossless else rule] * n,
                             inputs="probs")
    reference = sd.verify(drafts, q, p, rule=expected_rule, generator=torch.Generator().manual_seed(2))
    if rule.lossless:
        assert bool((output == -7).all())  # vLLM's own rows, untouched
        return
    ours_accepted = accepted_counts(output, [block] * n)
    ref_accepted = reference.num_accepted

    def tv(a, b, cells):
        return 0.5 * (torch.bincount(a, minlength=cells) - torch.bincount(b, minlength=cells)).abs().sum().item() / n

    assert tv(ours_accepted, ref_accepted, block + 1) <= 0.02, (rule, ours_accepted.float().mean(),
                                                                ref_accepted.float().mean())
    assert tv(output[:, 0], reference.tokens[:, 0], VOCAB) <= 0.02, rule
    assert rule == expected_rule


@pytest.mark.parametrize("bad, message", [
    ({"rule": "linear", "leniency": 0.2, "support": "untruncated"}, "supported: 'truncated'"),
    ({"rule": "linear", "leniency": 0.2, "typical_delta": 0.3}, "typical_delta is Typical's delta"),
    ({"rule": "typical", "leniency": -0.1}, "both must be >= 0"),
    ({"rule": "linear", "leniency": 0.2, "gate_top": 1.5}, "max_top must lie in"),
    ({"rule": "linear", "leniency": 0.2, "gate_entropy": "x"}, "gate_entropy must be a number"),
    ({"rule": "typical", "leniency": 0.09, "support": "bogus"}, "support must be one of"),
])
def test_a_rule_the_plugin_cannot_run_is_refused_naming_what_is_supported(bad, message):
    with pytest.raises(SpecdiffConfigError, match=message):
        engine_settings({"specdiff": bad})
    with pytest.raises(SpecdiffConfigError, match=message):
        request_rule({"specdiff": bad}, RuleSetting())


def test_block_verification_with_recorded_drafts_refuses_the_rules_verify_does_not_define():
    from specdiff.integrations.vllm.settings import check_method

    for terms in ({"rule": "typical", "leniency": 0.09}, {"rule": "cactus", "leniency": 0.3, "gate_top": 0.5}):
        setting = rule_setting(terms, "here")
        with pytest.raises(SpecdiffConfigError, match="not defined"):
            check_method(setting, "block", probabilistic=True, where="here")
        check_method(setting, "block", probabilistic=False, where="here")  # point mass: defined
        check_method(setting, "token", probabilistic=True, where="here")
    check_method(rule_setting({"rule": "cactus", "leniency": 0.3}, "here"), "block", True, "here")


def test_the_version_check_names_the_vllm_extras_range():
    """hooks.TESTED_VLLM, which the plugin's version check enforces and names, is the [vllm] extra's range."""
    import re
    from pathlib import Path

    from specdiff.integrations.vllm import hooks

    pyproject = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    extra = re.search(r'^vllm = \["vllm([^"]+)"', pyproject, re.M)
    assert extra and extra.group(1) == hooks.TESTED_VLLM
    hooks.check_version("0.32.0+cpu")
    hooks.check_version("0.32.7.dev3")
    for untested in ("0.31.2", "0.33.0", "1.0.0", "unknown"):
        with pytest.raises(hooks.SpecdiffInstallError, match=re.escape(hooks.TESTED_VLLM)):
            hooks.check_version(untested)
