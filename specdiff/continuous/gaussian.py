"""One round of speculative DDPM verification between two isotropic Gaussians per step.

Everything here is the second paper ("Accelerating Speculative Diffusions via Block
Verification", Soen et al.), with p the drafter and q the target, as in that paper:

    drafter step i:  p_i(y) = N(y; m^p_i, sigma_i^2 Id),  drafted y_i = m^p_i + sigma_i z_i
    target  step i:  q_i(y) = N(y; m^q_i, sigma_i^2 Id)
    Delta_i = (m^p_i - m^q_i) / sigma_i,   delta_i = |Delta_i|,   e_i = Delta_i / delta_i   (Sec. 3.1)

All probabilities are handled as logarithms (Appendix A.2); no density is ever formed.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import torch
from scipy import special

LOG_2 = math.log(2.0)
LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


class LossyTemperatureWarning(UserWarning):
    """Temperature omega != 1 (Appendix I) does not sample the target any more."""


@dataclass
class GaussianVerifyResult:
    num_accepted: torch.Tensor  # [b] long, tau in 0..gamma
    next_state: torch.Tensor  # [b, d] the state of step tau + 1
    rejected: torch.Tensor  # [b] bool, next_state is a residual draw
    lossless: bool  # False when temperature != 1 (Appendix I)


# ----------------------------------------------------------------------------- log-space helpers


def log_ndtr(x: torch.Tensor) -> torch.Tensor:
    """log Phi(x), the standard normal log-c.d.f., finite far into both tails."""
    return torch.special.log_ndtr(x)


# ----------------------------------------------------------------------------- Appendix A.2


def log_density_ratio(
    draft_noise: torch.Tensor,  # [..., d] z, with y = m^p + sigma z
    delta: torch.Tensor,  # [..., d] Delta = (m^p - m^q) / sigma
    temperature: float = 1.0,
) -> torch.Tensor:  # [...]
    """log q^omega(y) / p^omega(y) = -(z.Delta + |Delta|^2 / 2) / omega^2 (Appendix A.2, I.1)."""
    z_dot_delta = (draft_noise * delta).sum(-1)
    delta_sq = (delta * delta).sum(-1)
    return -(z_dot_delta + 0.5 * delta_sq) / temperature**2


def acceptance_probability(delta_norm, log_alpha=0.0, temperature: float = 1.0):
    """Closed-form P_accept = E_{y~p}[min(1, alpha q^omega(y)/p^omega(y))] (Appendix A.2).

    P = Phi(A) + alpha exp(|D|^2/(2 w^2) (1/w^2 - 1)) (1 - Phi(A + |D|/w^2)),
    A = w^2 log(alpha)/|D| - |D|/2.  Returns 1 where |D| = 0 and alpha = 1.
    """
    delta_norm = torch.as_tensor(delta_norm, dtype=torch.float64)
    log_alpha = torch.as_tensor(log_alpha, dtype=torch.float64)
    w2 = temperature**2
    safe = delta_norm.clamp(min=1e-300)
    a = w2 * log_alpha / safe - safe / 2
    log_second = (
        log_alpha + safe**2 / (2 * w2) * (1 / w2 - 1) + log_ndtr(-(a + safe / w2))
    )
    p = torch.special.ndtr(a) + torch.exp(log_second)
    return torch.where(delta_norm > 0, p, torch.exp(log_alpha).clamp(max=1.0))


# ----------------------------------------------------------------------------- Sec. 3.1: psi_alpha


def _np_log1mexp(x: np.ndarray) -> np.ndarray:
    """log(1 - exp(x)) for x <= 0, accurate on both sides of -log 2 (Maechler 2012)."""
    x = np.minimum(x, 0.0)
    return np.where(x > -LOG_2, np.log(-np.expm1(x)), np.log1p(-np.exp(x)))


def _np_log_cdf(u, log_alpha, delta_norm):
    """log of int_{-inf}^u (alpha phi(v) - phi(v - |D|)) dv = log(alpha Phi(u) - Phi(u - |D|)), u <= c (Eq. 8)."""
    log_phi_u = special.log_ndtr(u)
    return log_alpha + log_phi_u + _np_log1mexp(special.log_ndtr(u - delta_norm) - log_phi_u - log_alpha)


def _np_log_density(u, log_alpha, delta_norm):
    """log(alpha phi(u) - phi(u - |D|)) for u < c, using log phi(u - |D|) - log phi(u) = u |D| - |D|^2/2."""
    log_phi_u = -0.5 * u * u - LOG_SQRT_2PI
    return log_alpha + log_phi_u + _np_log1mexp(u * delta_norm - 0.5 * delta_norm**2 - log_alpha)


def log_residual_mass(log_alpha: np.ndarray, delta_norm: np.ndarray) -> np.ndarray:
    """log int max(0, alpha q - p) = log(alpha Phi(c) - Phi(c - |D|)); -inf where |D| = 0 (Eq. 9).
    c = log(alpha)/|D| + |D|/2 is where alpha q - p changes sign along e (Appendix A.2, Lemma A.2)."""
    safe = np.maximum(delta_norm, 1e-300)
    with np.errstate(all="ignore"):
        log_mass = _np_log_cdf(log_alpha / safe + safe / 2, log_alpha, safe)
    return np.where(delta_norm > 0, log_mass, -np.inf)


def _log1mexp_scalar(x: float) -> float:
    if x >= 0.0:
        return -math.inf
    return math.log(-math.expm1(x)) if x > -LOG_2 else math.log1p(-math.exp(x))


def _log_cdf_scalar(u: float, log_alpha: float, delta_norm: float) -> float:
    """_np_log_cdf for one row, on Python floats (a few microseconds instead of tens)."""
    log_phi_u = float(special.log_ndtr(u))
    return log_alpha + log_phi_u + _log1mexp_scalar(float(special.log_ndtr(u - delta_norm)) - log_phi_u - log_alpha)


def _log_density_scalar(u: float, log_alpha: float, delta_norm: float) -> float:
    return log_alpha - 0.5 * u * u - LOG_SQRT_2PI + _log1mexp_scalar(u * delta_norm - 0.5 * delta_norm**2 - log_alpha)


def _solve_psi_scalar(log_alpha: float, delta_norm: float, log_uniform: float, max_iterations: int,
                      tolerance: float, max_doubling: int) -> float:
    """The inverse c.d.f. of sample_psi for one row: the same bracket, bisection and Newton points."""
    c = log_alpha / delta_norm + delta_norm / 2  # Psi_alpha(c) = 1
    log_target = _log_cdf_scalar(c, log_alpha, delta_norm) + log_uniform  # log V + log F(c)
    upper, step = c, 1.0
    lower = c - step
    for _ in range(max_doubling):  # bracket doubling
        if _log_cdf_scalar(lower, log_alpha, delta_norm) < log_target:
            break
        upper, step = lower, 2 * step
        lower = c - step
    u = 0.5 * (lower + upper)
    for _ in range(max_iterations):  # bisection, with Newton points kept when inside the bracket
        log_cdf = _log_cdf_scalar(u, log_alpha, delta_norm)
        gap = log_cdf - log_target  # increasing in u
        if abs(gap) < tolerance:
            break
        if gap < 0:
            lower = u
        else:
            upper = u
        log_step = log_cdf - _log_density_scalar(u, log_alpha, delta_norm)  # 1 / (d/du log F), in log
        newton = u - gap * math.exp(log_step) if log_step < 700 else -math.inf
        u = newton if lower < newton < upper else 0.5 * (lower + upper)
    return u


def _solve_psi_vector(log_alpha: np.ndarray, delta_norm: np.ndarray, log_uniform: np.ndarray,
                      max_iterations: int, tolerance: float, max_doubling: int) -> np.ndarray:
    """The inverse c.d.f. of sample_psi for many rows at once (numpy, elementwise)."""
    c = log_alpha / delta_norm + delta_norm / 2  # Psi_alpha(c) = 1
    log_target = _np_log_cdf(c, log_alpha, delta_norm) + log_uniform  # log V + log F(c)
    upper, step = c.copy(), np.ones_like(c)
    lower = c - step
    for _ in range(max_doubling):  # bracket doubling
        too_high = _np_log_cdf(lower, log_alpha, delta_norm) >= log_target
        if not too_high.any():
            break
        upper = np.where(too_high, lower, upper)
        step = np.where(too_high, 2 * step, step)
        lower = np.where(too_high, c - step, lower)
    u = 0.5 * (lower + upper)
    for _ in range(max_iterations):  # bisection, with Newton points kept when inside the bracket
        log_cdf = _np_log_cdf(u, log_alpha, delta_norm)
        gap = log_cdf - log_target  # increasing in u
        if (np.abs(gap) < tolerance).all():
            break
        lower = np.where(gap < 0, u, lower)
        upper = np.where(gap < 0, upper, u)
        newton = u - gap * np.exp(log_cdf - _np_log_density(u, log_alpha, delta_norm))  # d/du log F
        inside = (newton > lower) & (newton < upper) & np.isfinite(newton)
        u = np.where(inside, newton, 0.5 * (lower + upper))
    return u


SCALAR_ROWS = 8  # up to this many rows, the solve runs row by row on Python floats


def sample_psi(
    log_alpha: torch.Tensor,  # [n] log alpha, alpha in (0, 1]
    delta_norm: torch.Tensor,  # [n] |Delta| > 0
    generator: torch.Generator | None = None,
    max_iterations: int = 60,
    tolerance: float = 1e-11,
    max_doubling: int = 64,
) -> torch.Tensor:  # [n] float64
    """U ~ psi_alpha, the law along e of the residual norm(max(0, alpha q - p)) (Prop. 3.1, Eq. 8).

    Inverse c.d.f. (Algorithm 7 / Appendix A.1): Psi_alpha(c) = 1 gives the upper end of the
    bracket; the lower end is found by doubling the step below c until Psi_alpha(lo) < V. Then
    bisection on log Psi_alpha(u) = log V, where each step takes the Newton point instead of the
    midpoint when it falls inside the bracket (safeguarded Newton; same root, fewer steps), until
    |log Psi(u) - log V| < tolerance. A one-dimensional float64 solve in log space, on Python
    floats for a few rows (the one-sample-at-a-time case) and in numpy for many; it runs once per
    rejected row, and numpy's or Python's per-call cost is a fraction of torch's on tiny arrays.
    """
    if bool((delta_norm <= 0).any()):
        raise ValueError("sample_psi: the residual is empty where the means coincide (|Delta| = 0)")
    u = _sample_psi_host(_host(log_alpha), _host(delta_norm), generator, delta_norm.device, max_iterations, tolerance,
                         max_doubling)
    return torch.from_numpy(u).to(delta_norm.device)


def _sample_psi_host(log_alpha: np.ndarray, delta_norm: np.ndarray, generator, device="cpu", max_iterations: int = 60,
                     tolerance: float = 1e-11, max_doubling: int = 64) -> np.ndarray:
    """sample_psi on float64 host arrays (|Delta| > 0 assumed); V ~ U(0, 1] from the caller's generator."""
    log_uniform = np.log(_uniform(delta_norm.shape, generator, device))
    if log_alpha.size <= SCALAR_ROWS:
        return np.array([
            _solve_psi_scalar(a, d, v, max_iterations, tolerance, max_doubling)
            for a, d, v in zip(log_alpha.ravel().tolist(), delta_norm.ravel().tolist(), log_uniform.ravel().tolist())
        ]).reshape(log_alpha.shape)
    with np.errstate(all="ignore"):
        return _solve_psi_vector(log_alpha, delta_norm, log_uniform, max_iterations, tolerance, max_doubling)


# ----------------------------------------------------------------------------- residuals


def unit_direction(delta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """e = Delta/|Delta| and |Delta| (Sec. 3.1). delta: [..., d] -> ([..., d], [...])."""
    delta_norm = delta.norm(dim=-1)
    return delta / delta_norm.clamp(min=1e-300).unsqueeze(-1), delta_norm


def reflection_residual(
    draft_noise: torch.Tensor,  # [n, d] z of the rejected draft
    delta: torch.Tensor,  # [n, d] Delta of the rejected step
    target_mean: torch.Tensor,  # [n, d] m^q
    sigma: torch.Tensor,  # [n]
) -> torch.Tensor:  # [n, d]
    """Reflection maximal coupling (Algorithm 4): Y = m^q + sigma (Id - 2 e e^T) z."""
    e, _ = unit_direction(delta)
    reflected = draft_noise - 2 * (draft_noise * e).sum(-1, keepdim=True) * e
    return target_mean + sigma.unsqueeze(-1) * reflected


def decomposition_residual(
    delta: torch.Tensor,  # [n, d] Delta of the rejected step, |Delta| > 0
    target_mean: torch.Tensor,  # [n, d] m^q
    sigma: torch.Tensor,  # [n]
    log_alpha: torch.Tensor,  # [n] alpha = 1 for sample verification, alpha_tau for block
    generator: torch.Generator | None = None,
    noise_dtype: torch.dtype | None = None,  # dtype of the fresh normal draw (default delta's)
) -> torch.Tensor:  # [n, d]
    """Decomposition residual (Algorithm 5, Eq. 7): U ~ psi_alpha; Z_perp ~ N(0, Id - e e^T);
    Y = m^q + sigma (U e + Z_perp), a draw from norm(max(0, alpha q - p))."""
    e, delta_norm = unit_direction(delta)
    along_e = sample_psi(log_alpha, delta_norm, generator=generator).to(delta.dtype)  # [n]
    fresh = torch.randn(delta.shape, generator=generator, dtype=noise_dtype or delta.dtype, device=delta.device)
    fresh = fresh.to(delta.dtype)
    orthogonal = fresh - (fresh * e).sum(-1, keepdim=True) * e
    return target_mean + sigma.unsqueeze(-1) * (along_e.unsqueeze(-1) * e + orthogonal)


# ----------------------------------------------------------------------------- verification


def _host(tensor: torch.Tensor, dtype=torch.float64) -> np.ndarray:
    return tensor.detach().to("cpu", dtype).numpy()


def _uniform(shape, generator, device) -> np.ndarray:
    """eta ~ U(0, 1], drawn from the caller's generator (on its device), as float64 numpy."""
    return _host(1.0 - torch.rand(shape, generator=generator, dtype=torch.float64, device=device))


def sample_verification(
    log_ratio: torch.Tensor,  # [b, g] log q/p at each drafted state
    num_drafted: torch.Tensor,  # [b] long, drafts beyond it are ignored
    generator: torch.Generator | None = None,
) -> torch.Tensor:  # [b] long
    """Algorithm 2: accept draft i with probability min(1, q/p); tau = the first rejection - 1.
    The [b, g] decisions are scalars per step, computed on the host in float64."""
    eta = _uniform(log_ratio.shape, generator, log_ratio.device)
    num_accepted = _sample_verification_host(_host(log_ratio), num_drafted.cpu().numpy(), eta)
    return torch.from_numpy(num_accepted).to(log_ratio.device)


def _sample_verification_host(log_ratio: np.ndarray, drafted: np.ndarray, eta: np.ndarray) -> np.ndarray:
    """Algorithm 2 on host arrays: log_ratio, eta [b, g]; drafted [b] L. Returns tau [b]."""
    accepted = (np.log(eta) <= log_ratio) | (np.arange(log_ratio.shape[1]) >= drafted[:, None])
    return np.minimum(np.cumprod(accepted, axis=1).sum(axis=1), drafted)


def block_verification(
    log_ratio: torch.Tensor,  # [b, g] log q/p at each drafted state (tempered if omega != 1)
    delta_norm: torch.Tensor,  # [b, g] |Delta_i|, i = 1..g
    num_drafted: torch.Tensor,  # [b] long
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:  # tau [b] long, log alpha_tau [b] float64
    """Algorithm 6 (Sun et al. 2025 in continuous space, Eq. 9):
    alpha_0 = 1, alpha_i = min(1, alpha_{i-1} q_i/p_i);
    rho_{i+1} = int max(0, alpha_i q_{i+1} - p_{i+1});
    h_i = rho_{i+1} / (rho_{i+1} + 1 - alpha_i) for i < L, h_L = alpha_L;
    tau = the largest i with eta_i <= h_i.
    The [b, g] quantities are scalars per step, computed on the host in float64: in numpy for many
    rows, on Python floats for up to SCALAR_ROWS rows (the one-sample-at-a-time case; the same
    formulas and the same uniforms eta, so the same tau)."""
    b, g = log_ratio.shape
    device = log_ratio.device
    log_eta = np.log(_uniform((b, g + 1), generator, device))  # [b, g+1]
    drafted = num_drafted.cpu().numpy()  # [b] L
    if b <= SCALAR_ROWS:
        num_accepted, log_alpha_tau = _block_verification_rows(_host(log_ratio), _host(delta_norm), drafted, log_eta)
    else:
        num_accepted, log_alpha_tau = _block_verification_vector(_host(log_ratio), _host(delta_norm), drafted, log_eta)
    return torch.from_numpy(num_accepted).to(device), torch.from_numpy(log_alpha_tau).to(device)


def _block_verification_vector(
    log_ratio: np.ndarray,  # [b, g]
    delta_norm: np.ndarray,  # [b, g]
    drafted: np.ndarray,  # [b] L
    log_eta: np.ndarray,  # [b, g+1]
) -> tuple[np.ndarray, np.ndarray]:  # tau [b], log alpha_tau [b]
    """block_verification for many rows at once (numpy, elementwise over [b, g+1])."""
    b, g = log_ratio.shape
    drafted = drafted[:, None]  # [b, 1]
    position = np.arange(g + 1)  # i = 0..g
    log_ratio = np.where(position[1:] <= drafted, log_ratio, 0.0)  # [b, g], 0 past L
    # log alpha_i = min(0, log alpha_{i-1} + log r_i) = S_i - max_{j <= i} S_j with S_i = sum_{j <= i} log r_j
    partial_sums = np.concatenate([np.zeros((b, 1)), np.cumsum(log_ratio, axis=1)], axis=1)
    log_alpha = partial_sums - np.maximum.accumulate(partial_sums, axis=1)  # [b, g+1]

    log_rho = log_residual_mass(log_alpha[:, :-1], delta_norm)  # [b, g] rho_{i+1}, i = 0..g-1
    with np.errstate(all="ignore"):
        log_one_minus_alpha = _np_log1mexp(log_alpha[:, :-1])
        log_h = np.where(np.isfinite(log_rho), log_rho - np.logaddexp(log_rho, log_one_minus_alpha), -np.inf)
    log_h = np.concatenate([log_h, np.zeros((b, 1))], axis=1)
    log_h = np.where(position == drafted, log_alpha, log_h)  # h_L = alpha_L
    log_h = np.where(position > drafted, -np.inf, log_h)

    passes = log_eta <= log_h  # [b, g+1]
    num_accepted = np.where(passes, position, 0).max(axis=1)
    return num_accepted, np.take_along_axis(log_alpha, num_accepted[:, None], axis=1)[:, 0]


def _block_verification_rows(
    log_ratio: np.ndarray,  # [b, g]
    delta_norm: np.ndarray,  # [b, g]
    drafted: np.ndarray,  # [b] L
    log_eta: np.ndarray,  # [b, g+1]
) -> tuple[np.ndarray, np.ndarray]:  # tau [b], log alpha_tau [b]
    """block_verification row by row on Python floats. tau is the largest i with eta_i <= h_i, so
    the scan runs down from i = L and stops at the first pass; h_0 = 1 (alpha_0 = 1), so tau >= 0."""
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
                if etas[i] <= _log_h_scalar(log_alpha[i], norms[i]):
                    tau = i
                    break
        num_accepted[row], log_alpha_tau[row] = tau, log_alpha[tau]
    return num_accepted, log_alpha_tau


def _log_h_scalar(log_alpha: float, delta_norm: float) -> float:
    """log h_i = log rho_{i+1} - log(rho_{i+1} + 1 - alpha_i), rho_{i+1} = alpha_i Phi(c) - Phi(c - |D|)."""
    if delta_norm <= 0:  # the means coincide: rho = 0
        return -math.inf
    log_rho = _log_cdf_scalar(log_alpha / delta_norm + delta_norm / 2, log_alpha, delta_norm)
    if not math.isfinite(log_rho):
        return -math.inf
    log_one_minus_alpha = _log1mexp_scalar(log_alpha)
    return log_rho - float(np.logaddexp(log_rho, log_one_minus_alpha))


def check_options(method: str, residual: str, temperature: float, caller: str = "gaussian_verify") -> None:
    """Raises a ValueError for an unknown method or residual, block + reflection, or a bad temperature."""
    if method not in ("sample", "block"):
        raise ValueError(f"{caller}: unknown method {method!r}; use 'sample' or 'block'")
    if residual not in ("reflection", "decomposition"):
        raise ValueError(f"{caller}: unknown residual {residual!r}; use 'reflection' or 'decomposition'")
    if method == "block" and residual == "reflection":
        raise ValueError(
            f"{caller}: block verification needs residual='decomposition'; no deterministic "
            "reflection-style residual is valid for blocks (Prop. 3.2)"
        )
    if not temperature > 0 or not math.isfinite(temperature):
        raise ValueError(f"{caller}: temperature must be a positive number, got {temperature}")


def _check_inputs(draft_noise, draft_means, target_means, sigma, num_drafted, method, residual, temperature) -> None:
    """Raises a ValueError naming the first bad input (sigma must be > 0 where step i < num_drafted)."""
    check_options(method, residual, temperature)
    if draft_noise.dim() != 3 or draft_noise.shape != draft_means.shape:
        raise ValueError(
            f"gaussian_verify: draft_noise {tuple(draft_noise.shape)} and draft_means "
            f"{tuple(draft_means.shape)} must both be [b, gamma, d]"
        )
    b, g, d = draft_noise.shape
    if target_means.shape != (b, g + 1, d):
        raise ValueError(
            f"gaussian_verify: target_means must be [b, gamma+1, d] = {(b, g + 1, d)}, got {tuple(target_means.shape)}"
        )
    if sigma.shape not in ((g + 1,), (b, g + 1)):
        raise ValueError(f"gaussian_verify: sigma must be [gamma+1] or [b, gamma+1], got {tuple(sigma.shape)}")
    if num_drafted.shape != (b,):
        raise ValueError(f"gaussian_verify: num_drafted must be [b] with values in 0..{g}")
    speculated = torch.arange(g, device=sigma.device) < num_drafted.unsqueeze(-1)  # [b, g]
    named = (("draft_means", draft_means), ("target_means", target_means), ("draft_noise", draft_noise))
    checks = {  # each is True when the input is good; ONE host sync for all of them on the common path
        "num_drafted": ((num_drafted >= 0) & (num_drafted <= g)).all(),
        **{name: torch.isfinite(tensor).all() for name, tensor in named},
        "sigma": torch.isfinite(sigma).all() & ~((sigma[..., :g] <= 0) & speculated).any(),
    }
    if bool(torch.stack(list(checks.values())).all()):
        return
    failed = next(name for name, good in checks.items() if not bool(good))  # only to name the culprit
    if failed == "num_drafted":
        raise ValueError(f"gaussian_verify: num_drafted must be [b] with values in 0..{g}")
    if failed == "sigma":
        raise ValueError("gaussian_verify: sigma must be finite and > 0 on every speculated step")
    raise ValueError(f"gaussian_verify: {failed} contains NaN or inf")


def gaussian_verify(
    draft_noise: torch.Tensor,  # [b, g, d] z_i, drafted y_i = draft_means[:, i-1] + sigma_i z_i
    draft_means: torch.Tensor,  # [b, g, d] m^p_i computed from y_{i-1}
    target_means: torch.Tensor,  # [b, g+1, d] m^q_i from y_{i-1}, i = 1..g+1 (one batched call)
    sigma: torch.Tensor,  # [g+1] or [b, g+1] per-step standard deviation
    method: str = "sample",
    residual: str = "reflection",
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
    num_drafted: torch.Tensor | None = None,  # [b] long, default g: drafts past it are padding
) -> GaussianVerifyResult:
    """One round of Algorithm 1 (lines 11-17) of the second paper, batched over rows.

    method="sample": Algorithm 2; method="block": Algorithm 6 (Sec. 3.2).
    residual="reflection": Algorithm 4; residual="decomposition": Algorithm 5 (Sec. 3.1).
    temperature=omega scales the log density ratio by 1/omega^2 (Appendix I); lossy unless 1.
    Returns tau (num_accepted) and the state of step tau+1: a residual draw if tau < L, else
    a target step from the last drafted state (L = num_drafted, default gamma).
    Every input is checked first (a ValueError names the bad one); then verify_round.
    """
    for name, tensor in (("draft_noise", draft_noise), ("draft_means", draft_means), ("target_means", target_means)):
        if not isinstance(tensor, torch.Tensor) or tensor.dim() != 3:
            shape = tuple(tensor.shape) if isinstance(tensor, torch.Tensor) else type(tensor).__name__
            expected = "[b, gamma+1, d]" if name == "target_means" else "[b, gamma, d]"
            raise ValueError(f"gaussian_verify: {name} must be a {expected} tensor, got {shape}")
        if not tensor.is_floating_point():
            raise ValueError(f"gaussian_verify: {name} must be a floating-point tensor, got {tensor.dtype}")
    b, g, d = draft_noise.shape
    if num_drafted is None:
        num_drafted = torch.full((b,), g, dtype=torch.long, device=draft_noise.device)
    num_drafted = torch.as_tensor(num_drafted, device=draft_noise.device)
    if num_drafted.is_floating_point() or num_drafted.is_complex() or num_drafted.dtype == torch.bool:
        raise ValueError(f"gaussian_verify: num_drafted must be an integer tensor [b], got {num_drafted.dtype}")
    num_drafted = num_drafted.long()
    sigma = torch.as_tensor(sigma, device=draft_means.device)
    if sigma.dtype == torch.bool or sigma.is_complex():
        raise ValueError(f"gaussian_verify: sigma must hold real numbers, got {sigma.dtype}")
    sigma = sigma.to(draft_means.dtype)
    _check_inputs(draft_noise, draft_means, target_means, sigma, num_drafted, method, residual, temperature)
    if temperature != 1.0:
        warnings.warn(
            f"gaussian_verify: temperature={temperature} != 1 is lossy (Appendix I); samples do not follow the target",
            LossyTemperatureWarning,
            stacklevel=2,
        )
    return verify_round(draft_noise, draft_means, target_means, sigma.expand(b, g + 1), num_drafted, method, residual,
                        temperature, generator)


def verify_round(
    draft_noise: torch.Tensor,  # [b, g, d]
    draft_means: torch.Tensor,  # [b, g, d]
    target_means: torch.Tensor,  # [b, g+1, d]
    sigma: torch.Tensor,  # [b, g+1], > 0 on every speculated step (i < num_drafted)
    num_drafted: torch.Tensor,  # [b] long, L in 0..g
    method: str,
    residual: str,
    temperature: float,
    generator: torch.Generator | None,
) -> GaussianVerifyResult:
    """gaussian_verify without its input checks or the lossy-temperature warning, for a caller that
    has validated its inputs already (SpeculativeSampler checks its schedule once and every model
    output as it comes). Same arguments, in the same shapes, sigma expanded to [b, g+1].

    Up to SCALAR_ROWS rows on the CPU (one sample at a time) the round runs on float64 numpy copies
    (_verify_round_host): a tensor op costs ~6-30 us here, a numpy op on 64 numbers ~1-3 us. It
    draws the same random numbers in the same order as the tensor path, so both return the same
    result up to rounding (tested)."""
    if draft_noise.shape[0] <= SCALAR_ROWS and draft_noise.device.type == "cpu":
        return _verify_round_host(draft_noise, draft_means, target_means, sigma, num_drafted, method, residual,
                                  temperature, generator)
    return _verify_round_tensor(draft_noise, draft_means, target_means, sigma, num_drafted, method, residual,
                                temperature, generator)


def _verify_round_tensor(draft_noise, draft_means, target_means, sigma, num_drafted, method, residual, temperature,
                         generator) -> GaussianVerifyResult:
    """verify_round in tensor ops, on the tensors' device (any number of rows).

    Computed in float64, like the host path: in float32, Delta = (m^p - m^q) / sigma and |Delta|^2
    overflow for large means or tiny sigma (the state itself is representable). Random draws are
    made in the inputs' dtype, so both paths draw the same numbers."""
    b, g, d = draft_noise.shape
    dtype = draft_means.dtype
    work = torch.float64 if draft_means.device.type != "mps" else dtype  # MPS has no float64
    draft_noise, draft_means, target_means, sigma = (
        t.to(work) for t in (draft_noise, draft_means, target_means, sigma))
    speculated = torch.arange(g, device=sigma.device) < num_drafted.unsqueeze(-1)  # [b, g]
    safe_sigma = torch.where(speculated, sigma[:, :g], 1.0)
    delta = (draft_means - target_means[:, :g]) / safe_sigma.unsqueeze(-1)  # [b, g, d]
    delta = delta * speculated.unsqueeze(-1)  # 0 past L (finite there: safe_sigma)
    log_ratio = log_density_ratio(draft_noise, delta, temperature)  # [b, g]; 0 where the means coincide

    if method == "sample":
        num_accepted = sample_verification(log_ratio, num_drafted, generator)
        log_alpha = torch.zeros(b, dtype=torch.float64, device=delta.device)
    else:
        num_accepted, log_alpha = block_verification(log_ratio, delta.norm(dim=-1), num_drafted, generator)

    rows = torch.arange(b, device=delta.device)
    rejected = num_accepted < num_drafted
    # bonus: a target step from the last accepted drafted state
    bonus_noise = torch.randn((b, d), generator=generator, dtype=dtype, device=draft_means.device).to(work)
    next_state = target_means[rows, num_accepted] + sigma[rows, num_accepted].unsqueeze(-1) * bonus_noise
    if bool(rejected.any()):
        r = rows[rejected]
        step = num_accepted[rejected]  # the rejected draft is number step+1, at index step
        if residual == "reflection":
            corrected = reflection_residual(draft_noise[r, step], delta[r, step], target_means[r, step], sigma[r, step])
        else:
            corrected = decomposition_residual(
                delta[r, step], target_means[r, step], sigma[r, step], log_alpha[rejected], generator, dtype
            )
        next_state = next_state.index_put((r,), corrected)
    return GaussianVerifyResult(num_accepted=num_accepted, next_state=_finite_state(next_state, dtype),
                                rejected=rejected, lossless=temperature == 1.0)


def _finite_state(next_state: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """next_state [b, d] in `dtype`, or a ValueError: a round never returns NaN or inf silently."""
    out = next_state.to(dtype)
    if not bool(torch.isfinite(out).all()):
        raise ValueError(
            f"gaussian_verify: the next state is not finite in {dtype}: the means, or (means difference) / "
            "sigma, are beyond what float64 can compute with, or the state overflows the output dtype; "
            "rescale the inputs (or pass float64 tensors)"
        )
    return out


def _verify_round_host(draft_noise, draft_means, target_means, sigma, num_drafted, method, residual, temperature,
                       generator) -> GaussianVerifyResult:
    """verify_round on float64 numpy copies of a few CPU rows; random draws as in _verify_round_tensor."""
    b, g, d = draft_noise.shape
    dtype = draft_means.dtype
    drafted = num_drafted.numpy()  # [b] L
    z, m_p, m_q, sd = _host(draft_noise), _host(draft_means), _host(target_means), _host(sigma)
    speculated = np.arange(g) < drafted[:, None]  # [b, g]
    safe_sigma = np.where(speculated, sd[:, :g], 1.0)[..., None]  # [b, g, 1]
    delta = np.where(speculated[..., None], (m_p - m_q[:, :g]) / safe_sigma, 0.0)  # [b, g, d] Delta_i
    delta_sq = (delta * delta).sum(-1)  # [b, g] |Delta_i|^2
    log_ratio = -((z * delta).sum(-1) + 0.5 * delta_sq) / temperature**2  # log q/p (Appendix A.2, I.1)

    if method == "sample":
        num_accepted = _sample_verification_host(log_ratio, drafted, _uniform((b, g), generator, "cpu"))
        log_alpha = np.zeros(b)
    else:
        log_eta = np.log(_uniform((b, g + 1), generator, "cpu"))
        num_accepted, log_alpha = _block_verification_rows(log_ratio, np.sqrt(delta_sq), drafted, log_eta)

    rows = np.arange(b)
    bonus_noise = _host(torch.randn((b, d), generator=generator, dtype=dtype))  # a target step from y_hat_tau
    next_state = m_q[rows, num_accepted] + sd[rows, num_accepted, None] * bonus_noise
    rejected = num_accepted < drafted
    if rejected.any():
        r = np.flatnonzero(rejected)
        step = num_accepted[r]  # the rejected draft is number step+1, at index step
        delta_norm = np.sqrt(delta_sq[r, step])[:, None]  # [n, 1] > 0 where a draft is rejected
        e = delta[r, step] / np.maximum(delta_norm, 1e-300)  # [n, d]
        if residual == "reflection":  # Algorithm 4: (Id - 2 e e^T) z
            noise = z[r, step] - 2 * (z[r, step] * e).sum(-1, keepdims=True) * e
        else:  # Algorithm 5: U e + Z_perp, U ~ psi_alpha
            along_e = _sample_psi_host(log_alpha[r], delta_norm[:, 0], generator)
            fresh = _host(torch.randn((len(r), d), generator=generator, dtype=dtype))
            noise = along_e[:, None] * e + fresh - (fresh * e).sum(-1, keepdims=True) * e
        next_state[r] = m_q[r, step] + sd[r, step, None] * noise
    return GaussianVerifyResult(num_accepted=torch.from_numpy(num_accepted),
                                next_state=_finite_state(torch.from_numpy(next_state), dtype),
                                rejected=torch.from_numpy(rejected), lossless=temperature == 1.0)
