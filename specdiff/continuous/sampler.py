"""Plain DDPM and speculative DDPM (Algorithm 1 of the second paper), batched over rows.

Rows advance independently: each round, every unfinished row drafts up to gamma steps, and ONE
batched target call evaluates all rows' drafted states y_hat_0..y_hat_L together. Steps with
sigma = 0 (the last step, or churn 0) are never speculated: such a round is a plain target step.
"""
from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field

import numpy as np
import torch

from specdiff.continuous.drafters import make_drafter
from specdiff.continuous.gaussian import LossyTemperatureWarning, check_options, verify_round
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
        check_options(method, residual, temperature, "SpeculativeSampler")  # gaussian_verify's own checks
        schedule = target.schedule
        if not all(bool(torch.isfinite(getattr(schedule, name)).all()) for name in schedule.COEFFICIENTS):
            raise ValueError("SpeculativeSampler: the schedule's coefficients must be finite")
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
        if self.temperature != 1.0:
            warnings.warn(f"SpeculativeSampler: temperature={self.temperature} != 1 is lossy (Appendix I); samples "
                          "do not follow the target", LossyTemperatureWarning, stacklevel=2)
        start = time.perf_counter()
        state = _checked(initial, "the initial state").clone()  # [n, d]
        cached_score = torch.zeros_like(state)  # [n, d] Free drafter: the score at the parent of the state
        # per-row bookkeeping is host-side numpy (a sample at a time pays per tensor op); states stay tensors
        step = np.zeros(n, dtype=np.int64)  # [n] k
        rounds, target_calls, drafter_calls = (np.zeros(n, dtype=np.int64) for _ in range(3))
        has_cache = np.zeros(n, dtype=bool)
        lengths = self.lengths.numpy()  # [K+1] L(k)
        position = np.arange(gamma + 1)
        evaluations = 0

        while True:
            active = np.flatnonzero(step < K)  # [b] rows still sampling
            if active.size == 0:
                break
            b = active.size
            rows = None if b == n else torch.from_numpy(active)  # None: every row
            k_host = step[active]  # [b]
            drafted = lengths[k_host]  # [b] L
            y, k = _take(state, rows), torch.from_numpy(k_host)  # [b, d], [b]
            draft_noise = torch.randn((b, gamma, d), generator=generator, dtype=y.dtype)
            if (drafted < gamma).any():  # no noise past L
                draft_noise = draft_noise * torch.from_numpy(position[1:] <= drafted[:, None]).unsqueeze(-1)

            # the frozen score: a root target call (Frozen; Free where no verification output exists yet)
            needs_root = np.zeros(b, dtype=bool)
            if drafter.needs_root_call:
                needs_root = drafted > 0
            elif drafter.reuses_verification:
                needs_root = (drafted > 0) & ~has_cache[active]
            root_denoised = None  # [b, d] where needs_root
            if needs_root.any():
                root = torch.from_numpy(np.flatnonzero(needs_root))
                root_denoised = torch.zeros_like(y)
                root_denoised[root] = _checked(target.denoise(y[root], k[root]))
                target_calls[active[needs_root]] += 1
                evaluations += int(needs_root.sum())
            if drafter.reuses_verification:
                frozen_score = _take(cached_score, rows)
                if needs_root.any():
                    root_score = score_from_denoised(schedule, y, k, root_denoised)
                    frozen_score = torch.where(torch.from_numpy(needs_root).unsqueeze(-1), root_score, frozen_score)
            elif drafter.needs_root_call:  # (no root call when no row drafts: the score is then unused)
                frozen_score = torch.zeros_like(y) if root_denoised is None else score_from_denoised(schedule, y, k, root_denoised)
            else:
                frozen_score = None  # a separate model does not use the target's score
            draft_means, draft_states = drafter.draft(schedule, y, k, frozen_score, draft_noise)
            if drafter.name == "model":
                drafter_calls[active] += gamma
                _checked(draft_means, "the drafter model's output")

            # ONE batched target call on y_hat_0..y_hat_L of every row
            all_states = torch.cat([y.unsqueeze(1), draft_states], dim=1)  # [b, g+1, d]
            steps_host = np.minimum(k_host[:, None] + position, K - 1)  # [b, g+1]
            all_steps = torch.from_numpy(steps_host)
            evaluate = (position <= drafted[:, None]) & ~(needs_root[:, None] & (position == 0))  # [b, g+1]
            if evaluate.all():  # the common case: no padding, no root call
                denoised = _checked(target.denoise(all_states.reshape(-1, d), all_steps.reshape(-1)))
                denoised = denoised.reshape(b, gamma + 1, d)
                target_calls[active] += 1
                evaluations += b * (gamma + 1)
            else:
                denoised = torch.zeros_like(all_states)
                if root_denoised is not None:
                    denoised[:, 0] = root_denoised
                if evaluate.any():
                    mask = torch.from_numpy(evaluate)
                    denoised[mask] = _checked(target.denoise(all_states[mask], all_steps[mask]))
                    target_calls[active[evaluate.any(-1)]] += 1
                    evaluations += int(evaluate.sum())
            target_means = transition_mean(
                schedule, all_states.reshape(-1, d), all_steps.reshape(-1), denoised.reshape(-1, d)
            ).reshape(b, gamma + 1, d)
            sigma = schedule.step_std[all_steps]  # [b, g+1]

            # gaussian_verify's checks hold by construction: sigma > 0 on the L(k) speculated steps
            # (speculation_lengths), a finite schedule (checked in __init__) and finite model outputs (_checked)
            result = verify_round(draft_noise, draft_means, target_means, sigma, torch.from_numpy(drafted),
                                  self.method, self.residual, self.temperature, generator)
            tau = result.num_accepted.cpu().numpy()  # [b]
            _put(state, rows, result.next_state)
            step[active] = k_host + tau + 1
            rounds[active] += 1
            if drafter.reuses_verification:  # the score at the parent y_hat_tau of the new state
                index, parent = torch.arange(b), torch.from_numpy(tau)
                _put(cached_score, rows, score_from_denoised(
                    schedule, all_states[index, parent], all_steps[index, parent], denoised[index, parent]
                ))
                has_cache[active] = True

        stats = SampleStats(K, torch.from_numpy(rounds), torch.from_numpy(target_calls),
                            torch.from_numpy(drafter_calls), time.perf_counter() - start, evaluations)
        return state, stats


def _checked(values: torch.Tensor, what: str = "the target model's output") -> torch.Tensor:
    """values, after a clear error if they hold NaN or inf (one host sync)."""
    if not bool(torch.isfinite(values).all()):
        raise ValueError(f"SpeculativeSampler: {what} contains NaN or inf")
    return values


def _take(tensor: torch.Tensor, rows: torch.Tensor | None) -> torch.Tensor:
    return tensor if rows is None else tensor[rows]


def _put(tensor: torch.Tensor, rows: torch.Tensor | None, values) -> None:
    if rows is None:
        tensor[...] = values
    else:
        tensor[rows] = values
