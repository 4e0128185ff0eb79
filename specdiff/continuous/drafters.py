"""Drafters: propose gamma Gaussian steps y_i = m^p_i(y_{i-1}) + sigma_i z_i from the current state.

- FrozenDrafter (Eq. 10, Hu et al. 2025 / De Bortoli et al. 2025): the target's score at the
  current state y_k, frozen for the whole round; costs one target call per round.
- FreeDrafter (Sec. 3.3, De Bortoli et al. 2025 App. B): the same drafter, but the frozen score
  is the one the last verification call already computed at the parent of the current state
  (y_hat_{k+tau}); no extra call except at the very first round.
- ModelDrafter: a separate (small) denoiser, called sequentially gamma times.

Any drafter is exact under verification as long as each z_i is fresh N(0, Id) and m^p_i depends only
on the past, which holds for all three.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from specdiff.continuous.schedules import Schedule, transition_mean


@dataclass
class FrozenDraftCoefficients:
    """The scalars of Eq. 10's recursion for a round starting at each step k (steps past K - 1 clamped):
    A_i, B_i, sigma_i of steps k..k+g-1, P_i = A_1..A_i and the transfer matrix P_i / P_j (j <= i).
    They depend on the schedule only, so a sampler computes them once per sampling call."""

    state_coef: torch.Tensor  # [K, g] A_i
    score_coef: torch.Tensor  # [K, g] B_i
    noise_scale: torch.Tensor  # [K, g] sigma_i
    products: torch.Tensor  # [K, g] P_i
    transfer: torch.Tensor  # [K, g, g] P_i / P_j below the diagonal, 0 above


def frozen_draft_coefficients(schedule: Schedule, draft_length: int, dtype: torch.dtype) -> FrozenDraftCoefficients:
    """Tables of FrozenDraftCoefficients for every start step k = 0..K-1, computed in the schedule's
    precision (float64) and stored in dtype."""
    K = schedule.num_steps
    step = (torch.arange(K).unsqueeze(-1) + torch.arange(draft_length)).clamp(max=K - 1)  # [K, g]
    state_coef = schedule.state_coef[step].double()
    log_products = torch.log(state_coef).cumsum(-1)  # [K, g] log P_i (A_i > 0)
    transfer = torch.exp(log_products.unsqueeze(-1) - log_products.unsqueeze(-2)).tril()  # [K, g, g]
    return FrozenDraftCoefficients(
        state_coef.to(dtype), schedule.score_coef[step].to(dtype), schedule.step_std[step].to(dtype),
        torch.exp(log_products).to(dtype), transfer.to(dtype),
    )


def draft_with_frozen_score(
    schedule: Schedule,
    states: torch.Tensor,  # [b, d] y_k
    steps: torch.Tensor,  # [b] long, k
    frozen_score: torch.Tensor,  # [b, d] s^q at the frozen point
    draft_noise: torch.Tensor,  # [b, g, d] z_1..z_g (zero past num_drafted)
    coefficients: FrozenDraftCoefficients | None = None,  # frozen_draft_coefficients(schedule, g, dtype)
) -> tuple[torch.Tensor, torch.Tensor]:  # draft_means [b, g, d], draft_states [b, g, d]
    """Eq. 10: m^p_{k+i}(y) is the target's step from y with the score frozen at s^q(y_k):
    m^p_{k+i}(y) = A_{k+i} y + B_{k+i} s^q(y_k), A and B from schedules.Schedule.

    The recursion y_i = A_i y_{i-1} + B_i s + sigma_i z_i is linear with scalar coefficients, so all
    g states come at once: y_i = P_i y_0 + sum_{j <= i} (P_i / P_j) (B_j s + sigma_j z_j), P_i = A_1..A_i.
    The means are then taken from the states, m_i = A_i y_{i-1} + B_i s, and the states rebuilt as
    m_i + sigma_i z_i, so that (m, z, y) agree to the last bit as the verifier assumes."""
    if coefficients is None:
        coefficients = frozen_draft_coefficients(schedule, draft_noise.shape[1], states.dtype)
    state_coef = coefficients.state_coef[steps].unsqueeze(-1)  # [b, g, 1] A_i
    score_coef = coefficients.score_coef[steps].unsqueeze(-1)  # [b, g, 1] B_i
    noise_scale = coefficients.noise_scale[steps].unsqueeze(-1)  # [b, g, 1] sigma_i
    products = coefficients.products[steps].unsqueeze(-1)  # [b, g, 1] P_i
    frozen_kick = score_coef * frozen_score.unsqueeze(1)  # [b, g, d] B_i s
    kicks = frozen_kick + noise_scale * draft_noise  # [b, g, d]
    approx_states = products * states.unsqueeze(1) + coefficients.transfer[steps] @ kicks  # [b, g, d]
    previous = torch.cat([states.unsqueeze(1), approx_states[:, :-1]], dim=1)  # [b, g, d] y_{i-1}
    draft_means = state_coef * previous + frozen_kick
    return draft_means, draft_means + noise_scale * draft_noise


def draft_with_model(
    schedule: Schedule,
    denoiser,  # callable(states [n, d], steps [n], schedule) -> x0_hat [n, d]
    states: torch.Tensor,  # [b, d]
    steps: torch.Tensor,  # [b] long
    draft_noise: torch.Tensor,  # [b, g, d]
) -> tuple[torch.Tensor, torch.Tensor]:  # draft_means [b, g, d], draft_states [b, g, d]
    """gamma sequential steps of a separate drafter model on the target's schedule."""
    last_step = schedule.num_steps - 1
    draft_means, draft_states = [], []
    current = states
    for i in range(draft_noise.shape[1]):
        step = (steps + i).clamp(max=last_step)
        mean = transition_mean(schedule, current, step, denoiser(current, step, schedule))
        current = mean + schedule.step_std[step].to(mean.dtype).unsqueeze(-1) * draft_noise[:, i]
        draft_means.append(mean)
        draft_states.append(current)
    return torch.stack(draft_means, 1), torch.stack(draft_states, 1)


class _FrozenScoreDrafter:
    """Drafts with Eq. 10; keeps the coefficient tables of the last schedule it drafted on (a sampling
    call drafts every round on one schedule)."""

    def __init__(self):
        self._schedule, self._coefficients = None, None

    def draft(self, schedule, states, steps, frozen_score, draft_noise):
        key = (draft_noise.shape[1], states.dtype)
        if self._schedule is not schedule or self._coefficients[0] != key:
            self._schedule = schedule
            self._coefficients = key, frozen_draft_coefficients(schedule, *key)
        return draft_with_frozen_score(schedule, states, steps, frozen_score, draft_noise, self._coefficients[1])


class FrozenDrafter(_FrozenScoreDrafter):
    """Eq. 10. needs_root_call: the sampler evaluates the target at y_k before drafting."""

    name = "frozen"
    needs_root_call = True
    reuses_verification = False


class FreeDrafter(_FrozenScoreDrafter):
    """Sec. 3.3: the frozen score is the previous verification's output at the parent state."""

    name = "free"
    needs_root_call = False  # except on the first round, when no verification output exists
    reuses_verification = True


class ModelDrafter:
    """A separate denoiser (e.g. a smaller network, or a perturbed analytic model)."""

    name = "model"
    needs_root_call = False
    reuses_verification = False

    def __init__(self, denoiser):
        self.denoiser = denoiser

    def draft(self, schedule, states, steps, unused_score, draft_noise):
        return draft_with_model(schedule, self.denoiser, states, steps, draft_noise)


def make_drafter(drafter) -> object:
    """'free' | 'frozen' | a drafter object | a denoiser callable (wrapped in ModelDrafter)."""
    if drafter == "free":
        return FreeDrafter()
    if drafter == "frozen":
        return FrozenDrafter()
    if isinstance(drafter, str):
        raise ValueError(f"unknown drafter {drafter!r}; use 'free', 'frozen' or a denoiser")
    if hasattr(drafter, "draft"):
        return drafter
    if callable(drafter):
        return ModelDrafter(drafter)
    raise ValueError(f"unknown drafter {drafter!r}")
