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
    schedule = target.schedule
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
        schedule, target, gamma = self.target.schedule, self.target, self.draft_length
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
        evaluations = 0
        position = torch.arange(gamma + 1)

        while True:
            rows = (step < K).nonzero().squeeze(-1)
            if rows.numel() == 0:
                break
            y, k = state[rows], step[rows]  # [b, d], [b]
            num_drafted = self.lengths[k]  # [b] L
            b = rows.numel()
            draft_noise = torch.randn((b, gamma, d), generator=generator, dtype=y.dtype)
            draft_noise = draft_noise * (position[1:] <= num_drafted.unsqueeze(-1)).unsqueeze(-1)

            # the frozen score: a root target call (Frozen; Free on its first round), or the cache (Free)
            needs_root = num_drafted > 0
            if self.drafter.reuses_verification:
                needs_root &= ~has_cache[rows]
            elif not self.drafter.needs_root_call:
                needs_root &= False
            root_denoised = torch.zeros_like(y)
            if bool(needs_root.any()):
                root_denoised[needs_root] = target.denoise(y[needs_root], k[needs_root])
                target_calls[rows[needs_root]] += 1
                evaluations += int(needs_root.sum())
            frozen_score = score_from_denoised(schedule, y, k, root_denoised)
            if self.drafter.reuses_verification:
                frozen_score = torch.where(needs_root.unsqueeze(-1), frozen_score, cached_score[rows])
            draft_means, draft_states = self.drafter.draft(schedule, y, k, frozen_score, draft_noise)
            if self.drafter.name == "model":
                drafter_calls[rows] += gamma

            # ONE batched target call on y_hat_0..y_hat_L of every row
            all_states = torch.cat([y.unsqueeze(1), draft_states], dim=1)  # [b, g+1, d]
            all_steps = (k.unsqueeze(-1) + position).clamp(max=K - 1)  # [b, g+1]
            evaluate = position <= num_drafted.unsqueeze(-1)  # [b, g+1]
            evaluate[:, 0] &= ~needs_root  # already evaluated by the root call
            denoised = torch.zeros_like(all_states)
            denoised[:, 0] = root_denoised
            if bool(evaluate.any()):
                denoised[evaluate] = target.denoise(all_states[evaluate], all_steps[evaluate])
                target_calls[rows[evaluate.any(-1)]] += 1
                evaluations += int(evaluate.sum())
            target_means = transition_mean(
                schedule, all_states.reshape(-1, d), all_steps.reshape(-1), denoised.reshape(-1, d)
            ).reshape(b, gamma + 1, d)
            sigma = schedule.step_std[all_steps].to(y.dtype)  # [b, g+1]

            result = gaussian_verify(
                draft_noise, draft_means, target_means, sigma,
                method=self.method, residual=self.residual, temperature=self.temperature,
                generator=generator, num_drafted=num_drafted,
            )
            tau = result.num_accepted
            state[rows] = result.next_state
            step[rows] = k + tau + 1
            rounds[rows] += 1
            if self.drafter.reuses_verification:  # the score at the parent y_hat_tau of the new state
                index = torch.arange(b)
                cached_score[rows] = score_from_denoised(
                    schedule, all_states[index, tau], all_steps[index, tau], denoised[index, tau]
                )
                has_cache[rows] = True

        stats = SampleStats(K, rounds, target_calls, drafter_calls, time.perf_counter() - start, evaluations)
        return state, stats
