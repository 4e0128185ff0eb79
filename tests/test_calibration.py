"""The throughput model's maths (specdiff.eval.calibration): the cost fit, Eq. 6, Proposition 1 /
Eq. 7 on hand-computed cases, the survival curves that drop Prop. 1's assumptions, and that the
per-draft curve is what `sd.verify` actually accepts."""
import math

import numpy as np
import pytest
import torch

import specdiff as sd
from specdiff.eval import calibration as cal


def test_fit_recovers_a_and_b():
    ks = [1, 2, 4, 8]
    fit = cal.fit_draft_cost(ks, [0.5e-3 + 0.25e-3 * k for k in ks])
    assert fit["a"] == pytest.approx(0.5e-3) and fit["b"] == pytest.approx(0.25e-3)
    assert fit["r2"] == pytest.approx(1.0) and max(abs(r) for r in fit["residuals"]) < 1e-12
    noisy = cal.fit_draft_cost(ks, [1 + 2 * k + e for k, e in zip(ks, [0.1, -0.1, -0.1, 0.1])])
    assert noisy["a"] == pytest.approx(1, abs=0.2) and noisy["b"] == pytest.approx(2, abs=0.05)
    assert 0.99 < noisy["r2"] < 1 and sum(noisy["residuals"]) == pytest.approx(0, abs=1e-9)
    assert cal.draft_cost(fit, 3) == pytest.approx(1.25e-3)


def test_fit_with_one_effort_is_a_constant():
    fit = cal.fit_draft_cost([4], [2.0])
    assert (fit["a"], fit["b"], fit["r2"]) == (2.0, 0.0, 1.0)
    with pytest.raises(ValueError):
        cal.fit_draft_cost([], [])


def test_eq6_acceptance_and_agreement():
    assert cal.expected_acceptance(0.4, 0.25) == pytest.approx(1 - 0.75 * 0.4)  # 0.7
    assert cal.verifier_agreement(0.4, 0.25) == pytest.approx(0.9)
    assert cal.expected_acceptance(0.4, 0.0) == pytest.approx(0.6)  # lossless: 1 - TV
    assert cal.expected_acceptance(0.4, 1.0) == 1.0 and cal.verifier_agreement(0.4, 0.0) == 1.0


def test_prop1_and_eq7_by_hand():
    # alpha = 0.5, B = 2: 1 + 0.5 + 0.25 tokens per round; c_d = 1 + 1 * 2 ms, c_v = 2 ms -> 1.75 / 5 ms
    assert cal.expected_tokens_per_round(0.5, 2) == pytest.approx(1.75)
    assert cal.expected_accepted_per_round(0.5, 2) == pytest.approx(0.75)
    fit = {"a": 1e-3, "b": 1e-3}
    assert cal.throughput(0.5, 2, cal.draft_cost(fit, 2), 2e-3) == pytest.approx(350.0)
    for alpha, block in ((0.3, 8), (0.9, 16)):  # Eq. 9's closed form
        assert cal.expected_tokens_per_round(alpha, block) == pytest.approx((1 - alpha ** (block + 1)) / (1 - alpha))
    assert cal.expected_tokens_per_round(1.0, 8) == 9
    predicted = cal.predict(cal.iid_survival(0.5, 2), 2, fit, 2e-3)
    assert predicted["tokens_per_round"] == pytest.approx(1.75) and predicted["throughput"] == pytest.approx(350.0)
    assert predicted["acceptance"] == pytest.approx(0.5) and predicted["round_ms"] == pytest.approx(5.0)
    # a 7 ms prefill per 35-token problem: 35 / 1.75 = 20 rounds, 0.35 ms each
    with_prefill = cal.predict(cal.iid_survival(0.5, 2), 2, fit, 2e-3, prefill_seconds=7e-3, tokens_per_problem=35)
    assert with_prefill["prefill_ms_per_round"] == pytest.approx(0.35)
    assert with_prefill["throughput"] == pytest.approx(1.75 / 5.35e-3)


def test_positional_and_per_draft_survival():
    assert np.allclose(cal.positional_survival([0.2, 0.2, 0.2], 0.5), cal.iid_survival(0.9, 3))
    assert np.allclose(cal.positional_survival([0.0, 0.5], 0.0), [1, 1, 0.5])
    # point mass (q(y) = 1): accept with (1 - lam) p(y) + lam; two drafts averaged
    p = np.array([[1.0, 0.5], [0.5, 0.5]])
    survival = cal.per_draft_survival(p, np.ones_like(p), 0.0)
    assert np.allclose(survival, [1, 0.75, (0.5 + 0.25) / 2])
    assert np.allclose(cal.per_draft_survival(p, np.ones_like(p), 1.0), [1, 1, 1])


def test_per_draft_survival_is_what_verify_accepts():
    """Independent positions with their own p_i and q_i: the mean accepted length of sd.verify under
    Linear(lam) equals sum_n s_n - 1 of per_draft_survival on the drafted tokens' p_i(y) and q_i(y)."""
    gen = torch.Generator().manual_seed(0)
    block, vocab, rows, lam = 3, 5, 20000, 0.3
    p = torch.softmax(torch.randn(block, vocab, generator=gen) * 2, -1).double()
    q = torch.softmax(torch.randn(block, vocab, generator=gen) * 2, -1).double()
    tokens = torch.stack([torch.multinomial(q[i], rows, replacement=True, generator=gen) for i in range(block)], 1)
    target = torch.cat([p, p[:1]]).expand(rows, block + 1, vocab)
    result = sd.verify(tokens, q.expand(rows, block, vocab), target, rule=sd.Linear(lam), generator=gen)
    p_y, q_y = p.gather(1, tokens.T).T.numpy(), q.gather(1, tokens.T).T.numpy()
    survival = cal.per_draft_survival(p_y, q_y, lam)
    assert result.num_accepted.double().mean().item() == pytest.approx(survival.sum() - 1, abs=0.03)
    # and Eq. 6 per position gives the same expectation (independent positions)
    tv = 0.5 * (p - q).abs().sum(-1)
    assert cal.positional_survival(tv.tolist(), lam).sum() == pytest.approx(survival.sum(), abs=0.03)


def test_measured_acceptance_and_errors():
    assert cal.per_position_acceptance([8, 2, 0], 8) == pytest.approx(10 / 12)
    assert math.isnan(cal.per_position_acceptance([], 8))
    assert cal.relative_error(110, 100) == pytest.approx(0.1) and math.isnan(cal.relative_error(1, 0))
    errors = [{"throughput": 0.1, "acceptance": -0.3}, {"throughput": -0.2}, {"throughput": 0.5}]
    summary = cal.summarize_errors(errors)
    assert summary["median_rel_error_throughput"] == pytest.approx(0.2)
    assert summary["median_rel_error_acceptance"] == pytest.approx(0.3)
    assert summary["median_rel_error_tokens_per_round"] is None
