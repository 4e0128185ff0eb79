"""Plain DDPM and speculative DDPM (Algorithm 1 of the second paper), batched over rows.

Rows advance independently: each round, every unfinished row drafts up to gamma steps, and ONE
batched target call evaluates all rows' drafted states y_hat_0..y_hat_L together. Steps with
sigma = 0 (the last step, or churn 0) are never speculated: such a round is a plain target step.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from specdiff.continuous.drafters import make_drafter
from specdiff.continuous.gaussian import gaussian_verify
from specdiff.continuous.models import Target
from specdiff.continuous.schedules import score_from_denoised, transition_mean


@dataclass
class SampleStats:
    num_steps: int  # K
    rounds: torch.Tensor  # [n] long, rounds (sequential verification calls) per row
    target_calls: torch.Tensor  # [n] long, sequential target calls per row (root calls included)
    drafter_calls: torch.Tensor  # [n] long, sequential drafter-model calls per row
    wall_seconds: float
    target_evaluations: int = 0  # states passed through the target, all rows together
    extra: dict = field(default_factory=dict)

    @property
    def block_efficiency(self) -> float:
        """Denoising steps per round, averaged over rows: K / rounds, in [1, gamma + 1] (Sec. 5)."""
        return float((self.num_steps / self.rounds.double()).mean())

    def summary(self) -> dict:
        return {
            "num_steps": self.num_steps,
            "rounds": float(self.rounds.double().mean()),
            "block_efficiency": self.block_efficiency,
            "target_calls": float(self.target_calls.double().mean()),
            "drafter_calls": float(self.drafter_calls.double().mean()),
            "target_evaluations": self.target_evaluations,
            "wall_seconds": self.wall_seconds,
            **self.extra,
        }


def initial_noise(num_samples: int, dim: int, generator=None, dtype=torch.float32) -> torch.Tensor:
    """y_0 ~ N(0, Id), the start of every sampler here."""
    return torch.randn(num_samples, dim, generator=generator, dtype=dtype)


def ddpm_sample(
    target: Target,
    initial: torch.Tensor,  # [n, d] y_0
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, SampleStats]:  # samples [n, d]
    """The reference: y_{k+1} = m_k(y_k) + sigma_k z_k for k = 0..K-1, one target call per step."""
    schedule = target.schedule.to(initial.dtype)  # coefficients gathered without casts
    start = time.perf_counter()
    state = initial
    for k in range(schedule.num_steps):
        steps = torch.full((state.shape[0],), k, dtype=torch.long)
        mean = transition_mean(schedule, state, steps, target.denoise(state, steps))
        noise = torch.randn(state.shape, generator=generator, dtype=state.dtype)
        state = mean + schedule.step_std[k].to(state.dtype) * noise
    n, K = state.shape[0], schedule.num_steps
    calls = torch.full((n,), K, dtype=torch.long)
    stats = SampleStats(K, calls.clone(), calls, torch.zeros(n, dtype=torch.long), time.perf_counter() - start, n * K)
    return state, stats


def speculation_lengths(step_std: torch.Tensor, draft_length: int) -> torch.Tensor:  # [K] -> [K+1] long
    """L(k) = the number of consecutive steps from k with sigma > 0, capped at gamma."""
    K = step_std.shape[0]
    run = torch.zeros(K + 1, dtype=torch.long)
    for k in range(K - 1, -1, -1):
        run[k] = run[k + 1] + 1 if step_std[k] > 0 else 0
    return run.clamp(max=draft_length)


class SpeculativeSampler:
    """Speculative DDPM: R = sample+reflection, D = sample+decomposition, B = block+decomposition (Table 1).

    target: Target (schedule + denoiser); drafter: 'free', 'frozen', or a denoiser for a separate model.
    """

    def __init__(
        self,
        target: Target,
        drafter="free",
        draft_length: int = 7,
        method: str = "sample",
        residual: str = "reflection",
        temperature: float = 1.0,
    ):
        if draft_length < 1:
            raise ValueError(f"SpeculativeSampler: draft_length must be >= 1, got {draft_length}")
        if method == "block" and residual != "decomposition":
            raise ValueError("SpeculativeSampler: block verification needs residual='decomposition'")
        self.target = target
        self.drafter = make_drafter(drafter)
        self.draft_length = draft_length
        self.method = method
        self.residual = residual
        self.temperature = temperature
        self.lengths = speculation_lengths(target.schedule.step_std, draft_length)

    def sample(
        self,
        initial: torch.Tensor,  # [n, d] y_0
        generator: torch.Generator | None = None,
    ) -> tuple[torch.Tensor, SampleStats]:  # samples [n, d]
        target, gamma, drafter = self.target, self.draft_length, self.drafter
        schedule = target.schedule.to(initial.dtype)  # coefficients gathered without casts
        K = schedule.num_steps
        n, d = initial.shape
        start = time.perf_counter()
        state = initial.clone()
        step = torch.zeros(n, dtype=torch.long)
        rounds = torch.zeros(n, dtype=torch.long)
        target_calls = torch.zeros(n, dtype=torch.long)
        drafter_calls = torch.zeros(n, dtype=torch.long)
        cached_score = torch.zeros_like(state)
        has_cache = torch.zeros(n, dtype=torch.bool)
        every_row_cached = False  # Free drafter: after its first round no row needs a root call
        evaluations = 0
        position = torch.arange(gamma + 1)

        while True:
            active = step < K
            num_active = int(active.sum())
            if num_active == 0:
                break
            rows = None if num_active == n else active.nonzero().squeeze(-1)  # None: every row
            y, k = _take(state, rows), _take(step, rows)  # [b, d], [b]
            b = y.shape[0]
            num_drafted = self.lengths[k]  # [b] L
            draft_noise = torch.randn((b, gamma, d), generator=generator, dtype=y.dtype)
            draft_noise = draft_noise * (position[1:] <= num_drafted.unsqueeze(-1)).unsqueeze(-1)

            # the frozen score: a root target call (Frozen; Free on its first round), or the cache (Free)
            if drafter.reuses_verification and every_row_cached:
                needs_root = None
            else:
                needs_root = num_drafted > 0
                if drafter.reuses_verification:
                    needs_root &= ~_take(has_cache, rows)
                elif not drafter.needs_root_call:
                    needs_root &= False
                if not bool(needs_root.any()):
                    needs_root = None
            root_denoised = torch.zeros_like(y)
            if needs_root is not None:
                root_denoised[needs_root] = target.denoise(y[needs_root], k[needs_root])
                _add(target_calls, rows, needs_root.long())
                evaluations += int(needs_root.sum())
            if drafter.reuses_verification:
                frozen_score = _take(cached_score, rows)
                if needs_root is not None:
                    root_score = score_from_denoised(schedule, y, k, root_denoised)
                    frozen_score = torch.where(needs_root.unsqueeze(-1), root_score, frozen_score)
            elif drafter.needs_root_call:
                frozen_score = score_from_denoised(schedule, y, k, root_denoised)
            else:
                frozen_score = None  # a separate model does not use the target's score
            draft_means, draft_states = drafter.draft(schedule, y, k, frozen_score, draft_noise)
            if drafter.name == "model":
                _add(drafter_calls, rows, gamma)

            # ONE batched target call on y_hat_0..y_hat_L of every row
            all_states = torch.cat([y.unsqueeze(1), draft_states], dim=1)  # [b, g+1, d]
            all_steps = (k.unsqueeze(-1) + position).clamp(max=K - 1)  # [b, g+1]
            evaluate = position <= num_drafted.unsqueeze(-1)  # [b, g+1]
            if needs_root is not None:
                evaluate[:, 0] &= ~needs_root  # already evaluated by the root call
            if bool(evaluate.all()):  # the common case: no padding, no root call
                denoised = target.denoise(all_states.reshape(-1, d), all_steps.reshape(-1)).reshape(b, gamma + 1, d)
                _add(target_calls, rows, 1)
                evaluations += b * (gamma + 1)
            else:
                denoised = torch.zeros_like(all_states)
                denoised[:, 0] = root_denoised
                if bool(evaluate.any()):
                    denoised[evaluate] = target.denoise(all_states[evaluate], all_steps[evaluate])
                    _add(target_calls, rows, evaluate.any(-1).long())
                    evaluations += int(evaluate.sum())
            target_means = transition_mean(
                schedule, all_states.reshape(-1, d), all_steps.reshape(-1), denoised.reshape(-1, d)
            ).reshape(b, gamma + 1, d)
            sigma = schedule.step_std[all_steps]  # [b, g+1]

            result = gaussian_verify(
                draft_noise, draft_means, target_means, sigma,
                method=self.method, residual=self.residual, temperature=self.temperature,
                generator=generator, num_drafted=num_drafted,
            )
            tau = result.num_accepted
            _put(state, rows, result.next_state)
            _put(step, rows, k + tau + 1)
            _add(rounds, rows, 1)
            if drafter.reuses_verification:  # the score at the parent y_hat_tau of the new state
                index = torch.arange(b)
                _put(cached_score, rows, score_from_denoised(
                    schedule, all_states[index, tau], all_steps[index, tau], denoised[index, tau]
                ))
                if not every_row_cached:
                    _put(has_cache, rows, True)
                    every_row_cached = bool(has_cache.all())

        stats = SampleStats(K, rounds, target_calls, drafter_calls, time.perf_counter() - start, evaluations)
        return state, stats


def _take(tensor: torch.Tensor, rows: torch.Tensor | None) -> torch.Tensor:
    return tensor if rows is None else tensor[rows]


def _put(tensor: torch.Tensor, rows: torch.Tensor | None, values) -> None:
    if rows is None:
        tensor[...] = values
    else:
        tensor[rows] = values


def _add(tensor: torch.Tensor, rows: torch.Tensor | None, values) -> None:
    if rows is None:
        tensor += values
    else:
        tensor[rows] += values
