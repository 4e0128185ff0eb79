"""One round of speculative DDPM verification between two isotropic Gaussians per step.

Everything here is the second paper ("Accelerating Speculative Diffusions via Block
Verification", Soen et al.), with p the drafter and q the target, as in that paper:

    drafter step i:  p_i(y) = N(y; m^p_i, sigma_i^2 Id),  drafted y_i = m^p_i + sigma_i z_i
    target  step i:  q_i(y) = N(y; m^q_i, sigma_i^2 Id)
    Delta_i = (m^p_i - m^q_i) / sigma_i,   delta_i = |Delta_i|,   e_i = Delta_i / delta_i   (Sec. 3.1)

All probabilities are handled as logarithms (Appendix A.2); no density is ever formed. Each
formula has one tensor implementation here; it runs on the inputs' device and never reads a value
back to the host (no device sync), so a round costs no sync. The float64 host path for a few CPU
rows (the one-sample-at-a-time case, where a tensor op costs more than the arithmetic) is
gaussian_host.py, tested draw for draw against this one.
"""
from __future__ import annotations

import math
import warnings

import torch

from specdiff.continuous.gaussian_base import LOG_2, LOG_SQRT_2PI, GaussianVerifyResult  # noqa: F401 (re-exported)

SCALAR_ROWS = 8  # up to this many CPU rows, verify_round runs on the host (gaussian_host.py)


class LossyTemperatureWarning(UserWarning):
    """Temperature omega != 1 (Appendix I) does not sample the target any more."""


# ----------------------------------------------------------------------------- Appendix A.2: log space


def log1mexp(x: torch.Tensor) -> torch.Tensor:
    """log(1 - exp(x)) for x <= 0, accurate on both sides of -log 2 (Maechler 2012)."""
    x = x.clamp(max=0.0)
    return torch.where(x > -LOG_2, torch.log(-torch.expm1(x)), torch.log1p(-torch.exp(x)))


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
    log_alpha = torch.as_tensor(log_alpha, dtype=torch.float64, device=delta_norm.device)
    w2 = temperature**2
    safe = delta_norm.clamp(min=1e-300)
    a = w2 * log_alpha / safe - safe / 2
    log_second = log_alpha + safe**2 / (2 * w2) * (1 / w2 - 1) + torch.special.log_ndtr(-(a + safe / w2))
    p = torch.special.ndtr(a) + torch.exp(log_second)
    return torch.where(delta_norm > 0, p, torch.exp(log_alpha).clamp(max=1.0))


# ----------------------------------------------------------------------------- Sec. 3.1: psi_alpha


def residual_edge(log_alpha: torch.Tensor, delta_norm: torch.Tensor) -> torch.Tensor:
    """c = log(alpha)/|D| + |D|/2, where alpha q - p changes sign along e (Appendix A.2, Lemma A.2)."""
    return log_alpha / delta_norm + delta_norm / 2


def log_residual_cdf(u: torch.Tensor, log_alpha: torch.Tensor, delta_norm: torch.Tensor) -> torch.Tensor:
    """log of int_{-inf}^u (alpha phi(v) - phi(v - |D|)) dv = log(alpha Phi(u) - Phi(u - |D|)), u <= c (Eq. 8)."""
    log_phi_u = torch.special.log_ndtr(u)
    return log_alpha + log_phi_u + log1mexp(torch.special.log_ndtr(u - delta_norm) - log_phi_u - log_alpha)


def log_residual_density(u: torch.Tensor, log_alpha: torch.Tensor, delta_norm: torch.Tensor) -> torch.Tensor:
    """log(alpha phi(u) - phi(u - |D|)) for u < c, with log phi(u - |D|) - log phi(u) = u |D| - |D|^2/2 (Eq. 8)."""
    return log_alpha - 0.5 * u * u - LOG_SQRT_2PI + log1mexp(u * delta_norm - 0.5 * delta_norm**2 - log_alpha)


def log_residual_mass(log_alpha: torch.Tensor, delta_norm: torch.Tensor) -> torch.Tensor:
    """log rho = log int max(0, alpha q - p) = log(alpha Phi(c) - Phi(c - |D|)); -inf where |D| = 0 (Eq. 9)."""
    safe = torch.where(delta_norm > 0, delta_norm, 1.0)
    log_mass = log_residual_cdf(residual_edge(log_alpha, safe), log_alpha, safe)
    return torch.where(delta_norm > 0, log_mass, -math.inf)


def solve_psi(
    log_alpha: torch.Tensor,  # [n] float64, alpha in (0, 1]
    delta_norm: torch.Tensor,  # [n] float64, |Delta| > 0
    log_uniform: torch.Tensor,  # [n] float64, log V, V ~ U(0, 1]
    max_iterations: int = 60,
    tolerance: float = 1e-11,
    max_doubling: int = 64,
) -> torch.Tensor:  # [n] u with Psi_alpha(u) = V
    """The inverse c.d.f. of psi_alpha (Algorithm 7 / Appendix A.1), on the inputs' device.

    Psi_alpha(c) = 1 gives the upper end of the bracket; the lower end is found by doubling the
    step below c until Psi_alpha(lower) < V. Then bisection on log Psi_alpha(u) = log V, each step
    taking the Newton point instead of the midpoint when it falls inside the bracket (safeguarded
    Newton: the same root, fewer steps), until |log Psi(u) - log V| < tolerance. A row stops moving
    as soon as it has converged, exactly as the host path's loop stops (gaussian_host.solve_psi_row),
    so both return the same root; the loops run their full counts, since asking whether every
    row has converged would be a device sync."""
    c = residual_edge(log_alpha, delta_norm)  # Psi_alpha(c) = 1
    log_target = log_residual_cdf(c, log_alpha, delta_norm) + log_uniform  # log V + log F(c)
    upper, step = c, torch.ones_like(c)
    lower = c - step
    searching = torch.ones_like(c, dtype=torch.bool)
    for _ in range(max_doubling):  # bracket doubling
        searching = searching & (log_residual_cdf(lower, log_alpha, delta_norm) >= log_target)
        upper = torch.where(searching, lower, upper)
        step = torch.where(searching, 2 * step, step)
        lower = torch.where(searching, c - step, lower)
    u = 0.5 * (lower + upper)
    moving = torch.ones_like(c, dtype=torch.bool)
    for _ in range(max_iterations):  # bisection, with Newton points kept when inside the bracket
        log_cdf = log_residual_cdf(u, log_alpha, delta_norm)
        gap = log_cdf - log_target  # increasing in u
        moving = moving & ~(gap.abs() < tolerance)
        lower = torch.where(moving & (gap < 0), u, lower)
        upper = torch.where(moving & ~(gap < 0), u, upper)
        newton = u - gap * torch.exp(log_cdf - log_residual_density(u, log_alpha, delta_norm))  # d/du log F
        inside = (newton > lower) & (newton < upper) & torch.isfinite(newton)
        u = torch.where(moving, torch.where(inside, newton, 0.5 * (lower + upper)), u)
    return u


def precise_dtype(device: torch.device) -> torch.dtype:
    """float64, the dtype of every per-step scalar and of the psi solve; float32 on MPS, which has no float64."""
    return torch.float32 if device.type == "mps" else torch.float64


def draw_log_uniform(shape, generator, device) -> torch.Tensor:
    """log eta, eta ~ U(0, 1], in float64, from the caller's generator on `device`."""
    device = torch.device(device)
    return torch.log(1.0 - torch.rand(shape, generator=generator, dtype=precise_dtype(device), device=device))


def sample_psi(
    log_alpha: torch.Tensor,  # [n] log alpha, alpha in (0, 1]
    delta_norm: torch.Tensor,  # [n] |Delta| > 0
    generator: torch.Generator | None = None,
    max_iterations: int = 60,
    tolerance: float = 1e-11,
    max_doubling: int = 64,
) -> torch.Tensor:  # [n] float64
    """U ~ psi_alpha, the law along e of the residual norm(max(0, alpha q - p)) (Prop. 3.1, Eq. 8):
    V ~ U(0, 1], then solve_psi in float64 on delta_norm's device. Checks |Delta| > 0 (one sync)."""
    if bool((delta_norm <= 0).any()):
        raise ValueError("sample_psi: the residual is empty where the means coincide (|Delta| = 0)")
    log_uniform = draw_log_uniform(delta_norm.shape, generator, delta_norm.device)
    precise = log_uniform.dtype
    return solve_psi(log_alpha.to(precise), delta_norm.to(precise), log_uniform, max_iterations, tolerance,
                     max_doubling)


# ----------------------------------------------------------------------------- residuals


def unit_direction(delta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """e = Delta/|Delta| and |Delta| (Sec. 3.1). delta: [..., d] -> ([..., d], [...]); e = 0 where |Delta| = 0."""
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
    delta: torch.Tensor,  # [n, d] Delta of the rejected step (rows with |Delta| = 0 give garbage, unused)
    target_mean: torch.Tensor,  # [n, d] m^q
    sigma: torch.Tensor,  # [n]
    log_alpha: torch.Tensor,  # [n] alpha = 1 for sample verification, alpha_tau for block
    generator: torch.Generator | None = None,
    noise_dtype: torch.dtype | None = None,  # dtype of the fresh normal draw (default delta's)
) -> torch.Tensor:  # [n, d]
    """Decomposition residual (Algorithm 5, Eq. 7): U ~ psi_alpha; Z_perp ~ N(0, Id - e e^T);
    Y = m^q + sigma (U e + Z_perp), a draw from norm(max(0, alpha q - p)). Draws V [n], then the
    fresh normals [n, d], on delta's device; no sync (a row with |Delta| = 0 has no residual, and
    its output is meaningless: the caller keeps only rejected rows)."""
    e, delta_norm = unit_direction(delta)
    log_uniform = draw_log_uniform(delta_norm.shape, generator, delta.device)
    safe_norm = torch.where(delta_norm > 0, delta_norm, 1.0).to(log_uniform.dtype)
    along_e = solve_psi(log_alpha.to(log_uniform.dtype), safe_norm, log_uniform).to(delta.dtype)  # [n]
    fresh = torch.randn(delta.shape, generator=generator, dtype=noise_dtype or delta.dtype, device=delta.device)
    fresh = fresh.to(delta.dtype)
    orthogonal = fresh - (fresh * e).sum(-1, keepdim=True) * e
    return target_mean + sigma.unsqueeze(-1) * (along_e.unsqueeze(-1) * e + orthogonal)


# ----------------------------------------------------------------------------- verification rules


def sample_verification(
    log_ratio: torch.Tensor,  # [b, g] log q/p at each drafted state
    num_drafted: torch.Tensor,  # [b] long L, drafts beyond it are ignored
    log_eta: torch.Tensor,  # [b, g] log eta_i, eta ~ U(0, 1]
) -> torch.Tensor:  # [b] long tau
    """Algorithm 2: accept draft i if eta_i <= q/p (log space); tau = the first rejection - 1, at most L."""
    position = torch.arange(log_ratio.shape[1], device=log_ratio.device)
    accepted = (log_eta <= log_ratio) | (position >= num_drafted.unsqueeze(-1))  # [b, g]
    return torch.minimum(accepted.long().cumprod(1).sum(1), num_drafted)


def running_log_weights(log_ratio: torch.Tensor) -> torch.Tensor:  # [b, g] -> [b, g+1]
    """log alpha_i of block verification (Algorithm 6): alpha_0 = 1, alpha_i = min(1, alpha_{i-1} q_i/p_i),
    in closed form log alpha_i = S_i - max_{j <= i} S_j with S_i = sum_{j <= i} log r_j (S_0 = 0)."""
    partial_sums = torch.cat([torch.zeros_like(log_ratio[:, :1]), log_ratio.cumsum(1)], dim=1)
    return partial_sums - partial_sums.cummax(1).values


def block_verification(
    log_ratio: torch.Tensor,  # [b, g] log q/p at each drafted state (tempered if omega != 1)
    delta_norm: torch.Tensor,  # [b, g] |Delta_i|, i = 1..g
    num_drafted: torch.Tensor,  # [b] long L
    log_eta: torch.Tensor,  # [b, g+1] log eta_i, eta ~ U(0, 1], i = 0..g
) -> tuple[torch.Tensor, torch.Tensor]:  # tau [b] long, log alpha_tau [b]
    """Algorithm 6 (Sun et al. 2025 in continuous space, Eq. 9), vectorised over [b, g+1]:
    rho_{i+1} = int max(0, alpha_i q_{i+1} - p_{i+1}) (log_residual_mass);
    h_i = rho_{i+1} / (rho_{i+1} + 1 - alpha_i) for i < L, h_L = alpha_L, and -inf past L;
    tau = the largest i with eta_i <= h_i (h_0 = 1, so tau >= 0)."""
    b, g = log_ratio.shape
    position = torch.arange(g + 1, device=log_ratio.device)  # i = 0..g
    drafted = num_drafted.unsqueeze(-1)  # [b, 1]
    log_alpha = running_log_weights(torch.where(position[1:] <= drafted, log_ratio, 0.0))  # [b, g+1]
    log_rho = log_residual_mass(log_alpha[:, :-1], delta_norm)  # [b, g] rho_{i+1}, i = 0..g-1
    log_h = torch.where(torch.isfinite(log_rho),
                        log_rho - torch.logaddexp(log_rho, log1mexp(log_alpha[:, :-1])), -math.inf)
    log_h = torch.cat([log_h, torch.zeros_like(log_h[:, :1])], dim=1)  # [b, g+1]
    log_h = torch.where(position == drafted, log_alpha, log_h)  # h_L = alpha_L
    log_h = torch.where(position > drafted, -math.inf, log_h)
    num_accepted = torch.where(log_eta <= log_h, position, 0).amax(1)
    return num_accepted, log_alpha.gather(1, num_accepted.unsqueeze(-1)).squeeze(-1)


# ----------------------------------------------------------------------------- one round (Algorithm 1)


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
    """gaussian_verify without its input checks, the lossy-temperature warning or the check that the
    next state is finite, for a caller that validates (SpeculativeSampler checks its schedule once and
    folds the finiteness checks into its one host read per round). Same arguments, sigma as [b, g+1].

    Up to SCALAR_ROWS rows on the CPU (one sample at a time) the round runs on float64 host copies
    (gaussian_host.verify_round_on_host: a tensor op costs ~6-30 us here, a numpy op on 64 numbers
    ~1-3 us); it draws the same random numbers in the same order as verify_round_on_device, so both
    return the same result up to rounding (tested). Everywhere else: verify_round_on_device."""
    if draft_noise.shape[0] <= SCALAR_ROWS and draft_noise.device.type == "cpu":
        from specdiff.continuous.gaussian_host import verify_round_on_host

        return verify_round_on_host(draft_noise, draft_means, target_means, sigma, num_drafted, method, residual,
                                    temperature, generator)
    return verify_round_on_device(draft_noise, draft_means, target_means, sigma, num_drafted, method, residual,
                                  temperature, generator)


def verify_round_on_device(draft_noise, draft_means, target_means, sigma, num_drafted, method, residual, temperature,
                           generator) -> GaussianVerifyResult:
    """verify_round in tensor ops on the inputs' device, any number of rows, no host sync.

    Random draws, in this order: log eta ([b, g] sample, [b, g+1] block; float64), the bonus normals
    [b, d], then for the decomposition residual V [b] (float64) and fresh normals [b, d]: a residual
    is drawn for every row and kept where the round rejected (knowing which rows did would be a sync).
    Computed in float64 (not on MPS, which has none): in float32, Delta = (m^p - m^q) / sigma and
    |Delta|^2 overflow for large means or tiny sigma. Normals are drawn in the inputs' dtype."""
    b, g, d = draft_noise.shape
    dtype, device = draft_means.dtype, draft_means.device
    work = precise_dtype(device)
    draft_noise, draft_means, target_means, sigma = (t.to(work) for t in (draft_noise, draft_means, target_means, sigma))
    speculated = torch.arange(g, device=device) < num_drafted.unsqueeze(-1)  # [b, g]
    safe_sigma = torch.where(speculated, sigma[:, :g], 1.0)
    delta = (draft_means - target_means[:, :g]) / safe_sigma.unsqueeze(-1) * speculated.unsqueeze(-1)  # [b, g, d]
    log_ratio = log_density_ratio(draft_noise, delta, temperature)  # [b, g]; 0 where the means coincide

    if method == "sample":
        num_accepted = sample_verification(log_ratio, num_drafted, draw_log_uniform((b, g), generator, device))
        log_alpha = torch.zeros(b, dtype=work, device=device)
    else:
        log_eta = draw_log_uniform((b, g + 1), generator, device)
        num_accepted, log_alpha = block_verification(log_ratio, delta.norm(dim=-1), num_drafted, log_eta)

    rows = torch.arange(b, device=device)
    bonus_noise = torch.randn((b, d), generator=generator, dtype=dtype, device=device).to(work)
    next_state = target_means[rows, num_accepted] + sigma[rows, num_accepted].unsqueeze(-1) * bonus_noise
    rejected = num_accepted < num_drafted
    if g > 0:  # the rejected draft is number tau+1, at index tau (clamped for the rows that accepted all)
        step = num_accepted.clamp(max=g - 1)
        picked = delta[rows, step], target_means[rows, step], sigma[rows, step]
        if residual == "reflection":
            corrected = reflection_residual(draft_noise[rows, step], *picked)
        else:
            corrected = decomposition_residual(*picked, log_alpha, generator, dtype)
        next_state = torch.where(rejected.unsqueeze(-1), corrected, next_state)
    return GaussianVerifyResult(num_accepted=num_accepted, next_state=next_state.to(dtype), rejected=rejected,
                                lossless=temperature == 1.0)


# ----------------------------------------------------------------------------- the public round


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
    devices = {t.device for t in (draft_noise, draft_means, target_means)}
    if len(devices) > 1:
        raise ValueError(f"gaussian_verify: draft_noise, draft_means and target_means are on different devices "
                         f"({', '.join(sorted(str(x) for x in devices))}); put them on one device")
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


NOT_FINITE = ("the next state is not finite in {dtype}: the means, or (means difference) / sigma, are beyond "
              "what float64 can compute with, or the state overflows the output dtype; rescale the inputs (or "
              "pass float64 tensors)")


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
    Every input is checked first (a ValueError names the bad one; one host sync), then verify_round,
    then the next state is checked finite (a second sync).
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
    result = verify_round(draft_noise, draft_means, target_means, sigma.expand(b, g + 1), num_drafted, method,
                          residual, temperature, generator)
    if not bool(torch.isfinite(result.next_state).all()):
        raise ValueError("gaussian_verify: " + NOT_FINITE.format(dtype=result.next_state.dtype))
    return result
