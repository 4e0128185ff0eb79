"""The few-rows float64 host path of one verification round (gaussian.verify_round, CPU, <= SCALAR_ROWS rows).

One sample at a time, a round is ~60 tensor ops of a few numbers each, and a tensor op costs ~6-30 us
on the CPU against ~1-3 us for numpy on 64 numbers or a Python float operation. So for a few CPU rows
the round runs here, on float64 numpy copies and Python floats. It is the same round as
gaussian.verify_round_on_device (the paper's formulas, cited there): it draws the same random
numbers in the same order, so both return the same tau, rejections and next state up to rounding
(tests/continuous/test_gaussian.py checks it draw for draw). Only CPU tensors come here: reading them
is not a device sync.
"""
from __future__ import annotations

import math

import numpy as np
import torch
from scipy import special

from specdiff.continuous.gaussian_base import LOG_2, LOG_SQRT_2PI, GaussianVerifyResult


def _host(tensor: torch.Tensor) -> np.ndarray:
    """A float64 numpy view or copy of a CPU tensor (each skipped conversion is a tensor op saved)."""
    if tensor.requires_grad:
        tensor = tensor.detach()
    return (tensor if tensor.dtype == torch.float64 else tensor.double()).numpy()


def _log_uniform(shape, generator) -> np.ndarray:
    """log eta, eta ~ U(0, 1], as gaussian.draw_log_uniform draws it."""
    return np.log(_host(1.0 - torch.rand(shape, generator=generator, dtype=torch.float64, device="cpu")))


def _log1mexp(x: float) -> float:
    if x >= 0.0:
        return -math.inf
    return math.log(-math.expm1(x)) if x > -LOG_2 else math.log1p(-math.exp(x))


def _log_residual_cdf(u: float, log_alpha: float, delta_norm: float) -> float:
    """gaussian.log_residual_cdf for one row (Eq. 8)."""
    log_phi_u = float(special.log_ndtr(u))
    return log_alpha + log_phi_u + _log1mexp(float(special.log_ndtr(u - delta_norm)) - log_phi_u - log_alpha)


def _log_residual_density(u: float, log_alpha: float, delta_norm: float) -> float:
    """gaussian.log_residual_density for one row (Eq. 8)."""
    return log_alpha - 0.5 * u * u - LOG_SQRT_2PI + _log1mexp(u * delta_norm - 0.5 * delta_norm**2 - log_alpha)


def solve_psi_row(log_alpha: float, delta_norm: float, log_uniform: float, max_iterations: int = 60,
                  tolerance: float = 1e-11, max_doubling: int = 64) -> float:
    """gaussian.solve_psi for one row: the same bracket doubling, bisection and Newton points."""
    c = log_alpha / delta_norm + delta_norm / 2  # Psi_alpha(c) = 1
    log_target = _log_residual_cdf(c, log_alpha, delta_norm) + log_uniform
    upper, step = c, 1.0
    lower = c - step
    for _ in range(max_doubling):
        if _log_residual_cdf(lower, log_alpha, delta_norm) < log_target:
            break
        upper, step = lower, 2 * step
        lower = c - step
    u = 0.5 * (lower + upper)
    for _ in range(max_iterations):
        log_cdf = _log_residual_cdf(u, log_alpha, delta_norm)
        gap = log_cdf - log_target
        if abs(gap) < tolerance:
            break
        if gap < 0:
            lower = u
        else:
            upper = u
        log_step = log_cdf - _log_residual_density(u, log_alpha, delta_norm)
        newton = u - gap * math.exp(log_step) if log_step < 700 else -math.inf
        u = newton if lower < newton < upper else 0.5 * (lower + upper)
    return u


def _log_h(log_alpha: float, delta_norm: float) -> float:
    """log h_i = log rho_{i+1} - log(rho_{i+1} + 1 - alpha_i) of gaussian.block_verification, one step."""
    if delta_norm <= 0:  # the means coincide: rho = 0
        return -math.inf
    log_rho = _log_residual_cdf(log_alpha / delta_norm + delta_norm / 2, log_alpha, delta_norm)
    if not math.isfinite(log_rho):
        return -math.inf
    return log_rho - float(np.logaddexp(log_rho, _log1mexp(log_alpha)))


def block_verification_rows(
    log_ratio: np.ndarray,  # [b, g]
    delta_norm: np.ndarray,  # [b, g]
    drafted: np.ndarray,  # [b] L
    log_eta: np.ndarray,  # [b, g+1]
) -> tuple[np.ndarray, np.ndarray]:  # tau [b], log alpha_tau [b]
    """gaussian.block_verification row by row on Python floats. tau is the largest i with eta_i <= h_i,
    so the scan runs down from i = L and stops at the first pass; h_0 = 1 (alpha_0 = 1), so tau >= 0."""
    num_accepted = np.zeros(len(drafted), dtype=np.int64)
    log_alpha_tau = np.zeros(len(drafted))
    for row, (ratios, norms, etas) in enumerate(zip(log_ratio.tolist(), delta_norm.tolist(), log_eta.tolist())):
        last = int(drafted[row])  # L
        log_alpha, partial_sum, peak = [0.0], 0.0, 0.0  # log alpha_i = S_i - max_{j <= i} S_j
        for i in range(last):
            partial_sum += ratios[i]
            peak = max(peak, partial_sum)
            log_alpha.append(partial_sum - peak)
        tau = 0
        if etas[last] <= log_alpha[last]:  # h_L = alpha_L
            tau = last
        else:
            for i in range(last - 1, 0, -1):
                if etas[i] <= _log_h(log_alpha[i], norms[i]):
                    tau = i
                    break
        num_accepted[row], log_alpha_tau[row] = tau, log_alpha[tau]
    return num_accepted, log_alpha_tau


def verify_round_on_host(draft_noise, draft_means, target_means, sigma, num_drafted, method, residual, temperature,
                         generator) -> GaussianVerifyResult:
    """gaussian.verify_round on float64 numpy copies of a few CPU rows; the same draws in the same order
    as gaussian.verify_round_on_device (a residual's V and fresh normals for every row, used where rejected)."""
    b, g, d = draft_noise.shape
    dtype = draft_means.dtype
    drafted = num_drafted.numpy()  # [b] L
    z, m_p, m_q, sd = _host(draft_noise), _host(draft_means), _host(target_means), _host(sigma)
    speculated = np.arange(g) < drafted[:, None]  # [b, g]
    safe_sigma = np.where(speculated, sd[:, :g], 1.0)[..., None]  # [b, g, 1]
    delta = np.where(speculated[..., None], (m_p - m_q[:, :g]) / safe_sigma, 0.0)  # [b, g, d] Delta_i
    delta_sq = (delta * delta).sum(-1)  # [b, g] |Delta_i|^2
    log_ratio = -((z * delta).sum(-1) + 0.5 * delta_sq) / temperature**2  # log q/p (Appendix A.2, I.1)

    if method == "sample":  # Algorithm 2
        accepted = (_log_uniform((b, g), generator) <= log_ratio) | ~speculated
        num_accepted = np.minimum(np.cumprod(accepted, axis=1).sum(axis=1), drafted)
        log_alpha = np.zeros(b)
    else:
        num_accepted, log_alpha = block_verification_rows(log_ratio, np.sqrt(delta_sq), drafted,
                                                          _log_uniform((b, g + 1), generator))

    rows = np.arange(b)
    bonus_noise = _host(torch.randn((b, d), generator=generator, dtype=dtype, device="cpu"))  # a target step from y_hat_tau
    next_state = m_q[rows, num_accepted] + sd[rows, num_accepted, None] * bonus_noise
    rejected = num_accepted < drafted
    if residual == "decomposition" and g > 0:  # drawn for every row, as on the device
        log_uniform = _log_uniform((b,), generator)
        fresh = _host(torch.randn((b, d), generator=generator, dtype=dtype, device="cpu"))
    if rejected.any():
        r = np.flatnonzero(rejected)
        step = num_accepted[r]  # the rejected draft is number step+1, at index step
        delta_norm = np.sqrt(delta_sq[r, step])[:, None]  # [n, 1] > 0 where a draft is rejected
        e = delta[r, step] / np.maximum(delta_norm, 1e-300)  # [n, d]
        if residual == "reflection":  # Algorithm 4: (Id - 2 e e^T) z
            noise = z[r, step] - 2 * (z[r, step] * e).sum(-1, keepdims=True) * e
        else:  # Algorithm 5: U e + Z_perp, U ~ psi_alpha
            along_e = np.array([solve_psi_row(a, n, v) for a, n, v in
                                zip(log_alpha[r].tolist(), delta_norm[:, 0].tolist(), log_uniform[r].tolist())])
            noise = along_e[:, None] * e + fresh[r] - (fresh[r] * e).sum(-1, keepdims=True) * e
        next_state[r] = m_q[r, step] + sd[r, step, None] * noise
    return GaussianVerifyResult(num_accepted=torch.from_numpy(num_accepted),
                                next_state=torch.from_numpy(next_state).to(dtype),
                                rejected=torch.from_numpy(rejected), lossless=temperature == 1.0)
