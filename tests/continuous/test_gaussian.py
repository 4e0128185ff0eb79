"""Exactness of one verification round (gaussian.py), each case one batched call with a fixed seed.

Tolerances: KS p-values must exceed 1e-3 (one-sample against the exact c.d.f.); acceptance rates must
lie within 4.5 binomial standard errors of the closed form of Appendix A.2.
"""
import math
import warnings

import numpy as np
import pytest
import torch
from scipy import special, stats

from specdiff.continuous import LossyTemperatureWarning, acceptance_probability, gaussian_verify
from specdiff.continuous.gaussian import (
    SCALAR_ROWS,
    GaussianVerifyResult,
    block_verification,
    decomposition_residual,
    sample_psi,
    solve_psi,
    verify_round_on_device,
)
from specdiff.continuous.gaussian_host import block_verification_rows, solve_psi_row, verify_round_on_host

P_MIN = 1e-3


def psi_cdf(u: np.ndarray, alpha: float, delta_norm: float) -> np.ndarray:
    """Reference c.d.f. of psi_alpha, written independently with scipy in log space."""
    c = math.log(alpha) / delta_norm + delta_norm / 2
    def log_f(x):
        x = np.minimum(x, c)
        a, b = math.log(alpha) + special.log_ndtr(x), special.log_ndtr(x - delta_norm)
        return a + np.log1p(-np.exp(b - a))
    return np.exp(log_f(u) - log_f(np.array(c)))


@pytest.mark.parametrize("alpha,delta_norm", [(1.0, 0.05), (1.0, 1.5), (0.3, 1.0), (1e-3, 4.0), (1e-6, 0.1)])
def test_psi_sampler_matches_its_cdf(alpha, delta_norm):
    n = 20_000
    generator = torch.Generator().manual_seed(1)
    u = sample_psi(torch.full((n,), math.log(alpha)), torch.full((n,), delta_norm), generator).numpy()
    assert u.max() <= math.log(alpha) / delta_norm + delta_norm / 2 + 1e-9
    assert stats.kstest(u, lambda x: psi_cdf(x, alpha, delta_norm)).pvalue > P_MIN


@pytest.mark.parametrize("alpha,delta_norm", [(1.0, 0.05), (0.3, 1.0), (1e-6, 0.1)])
def test_psi_sampler_row_by_row_matches_its_cdf(alpha, delta_norm):
    """The host path's row-by-row solve (<= SCALAR_ROWS CPU rows, the one-sample-at-a-time case), 4,000 rows."""
    log_uniform = np.log(1 - torch.rand(4000, generator=torch.Generator().manual_seed(2), dtype=torch.float64).numpy())
    u = np.array([solve_psi_row(math.log(alpha), delta_norm, v) for v in log_uniform.tolist()])
    assert stats.kstest(u, lambda x: psi_cdf(x, alpha, delta_norm)).pvalue > P_MIN


def test_host_and_device_psi_solves_find_the_same_root():
    """The float64 tensor solve (any device) and the host's row-by-row solve: the same root for the same V."""
    rng = np.random.default_rng(0)
    delta_norm = np.exp(rng.uniform(-6, 3, 400))
    log_alpha = np.where(rng.random(400) < 0.2, 0.0, -np.exp(rng.uniform(-8, 2, 400)))
    log_uniform = np.log(1 - rng.random(400))
    device = solve_psi(*(torch.from_numpy(x) for x in (log_alpha, delta_norm, log_uniform)), 60, 1e-11, 64)
    host = [solve_psi_row(a, d, v, 60, 1e-11, 64) for a, d, v in zip(log_alpha, delta_norm, log_uniform)]
    assert np.allclose(host, device.numpy(), rtol=1e-9, atol=1e-9)


def _orthonormal_frame(e: torch.Tensor, count: int, seed: int) -> torch.Tensor:  # [d] -> [count, d]
    g = torch.Generator().manual_seed(seed)
    v = torch.randn(count, e.shape[0], generator=g, dtype=torch.float64)
    v = v - (v @ e).unsqueeze(-1) * e
    return torch.linalg.qr(v.T).Q.T


def test_decomposition_residual_density_along_e_and_orthogonal():
    n, d, alpha = 20_000, 16, 0.4
    g = torch.Generator().manual_seed(2)
    delta = torch.randn(d, generator=g, dtype=torch.float64) * 0.3
    e, delta_norm = delta / delta.norm(), float(delta.norm())
    target_mean = torch.randn(d, generator=g, dtype=torch.float64)
    sigma = 0.7
    y = decomposition_residual(
        delta.expand(n, d), target_mean.expand(n, d), torch.full((n,), sigma, dtype=torch.float64),
        torch.full((n,), math.log(alpha), dtype=torch.float64), g,
    )
    w = (y - target_mean) / sigma
    assert stats.kstest((w @ e).numpy(), lambda x: psi_cdf(x, alpha, delta_norm)).pvalue > P_MIN
    for direction in _orthonormal_frame(e, 3, seed=3):
        assert stats.kstest((w @ direction).numpy(), "norm").pvalue > P_MIN


def _one_step(n, d, delta_scale, seed, method="sample", residual="reflection", temperature=1.0):
    g = torch.Generator().manual_seed(seed)
    delta = torch.zeros(d, dtype=torch.float64)
    delta[0] = delta_scale
    sigma = torch.tensor([0.5, 0.5], dtype=torch.float64)
    target_mean = torch.linspace(-1, 1, d, dtype=torch.float64)
    draft_mean = target_mean + sigma[0] * delta
    z = torch.randn(n, 1, d, generator=g, dtype=torch.float64)
    target_means = torch.stack([target_mean, target_mean + 3.0]).expand(n, 2, d)
    result = gaussian_verify(
        z, draft_mean.expand(n, 1, d), target_means, sigma, method=method, residual=residual,
        temperature=temperature, generator=g,
    )
    return result, (result.next_state - target_mean) / sigma[0], z


@pytest.mark.parametrize("method,residual", [("sample", "reflection"), ("sample", "decomposition"), ("block", "decomposition")])
def test_one_step_output_is_the_target_and_residual_is_psi(method, residual):
    """gamma = 1: rejected rows follow psi_1 along e and N(0, 1) across; every row follows q exactly."""
    n, d, delta_norm = 40_000, 6, 1.2
    result, w, z = _one_step(n, d, delta_norm, seed=4, method=method, residual=residual)
    accepted = (result.num_accepted == 1).unsqueeze(-1)
    rejected = w[~accepted.squeeze(-1)]
    assert stats.kstest(rejected[:, 0].numpy(), lambda x: psi_cdf(x, 1.0, delta_norm)).pvalue > P_MIN
    assert stats.kstest(rejected[:, 1].numpy(), "norm").pvalue > P_MIN
    # the state of step 1: the draft y_1 = m^p + sigma z where accepted, the residual draw otherwise
    delta = torch.zeros(d, dtype=torch.float64)
    delta[0] = delta_norm
    step_one = torch.where(accepted, delta + z[:, 0], w)
    for coordinate in (0, 1):
        assert stats.kstest(step_one[:, coordinate].numpy(), "norm").pvalue > P_MIN
    assert rejected.shape[0] > 5000


def test_measured_acceptance_matches_closed_form():
    """Appendix A.2: P_accept(|Delta|, alpha = 1, omega) for omega in {0.5, 1, 2}."""
    n, d = 200_000, 4
    for delta_norm in (0.3, 1.0, 2.5):
        for temperature in (0.5, 1.0, 2.0):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", LossyTemperatureWarning)
                result, _, _ = _one_step(n, d, delta_norm, seed=5, temperature=temperature)
            measured = result.num_accepted.double().mean().item()
            expected = acceptance_probability(delta_norm, 0.0, temperature).item()
            standard_error = math.sqrt(expected * (1 - expected) / n)
            assert abs(measured - expected) < 4.5 * standard_error, (delta_norm, temperature, measured, expected)


def test_closed_form_is_one_minus_total_variation_at_omega_one():
    delta_norm = torch.tensor([0.1, 1.0, 3.0])
    tv = 2 * torch.special.ndtr(delta_norm.double() / 2) - 1
    assert torch.allclose(acceptance_probability(delta_norm), 1 - tv, atol=1e-12)


# ----------------------------------------------------------------------------- several steps


def _linear_chain_round(method, residual, n=20_000, gamma=4, d=3, seed=6, rows_per_call=None):
    """Target steps m^q_i(y) = 0.8 y + b_i; the drafter adds a wrong drift c_i. One round from y_0 = 0,
    then target steps up to step gamma + 1. Returns the final states and tau. rows_per_call: verify
    the n rows in calls of that many (SCALAR_ROWS: the row-by-row host path) instead of one call."""
    g = torch.Generator().manual_seed(seed)
    b = torch.randn(gamma + 1, d, generator=g, dtype=torch.float64)
    c = torch.randn(gamma, d, generator=g, dtype=torch.float64) * 0.6
    sigma = torch.linspace(0.9, 0.5, gamma + 1, dtype=torch.float64)
    z = torch.randn(n, gamma, d, generator=g, dtype=torch.float64)
    states = [torch.zeros(n, d, dtype=torch.float64)]
    draft_means = []
    for i in range(gamma):
        draft_means.append(0.8 * states[-1] + b[i] + c[i])
        states.append(draft_means[-1] + sigma[i] * z[:, i])
    target_means = torch.stack([0.8 * s + b[i] for i, s in enumerate(states)], 1)  # [n, g+1, d]
    draft_means = torch.stack(draft_means, 1)
    if rows_per_call is None:
        result = gaussian_verify(z, draft_means, target_means, sigma, method=method, residual=residual, generator=g)
    else:
        parts = [gaussian_verify(z[i:i + rows_per_call], draft_means[i:i + rows_per_call], target_means[i:i + rows_per_call],
                                 sigma, method=method, residual=residual, generator=g) for i in range(0, n, rows_per_call)]
        result = GaussianVerifyResult(torch.cat([r.num_accepted for r in parts]), torch.cat([r.next_state for r in parts]),
                                      torch.cat([r.rejected for r in parts]), True)
    y = result.next_state
    for step in range(gamma + 1):  # finish: rows at step tau + 1 < i take target step i
        moving = (result.num_accepted + 1 <= step).unsqueeze(-1)
        if step >= 1:
            y = torch.where(moving, 0.8 * y + b[step] + sigma[step] * torch.randn(n, d, generator=g, dtype=torch.float64), y)
    mean, var = torch.zeros(d, dtype=torch.float64), 0.0
    for i in range(gamma + 1):
        mean, var = 0.8 * mean + b[i], 0.64 * var + sigma[i] ** 2
    return y, result.num_accepted, mean, math.sqrt(var)


@pytest.mark.parametrize("method,residual", [("sample", "reflection"), ("sample", "decomposition"), ("block", "decomposition")])
def test_round_then_target_steps_give_the_exact_marginal(method, residual):
    y, tau, mean, std = _linear_chain_round(method, residual)
    for direction in torch.eye(3, dtype=torch.float64):
        assert stats.kstest(((y - mean) @ direction / std).numpy(), "norm").pvalue > P_MIN
    assert 0 < tau.double().mean() < 4


@pytest.mark.parametrize("method,residual", [("sample", "reflection"), ("sample", "decomposition"), ("block", "decomposition")])
def test_host_round_equals_the_tensor_round(method, residual):
    """A few CPU rows are verified on float64 numpy copies: same random draws in the same order as
    the tensor ops, so the same tau, rejections and next state (to rounding), over 300 rounds of
    8 rows with every L in 0..gamma and drafts both close to and far from the target."""
    g, d = 5, 6
    cases = torch.Generator().manual_seed(12)
    rejected_rows = 0
    for round_index in range(300):
        z = torch.randn(SCALAR_ROWS, g, d, generator=cases, dtype=torch.float64)
        target_means = torch.randn(SCALAR_ROWS, g + 1, d, generator=cases, dtype=torch.float64)
        scale = 0.05 + 1.5 * torch.rand(SCALAR_ROWS, 1, 1, generator=cases, dtype=torch.float64)
        draft_means = target_means[:, :g] + scale * torch.randn(SCALAR_ROWS, g, d, generator=cases, dtype=torch.float64)
        sigma = 0.3 + torch.rand(SCALAR_ROWS, g + 1, generator=cases, dtype=torch.float64)
        drafted = torch.randint(0, g + 1, (SCALAR_ROWS,), generator=cases)
        args = (z, draft_means, target_means, sigma, drafted, method, residual, 1.0)
        host = verify_round_on_host(*args, torch.Generator().manual_seed(round_index))
        tensor = verify_round_on_device(*args, torch.Generator().manual_seed(round_index))
        assert torch.equal(host.num_accepted, tensor.num_accepted)
        assert torch.equal(host.rejected, tensor.rejected)
        assert torch.allclose(host.next_state, tensor.next_state, rtol=1e-9, atol=1e-9)
        rejected_rows += int(host.rejected.sum())
    assert rejected_rows > 300  # the residual paths ran


@pytest.mark.parametrize("method,residual", [("sample", "reflection"), ("sample", "decomposition"), ("block", "decomposition")])
def test_round_verified_a_few_rows_at_a_time_gives_the_exact_marginal(method, residual):
    """The host paths for few rows (block verification and psi row by row on Python floats, the
    one-sample-at-a-time case of the bench): 2,500 calls of SCALAR_ROWS rows."""
    y, tau, mean, std = _linear_chain_round(method, residual, rows_per_call=SCALAR_ROWS, seed=11)
    for direction in torch.eye(3, dtype=torch.float64):
        assert stats.kstest(((y - mean) @ direction / std).numpy(), "norm").pvalue > P_MIN
    assert 0 < tau.double().mean() < 4


def test_block_verification_row_by_row_matches_the_vectorised_rule():
    """Same inputs and uniforms: the host's Python-float scan (<= SCALAR_ROWS rows) and the tensor rule
    (any device) return the same tau and alpha_tau, over ratios from -50 to 3, coinciding means and every L."""
    rng = np.random.default_rng(3)
    b, g = 4000, 7
    log_ratio = np.where(rng.random((b, g)) < 0.1, 0.0, rng.normal(-1.0, 2.0, (b, g)).clip(-50, 3))
    delta_norm = np.where(log_ratio == 0.0, 0.0, np.exp(rng.uniform(-5, 2.5, (b, g))))
    drafted = rng.integers(0, g + 1, b)
    log_eta = np.log(1 - rng.random((b, g + 1)))
    tau_vector, log_alpha_vector = (t.numpy() for t in block_verification(
        *(torch.from_numpy(x) for x in (log_ratio, delta_norm, drafted, log_eta))))
    tau_rows, log_alpha_rows = block_verification_rows(log_ratio, delta_norm, drafted, log_eta)
    assert np.array_equal(tau_rows, tau_vector)
    assert np.allclose(log_alpha_rows, log_alpha_vector, rtol=1e-12, atol=1e-12)
    assert len(set(tau_rows.tolist())) == g + 1  # every tau occurs: the cases are not all alike


def test_block_accepts_at_least_as_many_as_sample():
    """Block verification is optimal among valid verifications (Sun et al. 2025, Thm 2)."""
    _, tau_sample, _, _ = _linear_chain_round("sample", "decomposition", seed=7)
    _, tau_block, _, _ = _linear_chain_round("block", "decomposition", seed=7)
    se = math.sqrt((tau_sample.double().var() + tau_block.double().var()).item() / tau_sample.numel())
    assert tau_block.double().mean() > tau_sample.double().mean() - 3 * se


# ----------------------------------------------------------------------------- edge cases and errors


@pytest.mark.parametrize("method,residual", [("sample", "reflection"), ("block", "decomposition")])
def test_coinciding_means_are_accepted_outright(method, residual):
    g = torch.Generator().manual_seed(8)
    means = torch.randn(50, 4, 3, generator=g)
    result = gaussian_verify(torch.randn(50, 3, 3, generator=g), means[:, :3], means, torch.ones(4), method=method, residual=residual, generator=g)
    assert bool((result.num_accepted == 3).all())


def test_num_drafted_pads_and_sigma_zero_only_where_not_speculated():
    g = torch.Generator().manual_seed(9)
    means = torch.randn(10, 3, 2, generator=g)
    sigma = torch.tensor([1.0, 0.0, 0.0])  # only step 1 is speculated
    result = gaussian_verify(torch.randn(10, 2, 2, generator=g), means[:, :2], means, sigma, generator=g,
                             num_drafted=torch.ones(10, dtype=torch.long))
    assert bool((result.num_accepted == 1).all())
    assert torch.allclose(result.next_state, means[:, 1])  # sigma_2 = 0: the bonus step is deterministic


def _args(b=2, g=3, d=4):
    return torch.randn(b, g, d), torch.randn(b, g, d), torch.randn(b, g + 1, d), torch.ones(g + 1)


@pytest.mark.parametrize(
    "change,message",
    [
        (lambda a: (a[0], a[1], a[2], torch.tensor([1.0, 0.0, 1.0, 1.0])), "sigma"),
        (lambda a: (a[0], a[1], a[2], torch.tensor([1.0, -1.0, 1.0, 1.0])), "sigma"),
        (lambda a: (a[0], a[1].index_fill(0, torch.tensor([0]), float("nan")), a[2], a[3]), "NaN"),
        (lambda a: (a[0], a[1], a[2].index_fill(1, torch.tensor([3]), float("nan")), a[3]), "NaN"),
        (lambda a: (a[0], a[1], a[2][:, :3], a[3]), "gamma\\+1"),
        (lambda a: (a[0][:, :2], a[1], a[2], a[3]), "draft_noise"),
        (lambda a: (a[0], a[1], a[2], torch.ones(3)), "sigma must be"),
    ],
)
def test_bad_input_raises_a_clear_value_error(change, message):
    with pytest.raises(ValueError, match=message):
        gaussian_verify(*change(_args()))


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(method="tree"), "unknown method"),
        (dict(residual="rejection"), "unknown residual"),
        (dict(method="block", residual="reflection"), "block verification needs"),
        (dict(temperature=0.0), "temperature"),
    ],
)
def test_bad_options_raise(kwargs, message):
    with pytest.raises(ValueError, match=message):
        gaussian_verify(*_args(), **kwargs)


def test_temperature_is_flagged_lossy():
    with pytest.warns(LossyTemperatureWarning):
        result = gaussian_verify(*_args(), temperature=2.0)
    assert result.lossless is False
    assert gaussian_verify(*_args()).lossless is True


@pytest.mark.parametrize("method", ["sample", "block"])
def test_state_at_step_two_is_exact_when_step_two_ignores_step_one(method):
    """gamma = 2, m^q_2 and m^p_2 constant: whatever tau, the state of step 2 must be N(m^q_2, sigma^2).
    Sensitive to the block residual's alpha_tau: with alpha = 1 instead, p = 1.4e-6 here (checked by mutation)."""
    n, d = 40_000, 2
    g = torch.Generator().manual_seed(10)
    sigma = torch.tensor([1.0, 1.0, 1.0], dtype=torch.float64)
    z = torch.randn(n, 2, d, generator=g, dtype=torch.float64)
    m_p1, m_q1 = torch.tensor([2.0, 0.0], dtype=torch.float64), torch.zeros(d, dtype=torch.float64)
    m_p2, m_q2 = torch.tensor([0.0, 0.0], dtype=torch.float64), torch.tensor([1.5, 0.0], dtype=torch.float64)
    draft_means = torch.stack([m_p1.expand(n, d), m_p2.expand(n, d)], 1)
    target_means = torch.stack([m_q1.expand(n, d), m_q2.expand(n, d), torch.full((n, d), 5.0, dtype=torch.float64)], 1)
    result = gaussian_verify(z, draft_means, target_means, sigma, method=method, residual="decomposition", generator=g)
    step_two = torch.where(
        (result.num_accepted == 0).unsqueeze(-1),
        m_q2 + torch.randn(n, d, generator=g, dtype=torch.float64),  # a target step from the residual draw
        torch.where((result.num_accepted == 1).unsqueeze(-1), result.next_state, m_p2 + z[:, 1]),
    )
    assert stats.kstest((step_two - m_q2)[:, 0].numpy(), "norm").pvalue > P_MIN
    assert bool((result.num_accepted == 1).sum() > 3000)


# ----------------------------------------------------------------------------- issue 11, item 6


def _scaled_args(b, scale=1.0, sigma_scale=1.0, dtype=torch.float32, g=3, d=4, seed=0):
    gen = torch.Generator().manual_seed(seed)
    z = torch.randn(b, g, d, generator=gen, dtype=dtype)
    draft_means = torch.randn(b, g, d, generator=gen, dtype=dtype) * scale
    target_means = torch.randn(b, g + 1, d, generator=gen, dtype=dtype) * scale
    return z, draft_means, target_means, torch.full((g + 1,), 0.5, dtype=dtype) * sigma_scale


@pytest.mark.parametrize("b", [4, 20])  # the host path (b <= SCALAR_ROWS) and the tensor path
@pytest.mark.parametrize("method,residual", [("sample", "reflection"), ("sample", "decomposition"), ("block", "decomposition")])
@pytest.mark.parametrize("scale,sigma_scale", [(1e30, 1.0), (1.0, 1e-30), (1e20, 1e-10)], ids=["means1e30", "sigma1e-30", "both"])
def test_extreme_float32_inputs_give_finite_states(b, method, residual, scale, sigma_scale):
    """Means x1e30 or sigma 1e-30 in float32: Delta overflows float32, so the round computes in float64
    and returns a finite state, the one the float64 host path returns for the same rows."""
    args = _scaled_args(b, scale, sigma_scale)
    result = gaussian_verify(*args, method=method, residual=residual, generator=torch.Generator().manual_seed(1))
    assert result.next_state.dtype == torch.float32
    assert bool(torch.isfinite(result.next_state).all())
    z, draft_means, target_means, sigma = args
    round_args = (z, draft_means, target_means, sigma.expand(b, -1), torch.full((b,), 3), method, residual, 1.0)
    host = verify_round_on_host(*round_args, torch.Generator().manual_seed(1))
    tensor = verify_round_on_device(*round_args, torch.Generator().manual_seed(1))
    assert torch.equal(host.num_accepted, tensor.num_accepted)
    assert torch.allclose(host.next_state, tensor.next_state, rtol=1e-5)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy's overflow warnings on the host path
@pytest.mark.parametrize("b", [4, 20])
def test_a_round_beyond_float64_raises_instead_of_returning_nan(b):
    z, draft_means, target_means, sigma = _scaled_args(b, 1e300, 1e-300, dtype=torch.float64)
    with pytest.raises(ValueError, match="next state is not finite"):
        gaussian_verify(z, draft_means, target_means, sigma, generator=torch.Generator().manual_seed(1))


def test_two_dimensional_draft_noise_is_named():
    z, draft_means, target_means, sigma = _args()
    with pytest.raises(ValueError, match="draft_noise must be a \\[b, gamma, d\\] tensor, got \\(2, 4\\)"):
        gaussian_verify(z[:, 0], draft_means, target_means, sigma)
    with pytest.raises(ValueError, match="target_means must be a \\[b, gamma\\+1, d\\] tensor"):
        gaussian_verify(z, draft_means, target_means[0], sigma)


def test_integer_means_are_named_not_blamed_on_sigma():
    z, draft_means, target_means, sigma = _args()
    with pytest.raises(ValueError, match="draft_means must be a floating-point tensor, got torch.int64"):
        gaussian_verify(z, draft_means.long(), target_means.long(), sigma)
    with pytest.raises(ValueError, match="target_means must be a floating-point tensor, got torch.int32"):
        gaussian_verify(z, draft_means, target_means.int(), sigma)
    result = gaussian_verify(z, draft_means, target_means, torch.ones(4, dtype=torch.long))  # integer sigma is fine
    assert result.next_state.dtype == torch.float32


@pytest.mark.parametrize("num_drafted", [torch.full((2,), 1.5), torch.ones(2, dtype=torch.bool), torch.ones(2)],
                         ids=["1.5", "bool", "float-1"])
def test_num_drafted_must_be_integer(num_drafted):
    with pytest.raises(ValueError, match="num_drafted must be an integer tensor"):
        gaussian_verify(*_args(), num_drafted=num_drafted)
    assert gaussian_verify(*_args(), num_drafted=torch.ones(2, dtype=torch.int32)).num_accepted.shape == (2,)
