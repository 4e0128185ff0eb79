"""Drafters: propose gamma Gaussian steps y_i = m^p_i(y_{i-1}) + sigma_i z_i from the current state.

- FrozenDrafter (Eq. 10, Hu et al. 2025 / De Bortoli et al. 2025): the target's score at the
  current state y_k, frozen for the whole round; costs one target call per round.
- FreeDrafter (Sec. 3.3, De Bortoli et al. 2025 App. B): the same drafter, but the frozen score
  is the one the last verification call already computed at the parent of the current state
  (y_hat_{k+tau}); no extra call except at the very first round.
- ModelDrafter: a separate (small) denoiser, called sequentially gamma times.

Each is a ContinuousDrafter (the contract, below): it says what it needs from the target (a root
call at the current state, the verification call's output) and drafts; the sampler never asks which
kind it is. A user's drafter implements the same four methods. Any drafter is exact under
verification as long as each z_i is fresh N(0, Id) and m^p_i depends only on the past.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch

from specdiff.continuous.gaussian import precise_dtype
from specdiff.continuous.schedules import Schedule, gather_coefficient, score_from_denoised, transition_mean


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
    """Tables of FrozenDraftCoefficients for every start step k = 0..K-1, on the schedule's device,
    computed in float64 (float32 on MPS) and stored in dtype."""
    K, device = schedule.num_steps, schedule.step_std.device
    step = (torch.arange(K, device=device).unsqueeze(-1) + torch.arange(draft_length, device=device)).clamp(max=K - 1)
    state_coef = schedule.state_coef[step].to(precise_dtype(device))
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
    """gamma sequential steps of a separate drafter model on the target's schedule (on the states' device)."""
    last_step = schedule.num_steps - 1
    draft_means, draft_states = [], []
    current = states
    for i in range(draft_noise.shape[1]):
        step = (steps + i).clamp(max=last_step)
        mean = transition_mean(schedule, current, step, denoiser(current, step, schedule))
        current = mean + gather_coefficient(schedule.step_std, step, mean.dtype) * draft_noise[:, i]
        draft_means.append(mean)
        draft_states.append(current)
    return torch.stack(draft_means, 1), torch.stack(draft_states, 1)


# ----------------------------------------------------------------------------- the contract


@dataclass
class Draft:
    """What a drafter returns for one round."""

    means: torch.Tensor  # [b, g, d] m^p_i, computed from y_{i-1} (y_0 the current state)
    states: torch.Tensor  # [b, g, d] y_i = m^p_i + sigma_i z_i, with the sampler's z_i
    model_calls: int = 0  # sequential drafter-model calls this round (for SampleStats.drafter_calls)


class ContinuousDrafter:
    """The contract between SpeculativeSampler and a drafter: subclass it (the defaults ask nothing
    of the target) or implement the same four methods. Per sampling call the sampler calls
    start(initial) once; per round, on the rows still sampling:

    1. root_rows(drafting [n] bool) -> [n] bool: the rows that need the target's x0_hat at their
       current state before drafting; the sampler makes that call (one batched target call) and
       passes the result to draft. Computed on all n rows, on the device, without reading it back.
    2. draft(schedule, states [b, d], steps [b], draft_noise [b, g, d], root_denoised [b, d] or None,
       rows [b] long or None) -> Draft. rows index the n rows of the sampling call (None: all of
       them, in order); root_denoised holds x0_hat where root_rows asked, zeros elsewhere (None when
       no row asked). The means must follow the schedule's steps k..k+g-1 (clamped at K-1) and
       states = means + sigma_i z_i, on the states' device and dtype.
    3. observe(schedule, rows, states [b, g+1, d], steps [b, g+1], denoised [b, g+1, d],
       num_accepted [b]): the verification call's inputs and outputs (denoised is zero where a state
       was not evaluated); each row's new state is the child of states[:, tau].

    Nothing here may read a device tensor back to the host (the sampler's one host read per round).
    """

    name = "custom"

    def start(self, initial: torch.Tensor) -> None:  # [n, d] y_0
        """A sampling call starts on these rows: reset any per-row memory."""

    def root_rows(self, drafting: torch.Tensor) -> torch.Tensor:  # [n] bool -> [n] bool
        return torch.zeros_like(drafting)

    def draft(self, schedule: Schedule, states, steps, draft_noise, root_denoised, rows) -> Draft:
        raise NotImplementedError

    def observe(self, schedule: Schedule, rows, states, steps, denoised, num_accepted) -> None:
        """The verification call's output; the default keeps nothing."""


CONTRACT = {  # method -> the arguments the sampler passes
    "draft": ("schedule", "states", "steps", "draft_noise", "root_denoised", "rows"),
    "start": ("initial",),
    "root_rows": ("drafting",),
    "observe": ("schedule", "rows", "states", "steps", "denoised", "num_accepted"),
}


def check_drafter(drafter) -> None:
    """A ValueError naming what a drafter lacks of ContinuousDrafter's contract."""
    kind = type(drafter).__name__
    for method, arguments in CONTRACT.items():
        function = getattr(drafter, method, None)
        if not callable(function):
            raise ValueError(f"drafter {kind} does not follow the ContinuousDrafter contract: it has no method "
                             f"{method}({', '.join(arguments)}) (subclass specdiff.continuous.drafters.ContinuousDrafter)")
        try:
            inspect.signature(function).bind(*arguments)
        except TypeError:
            raise ValueError(f"drafter {kind} does not follow the ContinuousDrafter contract: {method} must accept "
                             f"({', '.join(arguments)}), got {method}{inspect.signature(function)}") from None
        except ValueError:  # a builtin without a signature: trust it
            pass
    if isinstance(drafter, ContinuousDrafter) and type(drafter).draft is ContinuousDrafter.draft:
        raise ValueError(f"drafter {kind} does not follow the ContinuousDrafter contract: it does not implement draft")


def take_rows(tensor: torch.Tensor, rows: torch.Tensor | None) -> torch.Tensor:
    """tensor[rows], the rows of a round among a sampling call's n rows (rows None: all of them)."""
    return tensor if rows is None else tensor[rows]


# ----------------------------------------------------------------------------- the three drafters


class _FrozenScoreDrafter(ContinuousDrafter):
    """Drafts with Eq. 10 from a frozen score; keeps the coefficient tables of the last schedule it drafted
    on (a sampling call drafts every round on one schedule)."""

    def __init__(self):
        self._schedule, self._coefficients = None, None

    def draft_from_score(self, schedule, states, steps, frozen_score, draft_noise) -> Draft:
        key = (draft_noise.shape[1], states.dtype)
        if self._schedule is not schedule or self._coefficients[0] != key:
            self._schedule = schedule
            self._coefficients = key, frozen_draft_coefficients(schedule, *key)
        means, drafted = draft_with_frozen_score(schedule, states, steps, frozen_score, draft_noise,
                                                 self._coefficients[1])
        return Draft(means, drafted)


class FrozenDrafter(_FrozenScoreDrafter):
    """Eq. 10 with the score frozen at the current state y_k: a root target call on every drafting row."""

    name = "frozen"

    def root_rows(self, drafting):
        return drafting

    def draft(self, schedule, states, steps, draft_noise, root_denoised, rows):
        score = torch.zeros_like(states) if root_denoised is None else score_from_denoised(
            schedule, states, steps, root_denoised)  # (no root call when no row drafts: the score is unused)
        return self.draft_from_score(schedule, states, steps, score, draft_noise)


class FreeDrafter(_FrozenScoreDrafter):
    """Sec. 3.3: the frozen score is the previous verification call's output at the parent y_hat_tau of
    the current state; a root call only where none exists yet (the first round)."""

    name = "free"

    def start(self, initial):
        self._score = torch.zeros_like(initial)  # [n, d] the target's score at each row's parent
        self._missing = torch.ones(initial.shape[0], dtype=torch.bool, device=initial.device)  # [n] no score yet
        self._none_missing = False  # known on the host once a round has covered every row

    def root_rows(self, drafting):
        return drafting & self._missing

    def draft(self, schedule, states, steps, draft_noise, root_denoised, rows):
        score = take_rows(self._score, rows)
        if root_denoised is not None:
            root_score = score_from_denoised(schedule, states, steps, root_denoised)
            score = torch.where(take_rows(self._missing, rows).unsqueeze(-1), root_score, score)
        return self.draft_from_score(schedule, states, steps, score, draft_noise)

    def observe(self, schedule, rows, states, steps, denoised, num_accepted):
        index = torch.arange(states.shape[0], device=states.device)
        parent = score_from_denoised(schedule, states[index, num_accepted], steps[index, num_accepted],
                                     denoised[index, num_accepted])
        if rows is None:
            self._score = parent
            if not self._none_missing:
                self._missing.fill_(False)
                self._none_missing = True
        else:
            self._score[rows] = parent
            self._missing[rows] = False


class ModelDrafter(ContinuousDrafter):
    """A separate denoiser (e.g. a smaller network, or a perturbed analytic model), called gamma times."""

    name = "model"

    def __init__(self, denoiser):
        self.denoiser = denoiser

    def draft(self, schedule, states, steps, draft_noise, root_denoised, rows):
        means, drafted = draft_with_model(schedule, self.denoiser, states, steps, draft_noise)
        return Draft(means, drafted, model_calls=draft_noise.shape[1])


def make_drafter(drafter) -> ContinuousDrafter:
    """'free' | 'frozen' | an object following the ContinuousDrafter contract | a denoiser callable
    (wrapped in ModelDrafter). A ValueError for anything else, naming what is missing."""
    if isinstance(drafter, str):
        if drafter == "free":
            return FreeDrafter()
        if drafter == "frozen":
            return FrozenDrafter()
        raise ValueError(f"unknown drafter {drafter!r}; use 'free', 'frozen', a ContinuousDrafter or a denoiser")
    if isinstance(drafter, ContinuousDrafter) or hasattr(drafter, "draft"):
        check_drafter(drafter)
        return drafter
    if callable(drafter):
        return ModelDrafter(drafter)
    raise ValueError(f"unknown drafter {drafter!r}; use 'free', 'frozen', a ContinuousDrafter or a denoiser")
