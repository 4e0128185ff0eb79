"""Noise schedules and the reverse step with churn, as Gaussian transitions N(m_k(y), sigma_k^2 Id).

A schedule is a grid of K+1 noise levels, step k going from level k to level k+1 (towards data),
with the interpolant x_t = a_t x_0 + s_t z:

    rectified flow (the paper's Sec. 5, Liu et al. 2022):  a_t = 1 - t, s_t = t,  t from 1 - 1e-4 to 0
    variance preserving (diffusers DDPMScheduler):         a_t = sqrt(abar_t), s_t = sqrt(1 - abar_t)

The reverse step is the sampler of Ho et al. (2020) with churn epsilon (DDIM with eta = epsilon):

    x0_hat = denoiser(y, k),  eps_hat = (y - a_t x0_hat) / s_t
    posterior variance  beta_k = s_s^2 / s_t^2 * (s_t^2 - (a_t/a_s)^2 s_s^2)     (s = the next level)
    sigma_k = epsilon sqrt(beta_k),  m_k(y) = a_s x0_hat + sqrt(s_s^2 - sigma_k^2) eps_hat

epsilon = 1 is DDPM's posterior step exactly; as K grows it is Euler-Maruyama of the reverse SDE
with churn epsilon (Sec. 2: drift -f y + (1+eps^2)/2 g^2 s, diffusion eps g), whose marginals do not
depend on epsilon. The last step (to s_s = 0) has sigma = 0 and is never speculated.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import torch


@dataclass
class Schedule:
    signal: torch.Tensor  # [K+1] a at each level, level 0 is noise
    noise: torch.Tensor  # [K+1] s at each level
    model_time: torch.Tensor  # [K+1] the time the denoiser is conditioned on at each level
    churn: float  # epsilon

    def __post_init__(self):
        if not 0.0 <= self.churn <= 1.0:
            raise ValueError(f"Schedule: churn must be in [0, 1], got {self.churn}")
        a_t, s_t = self.signal[:-1], self.noise[:-1]
        a_s, s_s = self.signal[1:], self.noise[1:]
        posterior_var = (s_s**2 / s_t**2) * (s_t**2 - (a_t / a_s) ** 2 * s_s**2)
        self.step_std = self.churn * posterior_var.clamp(min=0).sqrt()  # [K] sigma_k
        self.noise_coef = (s_s**2 - self.step_std**2).clamp(min=0).sqrt()  # [K]
        # with eps_hat = -s_t score:  m_k(y) = (a_s / a_t) y + (a_s s_t^2 / a_t - noise_coef s_t) score
        self.state_coef = a_s / a_t  # [K]
        self.score_coef = a_s * s_t**2 / a_t - self.noise_coef * s_t  # [K]
        # with x0_hat:  m_k(y) = mean_state_coef y + mean_denoised_coef x0_hat  (transition_mean)
        self.mean_state_coef = self.noise_coef / s_t  # [K]
        self.mean_denoised_coef = a_s - self.noise_coef * a_t / s_t  # [K]

    @property
    def num_steps(self) -> int:
        return self.signal.shape[0] - 1

    COEFFICIENTS = ("signal", "noise", "step_std", "noise_coef", "state_coef", "score_coef", "mean_state_coef",
                    "mean_denoised_coef")

    def to(self, dtype: torch.dtype, device: torch.device | str | None = None) -> "Schedule":
        """A copy whose levels and coefficients, computed in the schedule's own (float64) precision, are
        stored in `dtype` (and moved to `device`, model_time too, in its own dtype), so that a sampling
        loop gathers them on the state's device without casts. model_time is left in its dtype for the
        denoiser. (Recomputing them in float32 would lose the small posterior variances at large K.)"""
        cast = copy.copy(self)
        for name in self.COEFFICIENTS:  # host to device: non_blocking (safe from pageable memory, and no sync)
            setattr(cast, name, getattr(self, name).to(device=device, dtype=dtype, non_blocking=True))
        if device is not None:
            cast.model_time = self.model_time.to(device, non_blocking=True)
        return cast


def rectified_flow_schedule(num_steps: int, churn: float, t_max: float = 1.0 - 1e-4, dtype=torch.float64) -> Schedule:
    """Uniform grid t_k = t_max (1 - k/K) on the rectified-flow interpolant a_t = 1-t, s_t = t (Sec. 5)."""
    if num_steps < 1:
        raise ValueError(f"rectified_flow_schedule: num_steps must be >= 1, got {num_steps}")
    t = t_max * (1.0 - torch.arange(num_steps + 1, dtype=dtype) / num_steps)
    return Schedule(signal=1.0 - t, noise=t, model_time=t, churn=churn)


def variance_preserving_schedule(alphas_cumprod: torch.Tensor, timesteps: torch.Tensor, churn: float) -> Schedule:
    """The levels of a diffusers scheduler: timesteps [K] descending, then abar = 1 at the end."""
    abar = alphas_cumprod.to(torch.float64)[timesteps.long()]
    abar = torch.cat([abar, torch.ones(1, dtype=torch.float64)])
    model_time = torch.cat([timesteps.to(torch.float64), torch.full((1,), -1.0, dtype=torch.float64)])
    return Schedule(signal=abar.sqrt(), noise=(1 - abar).sqrt(), model_time=model_time, churn=churn)


def gather_coefficient(coefficient: torch.Tensor, steps: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """coefficient[steps] as a column [n, 1] in dtype (no cast when a sampler's schedule is already in it)."""
    values = coefficient[steps]
    return (values if values.dtype == dtype else values.to(dtype)).unsqueeze(-1)


def transition_mean(
    schedule: Schedule,
    states: torch.Tensor,  # [n, d] y at level k
    steps: torch.Tensor,  # [n] long, k
    denoised: torch.Tensor,  # [n, d] x0_hat(y, k)
) -> torch.Tensor:  # [n, d] m_k(y)
    """m_k(y) = a_{k+1} x0_hat + sqrt(s_{k+1}^2 - sigma_k^2) (y - a_k x0_hat) / s_k,
    gathered as two per-step coefficients: (noise_coef / s_k) y + (a_{k+1} - noise_coef a_k / s_k) x0_hat."""
    state_coef = gather_coefficient(schedule.mean_state_coef, steps, states.dtype)
    denoised_coef = gather_coefficient(schedule.mean_denoised_coef, steps, states.dtype)
    return state_coef * states + denoised_coef * denoised


def score_from_denoised(schedule: Schedule, states, steps, denoised):
    """Tweedie: grad log p_t(y) = (a_t x0_hat - y) / s_t^2.  states, denoised: [n, d]; steps: [n]."""
    a_t = gather_coefficient(schedule.signal, steps, states.dtype)
    s_t = gather_coefficient(schedule.noise, steps, states.dtype)
    return (a_t * denoised - states) / s_t**2


def denoised_from_score(schedule: Schedule, states, steps, score):
    """The inverse of score_from_denoised: x0_hat = (y + s_t^2 score) / a_t."""
    a_t = gather_coefficient(schedule.signal, steps, states.dtype)
    s_t = gather_coefficient(schedule.noise, steps, states.dtype)
    return (states + s_t**2 * score) / a_t
