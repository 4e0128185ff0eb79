"""Speculative DDPM reproduces plain DDPM: two-sample KS tests on 8 random projections, n = 20,000
per side, one batched sampler call per case with a fixed seed. A case passes when every projection's
p-value exceeds 1e-3; the lossy control (temperature 2) must fall below 1e-4 (the test has power)."""
import warnings

import pytest
import torch

from specdiff.continuous import LossyTemperatureWarning
from specdiff.continuous.metrics import projection_two_sample_pvalues
from specdiff.continuous.models import GaussianMixture, Target, gaussian_mixture_2d, gaussian_mixture_64d
from specdiff.continuous.sampler import SpeculativeSampler, ddpm_sample, initial_noise
from specdiff.continuous.schedules import rectified_flow_schedule

N = 20_000
P_MIN = 1e-3


def _target(mixture, steps=30, churn=0.5):
    return Target(rectified_flow_schedule(steps, churn), mixture, mixture.dim)


_REFERENCES = {}


def _ddpm_reference(name, target):
    if name not in _REFERENCES:
        noise = initial_noise(N, target.dim, torch.Generator().manual_seed(100), torch.float64)
        _REFERENCES[name] = ddpm_sample(target, noise, torch.Generator().manual_seed(101))[0]
    return _REFERENCES[name]


def _speculative(target, seed=7, **kwargs):
    sampler = SpeculativeSampler(target, **kwargs)
    noise = initial_noise(N, target.dim, torch.Generator().manual_seed(seed), torch.float64)
    return sampler.sample(noise, torch.Generator().manual_seed(seed + 1))


COMBINATIONS = [
    ("sample", "reflection", "free"), ("sample", "reflection", "frozen"),
    ("sample", "decomposition", "free"), ("sample", "decomposition", "frozen"),
    ("block", "decomposition", "free"), ("block", "decomposition", "frozen"),
]


@pytest.mark.parametrize("method,residual,drafter", COMBINATIONS)
def test_speculative_matches_ddpm_2d(method, residual, drafter):
    target = _target(gaussian_mixture_2d())
    samples, stats = _speculative(target, method=method, residual=residual, drafter=drafter, draft_length=4)
    assert min(projection_two_sample_pvalues(samples, _ddpm_reference("2d", target))) > P_MIN
    assert 1.5 < stats.block_efficiency <= 5  # it does speculate


def test_speculative_matches_ddpm_64d_block_free():
    target = _target(gaussian_mixture_64d(), steps=12)
    samples, _ = _speculative(target, method="block", residual="decomposition", drafter="free", draft_length=4)
    assert min(projection_two_sample_pvalues(samples, _ddpm_reference("64d", target))) > P_MIN


def test_lossy_temperature_is_detected():
    target = _target(gaussian_mixture_2d())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LossyTemperatureWarning)
        samples, _ = _speculative(target, method="block", residual="decomposition", draft_length=4, temperature=2.0)
    assert min(projection_two_sample_pvalues(samples, _ddpm_reference("2d", target))) < 1e-4


def test_separate_model_drafter_is_exact():
    mixture = gaussian_mixture_2d()
    wrong = GaussianMixture(mixture.means * 1.15 + 0.1, torch.full((8,), 0.35), torch.arange(1.0, 9.0))
    target = _target(mixture)
    samples, stats = _speculative(target, method="block", residual="decomposition", drafter=wrong, draft_length=4)
    assert min(projection_two_sample_pvalues(samples, _ddpm_reference("2d", target))) > P_MIN
    assert bool((stats.drafter_calls == 4 * stats.rounds).all())


def test_call_accounting_free_and_frozen():
    target = _target(gaussian_mixture_2d(), steps=20)
    noise = initial_noise(64, 2, torch.Generator().manual_seed(0), torch.float64)
    _, free = SpeculativeSampler(target, "free", 4).sample(noise, torch.Generator().manual_seed(1))
    _, frozen = SpeculativeSampler(target, "frozen", 4).sample(noise, torch.Generator().manual_seed(1))
    assert bool((free.target_calls == free.rounds + 1).all())  # one root call, then one call per round
    # Frozen: a root call on every round that drafts (all but a final round on the sigma = 0 step)
    assert bool((frozen.target_calls >= 2 * frozen.rounds - 1).all())
    assert bool((frozen.target_calls <= 2 * frozen.rounds).all())
    assert bool((free.rounds <= 20).all()) and bool((free.rounds >= 20 / 5).all())


def test_churn_zero_is_never_speculated_and_equals_ddpm():
    target = _target(gaussian_mixture_2d(), steps=15, churn=0.0)
    noise = initial_noise(500, 2, torch.Generator().manual_seed(0), torch.float64)
    reference, _ = ddpm_sample(target, noise, torch.Generator().manual_seed(1))
    samples, stats = SpeculativeSampler(target, "free", 4, "block", "decomposition").sample(noise, torch.Generator().manual_seed(2))
    assert bool((stats.rounds == 15).all())
    assert torch.allclose(samples, reference, atol=1e-10)


def test_sampler_rejects_bad_configuration():
    target = _target(gaussian_mixture_2d())
    with pytest.raises(ValueError, match="block verification needs"):
        SpeculativeSampler(target, method="block", residual="reflection")
    with pytest.raises(ValueError, match="unknown drafter"):
        SpeculativeSampler(target, drafter="lazy")
    with pytest.raises(ValueError, match="churn"):
        rectified_flow_schedule(10, churn=1.5)
    with pytest.raises(ValueError, match="SpeculativeSampler: unknown method"):
        SpeculativeSampler(target, method="tree")
    with pytest.raises(ValueError, match="SpeculativeSampler: temperature"):
        SpeculativeSampler(target, temperature=0.0)
    broken = rectified_flow_schedule(10, 0.5)
    broken.score_coef[3] = float("nan")
    with pytest.raises(ValueError, match="schedule's coefficients must be finite"):
        SpeculativeSampler(Target(broken, gaussian_mixture_2d(), 2))


def test_sampler_names_a_model_output_with_nan():
    """The sampler validates once (schedule, initial state) and then every model output as it comes,
    instead of re-checking every verification input each round."""
    mixture = gaussian_mixture_2d()

    def broken(states, steps, schedule):  # NaN from step 5 on
        out = mixture(states, steps, schedule)
        return torch.where((steps >= 5).unsqueeze(-1), torch.full_like(out, float("nan")), out)

    target = Target(rectified_flow_schedule(12, 0.5), broken, 2)
    noise = initial_noise(4, 2, torch.Generator().manual_seed(0), torch.float64)
    for method, residual in (("sample", "reflection"), ("block", "decomposition")):
        with pytest.raises(ValueError, match="target model's output contains NaN"):
            SpeculativeSampler(target, "free", 3, method, residual).sample(noise, torch.Generator().manual_seed(1))
    with pytest.raises(ValueError, match="drafter model's output contains NaN"):
        SpeculativeSampler(_target(mixture, steps=12), broken, 3).sample(noise, torch.Generator().manual_seed(1))
    with pytest.raises(ValueError, match="initial state"):
        SpeculativeSampler(_target(mixture)).sample(torch.full((2, 2), float("nan")))


class DampedScoreDrafter:
    """A user's drafter written against the ContinuousDrafter contract without subclassing it: Eq. 10 with
    the score at the current state damped by 0.7 (a wrong drafter, so verification has work to do), root
    calls on every drafting row, and a record of what the verification call passed back."""

    def __init__(self):
        self.observed_rounds = 0

    def start(self, initial):
        self.observed_rounds = 0

    def root_rows(self, drafting):
        return drafting

    def draft(self, schedule, states, steps, draft_noise, root_denoised, rows):
        from specdiff.continuous.drafters import Draft, draft_with_frozen_score
        from specdiff.continuous.schedules import score_from_denoised

        score = torch.zeros_like(states) if root_denoised is None else score_from_denoised(schedule, states, steps, root_denoised)
        means, drafted = draft_with_frozen_score(schedule, states, steps, 0.7 * score, draft_noise)
        return Draft(means, drafted)

    def observe(self, schedule, rows, states, steps, denoised, num_accepted):
        assert states.shape[:2] == denoised.shape[:2] == steps.shape and num_accepted.shape == states.shape[:1]
        self.observed_rounds += 1


@pytest.mark.parametrize("method,residual", [("sample", "reflection"), ("block", "decomposition")])
def test_a_users_drafter_following_the_contract_is_exact(method, residual):
    target = _target(gaussian_mixture_2d())
    drafter = DampedScoreDrafter()
    samples, stats = _speculative(target, method=method, residual=residual, drafter=drafter, draft_length=4)
    assert min(projection_two_sample_pvalues(samples, _ddpm_reference("2d", target))) > P_MIN
    assert 1.5 < stats.block_efficiency <= 5
    assert drafter.observed_rounds == int(stats.rounds.max())
    assert bool((stats.target_calls >= 2 * stats.rounds - 1).all())  # its root calls are made and counted
