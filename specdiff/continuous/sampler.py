"""Plain DDPM and speculative DDPM (Algorithm 1 of the second paper), batched over rows.

Rows advance independently: each round, every unfinished row drafts up to gamma steps, and ONE
batched target call evaluates all rows' drafted states y_hat_0..y_hat_L together. Steps with
sigma = 0 (the last step, or churn 0) are never speculated: such a round is a plain target step.

Both samplers run on the initial state's device: the noise, the schedule, the masks and the per-row
bookkeeping. SpeculativeSampler reads the device ONCE per round, at the top of its loop
(`counts = ....tolist()`): how many rows still sample, need a root call and draft (the shapes of the
round), and whether the previous round's model outputs and next state were finite. Rows are then
compacted on the device (a stable sort of a mask, sliced at the count just read), so nothing else
comes back: a sampling call makes rounds + 1 host reads (SampleStats.extra["host_reads"]), and one
copy of the per-row counters at the end. On a CPU state of <= 8 rows the verification itself runs on
the host (gaussian_host.py), where reading a tensor is not a device sync. Models, generator and
states must share one device: nothing is copied across (a ValueError says which is where).
"""
from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field

import torch

from specdiff.continuous.drafters import Draft, make_drafter, take_rows
from specdiff.continuous.gaussian import NOT_FINITE, LossyTemperatureWarning, check_options, verify_round
from specdiff.continuous.models import Target
from specdiff.continuous.schedules import Schedule, transition_mean


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


def initial_noise(num_samples: int, dim: int, generator=None, dtype=torch.float32, device=None) -> torch.Tensor:
    """y_0 ~ N(0, Id), the start of every sampler here, on `device` (the generator's device by default)."""
    if device is None and generator is not None:
        device = generator.device
    return torch.randn(num_samples, dim, generator=generator, dtype=dtype, device=device)


# ----------------------------------------------------------------------------- devices and dtypes


def model_device(model) -> torch.device | None:
    """The device a model declares, if any: a `device` attribute, or the first parameter of a torch
    module (the model itself, or its `unet` or `model`). None: it does not say."""
    for candidate in (model, getattr(model, "unet", None), getattr(model, "model", None)):
        device = getattr(candidate, "device", None)
        if isinstance(device, (torch.device, str)):
            return torch.device(device)
        if isinstance(candidate, torch.nn.Module):
            for parameter in candidate.parameters():
                return parameter.device
    return None


def _same_device(a: torch.device, b: torch.device) -> bool:
    return a.type == b.type and (a.index is None or b.index is None or a.index == b.index)


def check_placement(caller: str, initial, generator, models: dict) -> None:
    """A ValueError unless the initial state is a floating [n, d] tensor and the generator and every model
    that declares a device (models: {what: model}) are on its device. Nothing is copied across devices."""
    if not isinstance(initial, torch.Tensor) or initial.dim() != 2:
        shape = tuple(initial.shape) if isinstance(initial, torch.Tensor) else type(initial).__name__
        raise ValueError(f"{caller}: the initial state must be an [n, d] tensor, got {shape}")
    if not initial.is_floating_point():
        raise ValueError(f"{caller}: the initial state must be floating point, got {initial.dtype}")
    for what, model in models.items():
        device = model_device(model)
        if device is not None and not _same_device(device, initial.device):
            raise ValueError(f"{caller}: the {what} is on {device} but the states are on {initial.device}; "
                             "put them on one device (nothing is copied between devices)")
    if generator is not None and not _same_device(generator.device, initial.device):
        raise ValueError(f"{caller}: the generator is on {generator.device} but the states are on "
                         f"{initial.device}; use torch.Generator(device={str(initial.device)!r})")


def checked_output(caller: str, what: str, output, inputs: torch.Tensor) -> torch.Tensor:
    """A model's output, after a ValueError if its shape, device or dtype differs from its input states'
    (tensor metadata only: no host sync)."""
    if not isinstance(output, torch.Tensor) or output.shape != inputs.shape:
        shape = tuple(output.shape) if isinstance(output, torch.Tensor) else type(output).__name__
        raise ValueError(f"{caller}: the {what} returned {shape} for states of shape {tuple(inputs.shape)}")
    if output.device != inputs.device or output.dtype != inputs.dtype:
        raise ValueError(f"{caller}: the {what} returned {output.dtype} on {output.device} for {inputs.dtype} states "
                         f"on {inputs.device}; models must return the states' dtype on their device")
    return output


# ----------------------------------------------------------------------------- plain DDPM


def ddpm_sample(
    target: Target,
    initial: torch.Tensor,  # [n, d] y_0
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, SampleStats]:  # samples [n, d]
    """The reference: y_{k+1} = m_k(y_k) + sigma_k z_k for k = 0..K-1, one target call per step,
    on the initial state's device; no host sync."""
    check_placement("ddpm_sample", initial, generator, {"target model": target.denoiser})
    device, dtype = initial.device, initial.dtype
    schedule = target.schedule.to(dtype, device)  # coefficients gathered without casts
    start = time.perf_counter()
    state = initial
    n, K = state.shape[0], schedule.num_steps
    for k in range(K):
        steps = torch.full((n,), k, dtype=torch.long, device=device)
        denoised = checked_output("ddpm_sample", "target model", target.denoise(state, steps), state)
        noise = torch.randn(state.shape, generator=generator, dtype=dtype, device=device)
        state = transition_mean(schedule, state, steps, denoised) + schedule.step_std[k] * noise
    calls = torch.full((n,), K, dtype=torch.long)
    stats = SampleStats(K, calls.clone(), calls, torch.zeros(n, dtype=torch.long), time.perf_counter() - start, n * K)
    return state, stats


# ----------------------------------------------------------------------------- speculative DDPM


def speculation_lengths(step_std: torch.Tensor, draft_length: int) -> torch.Tensor:  # [K] -> [K+1] long
    """L(k) = the number of consecutive steps from k with sigma > 0, capped at gamma and at K - 1 - k
    (the round's last, bonus step must be a step of the schedule). On the host: a construction-time table."""
    stds = step_std.detach().cpu().tolist()
    K = len(stds)
    run = [0] * (K + 1)
    for k in range(K - 1, -1, -1):
        run[k] = run[k + 1] + 1 if stds[k] > 0 else 0
    return torch.tensor([min(run[k], draft_length, max(K - 1 - k, 0)) for k in range(K + 1)], dtype=torch.long)


def _first(mask: torch.Tensor, count: int) -> torch.Tensor:  # [m] bool -> [count] long
    """The indices of the `count` True entries of mask, in order, without a host sync (count is known)."""
    return torch.argsort(mask.to(torch.uint8), descending=True, stable=True)[:count]


def _add(tensor: torch.Tensor, rows: torch.Tensor | None, values) -> None:
    if rows is None:
        tensor += values
    else:
        tensor[rows] += values


@dataclass
class RoundTables:
    """What a sampling loop gathers per start step k = 0..K, on the state's device and dtype."""

    schedule: Schedule  # the target's schedule, coefficients in the state's dtype
    lengths: torch.Tensor  # [K+1] long L(k); L(K) = 0
    counted: torch.Tensor  # [K+1, 2] long (k < K, L(k)): summed over rows, the round's counts
    drafts: torch.Tensor  # [K+1] bool L(k) > 0
    round_steps: torch.Tensor  # [K+1, g+1] long k..k+g, clamped at K-1

    @classmethod
    def build(cls, schedule: Schedule, lengths: torch.Tensor, draft_length: int, dtype, device) -> "RoundTables":
        schedule = schedule.to(dtype, device)
        K = schedule.num_steps
        lengths = lengths.to(device, non_blocking=True)  # host to device: no sync
        start = torch.arange(K + 1, device=device)
        counted = torch.stack([start < K, lengths], dim=-1).long()
        round_steps = (start.unsqueeze(-1) + torch.arange(draft_length + 1, device=device)).clamp(max=K - 1)
        return cls(schedule, lengths, counted, lengths > 0, round_steps)


class SpeculativeSampler:
    """Speculative DDPM: R = sample+reflection, D = sample+decomposition, B = block+decomposition (Table 1).

    target: Target (schedule + denoiser); drafter: 'free', 'frozen', a ContinuousDrafter (see
    drafters.py; checked here), or a denoiser for a separate model.
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
        try:
            self.drafter = make_drafter(drafter)
        except ValueError as error:
            raise ValueError(f"SpeculativeSampler: {error}") from None
        self.target = target
        self.draft_length = draft_length
        self.method = method
        self.residual = residual
        self.temperature = temperature
        self.lengths = speculation_lengths(target.schedule.step_std, draft_length)
        self._round_tables = {}  # (dtype, device) -> (the target's schedule they were built from, RoundTables)

    def sample(
        self,
        initial: torch.Tensor,  # [n, d] y_0
        generator: torch.Generator | None = None,
    ) -> tuple[torch.Tensor, SampleStats]:  # samples [n, d]
        target, gamma, drafter = self.target, self.draft_length, self.drafter
        models = {"target model": target.denoiser, "drafter": getattr(drafter, "denoiser", drafter)}
        check_placement("SpeculativeSampler", initial, generator, models)
        if self.temperature != 1.0:
            warnings.warn(f"SpeculativeSampler: temperature={self.temperature} != 1 is lossy (Appendix I); samples "
                          "do not follow the target", LossyTemperatureWarning, stacklevel=2)
        start = time.perf_counter()
        device, dtype = initial.device, initial.dtype
        tables = self._tables(dtype, device)
        schedule, lengths, counted, drafts, round_steps = (tables.schedule, tables.lengths, tables.counted,
                                                           tables.drafts, tables.round_steps)
        K, (n, d) = schedule.num_steps, initial.shape
        position = torch.arange(gamma + 1, device=device)  # [g+1]
        state = initial.clone()  # [n, d]
        step = torch.zeros(n, dtype=torch.long, device=device)  # [n] k
        rounds, target_calls, drafter_calls = (torch.zeros(n, dtype=torch.long, device=device) for _ in range(3))
        full_rounds = 0  # rounds in which every row sampled and made one target call: added to both at the end
        drafter.start(state)
        checks = [("the initial state contains NaN or inf", torch.isfinite(state).all())]  # read with the counts
        evaluations = host_reads = 0

        while True:
            drafting = drafts[step]  # [n] L(k) > 0 (so the row is still sampling)
            root_all = drafter.root_rows(drafting) & drafting  # [n] rows that need a root target call
            # THE host read of the round: its shapes, and the previous round's finiteness checks
            counts = torch.cat([counted[step].sum(0), torch.stack([root_all.sum(), *(ok for _, ok in checks)])])
            counts = counts.tolist()
            host_reads += 1
            b, num_drafted, num_root = counts[:3]  # rows still sampling, sum of their L, rows with a root call
            for (problem, _), ok in zip(checks, counts[3:]):
                if not ok:
                    raise ValueError(f"SpeculativeSampler: {problem}")
            if b == 0:
                break
            rows = None if b == n else _first(step < K, b)  # [b] the rows still sampling (None: all)
            y, k, root = (take_rows(t, rows) for t in (state, step, root_all))  # [b, d], [b], [b]
            drafted = lengths[k]  # [b] L
            checks = []

            draft_noise = torch.randn((b, gamma, d), generator=generator, dtype=dtype, device=device)
            if num_drafted < b * gamma:  # no noise past L
                draft_noise = draft_noise * (position[1:] <= drafted.unsqueeze(-1)).unsqueeze(-1)
            root_denoised = None  # [b, d]: x0_hat at y where root, zeros elsewhere
            if num_root > 0:
                root_denoised = self._root_call(y, k, root, num_root, checks)
                _add(target_calls, rows, root.long())
            draft = drafter.draft(schedule, y, k, draft_noise, root_denoised, rows)
            _check_draft(drafter, draft, draft_noise)
            checks.append(("the drafter model's output contains NaN or inf", torch.isfinite(draft.means).all()))
            if draft.model_calls:
                _add(drafter_calls, rows, draft.model_calls)

            # ONE batched target call on y_hat_0..y_hat_L of every row
            all_states = torch.cat([y.unsqueeze(1), draft.states], dim=1)  # [b, g+1, d]
            all_steps = round_steps[k]  # [b, g+1] k..k+g, clamped at K-1
            num_states = b + num_drafted - num_root
            denoised, calls = self._verification_call(all_states, all_steps, drafted, root, root_denoised,
                                                      num_states, checks)
            evaluations += num_root + num_states
            target_means = transition_mean(
                schedule, all_states.reshape(-1, d), all_steps.reshape(-1), denoised.reshape(-1, d)
            ).reshape(b, gamma + 1, d)
            sigma = schedule.step_std[all_steps]  # [b, g+1]

            # gaussian_verify's checks hold by construction: sigma > 0 on the L(k) speculated steps
            # (speculation_lengths), a finite schedule (checked in __init__), finite model outputs (checks)
            result = verify_round(draft_noise, draft.means, target_means, sigma, drafted, self.method, self.residual,
                                  self.temperature, generator)
            checks.append((NOT_FINITE.format(dtype=dtype), torch.isfinite(result.next_state).all()))
            tau = result.num_accepted  # [b] (a CPU tensor from the host path, and then the device is the CPU)
            if rows is None:
                state, step = result.next_state, k + tau + 1
            else:
                state[rows], step[rows] = result.next_state, k + tau + 1
            if rows is None and isinstance(calls, int):
                full_rounds += 1
            else:
                _add(rounds, rows, 1)
                _add(target_calls, rows, calls)
            drafter.observe(schedule, rows, all_states, all_steps, denoised, tau)

        counters = torch.stack([rounds + full_rounds, target_calls + full_rounds, drafter_calls]).cpu()  # one copy
        stats = SampleStats(K, *counters.unbind(0), time.perf_counter() - start, evaluations,
                            extra={"host_reads": host_reads})
        return state, stats

    def _tables(self, dtype: torch.dtype, device: torch.device) -> "RoundTables":
        """The schedule and per-step tables on (dtype, device), built at the first sampling call there and
        kept while the target's schedule is the same object."""
        source, tables = self._round_tables.get((dtype, device), (None, None))
        if source is not self.target.schedule:
            tables = RoundTables.build(self.target.schedule, self.lengths, self.draft_length, dtype, device)
            self._round_tables[(dtype, device)] = self.target.schedule, tables
        return tables

    def _root_call(self, y, k, root, num_root: int, checks: list) -> torch.Tensor:  # [b, d]
        """x0_hat at the current state of the root rows (zeros elsewhere), in one target call."""
        if num_root == y.shape[0]:
            denoised = self.target.denoise(y, k)
            checked = checked_output("SpeculativeSampler", "target model", denoised, y)
        else:
            index = _first(root, num_root)
            checked = checked_output("SpeculativeSampler", "target model", self.target.denoise(y[index], k[index]),
                                     y[index])
            denoised = torch.zeros_like(y).index_put_((index,), checked)
        checks.append(("the target model's output contains NaN or inf", torch.isfinite(checked).all()))
        return denoised

    def _verification_call(self, all_states, all_steps, drafted, root, root_denoised, num_states: int, checks: list):
        """The target's x0_hat at y_hat_0..y_hat_L of every row [b, g+1, d] (zeros past L), in one call;
        y_hat_0 of a root row comes from the root call. Returns it and the calls per row ([b] or 1)."""
        b, g1, d = all_states.shape
        if num_states == b * g1:  # the common case: every state, no padding, no root call
            flat = all_states.reshape(-1, d)
            denoised = checked_output("SpeculativeSampler", "target model",
                                      self.target.denoise(flat, all_steps.reshape(-1)), flat)
            checks.append(("the target model's output contains NaN or inf", torch.isfinite(denoised).all()))
            return denoised.reshape(b, g1, d), 1
        position = torch.arange(g1, device=all_states.device)
        evaluate = (position <= drafted.unsqueeze(-1)) & ~(root.unsqueeze(-1) & (position == 0))  # [b, g+1]
        denoised = torch.zeros_like(all_states).reshape(-1, d)
        if num_states > 0:
            index = _first(evaluate.reshape(-1), num_states)
            picked = all_states.reshape(-1, d)[index]
            out = checked_output("SpeculativeSampler", "target model",
                                 self.target.denoise(picked, all_steps.reshape(-1)[index]), picked)
            checks.append(("the target model's output contains NaN or inf", torch.isfinite(out).all()))
            denoised[index] = out
        denoised = denoised.reshape(b, g1, d)
        if root_denoised is not None:  # y_hat_0 of a root row was not evaluated again: zero there
            denoised[:, 0] += root_denoised
        return denoised, evaluate.any(-1).long()


def _check_draft(drafter, draft, draft_noise: torch.Tensor) -> None:
    """A ValueError unless drafter.draft returned a Draft of [b, g, d] tensors on the noise's device and dtype."""
    kind = type(drafter).__name__
    if not isinstance(draft, Draft):
        raise ValueError(f"SpeculativeSampler: {kind}.draft must return a specdiff.continuous.drafters.Draft, "
                         f"got {type(draft).__name__}")
    for name in ("means", "states"):
        tensor = getattr(draft, name)
        if not isinstance(tensor, torch.Tensor) or tensor.shape != draft_noise.shape:
            shape = tuple(tensor.shape) if isinstance(tensor, torch.Tensor) else type(tensor).__name__
            raise ValueError(f"SpeculativeSampler: {kind}.draft returned {name} {shape}, expected "
                             f"{tuple(draft_noise.shape)} [b, gamma, d]")
        if tensor.device != draft_noise.device or tensor.dtype != draft_noise.dtype:
            raise ValueError(f"SpeculativeSampler: {kind}.draft returned {name} in {tensor.dtype} on {tensor.device} "
                             f"for {draft_noise.dtype} states on {draft_noise.device}")
