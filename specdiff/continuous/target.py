"""Target: a diffusion model sampled by Gaussian steps (a schedule and a denoiser), and what every
model wrapper shares: per-level values gathered on the states' device, calls in chunks, and the
device and dtype checks on the states a model is given (the wrappers never copy states silently)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from specdiff.continuous.schedules import Schedule


@dataclass
class Target:
    """A diffusion model sampled by Gaussian steps: a schedule and a denoiser."""

    schedule: Schedule
    denoiser: object  # callable(states [n, d], steps [n], schedule) -> [n, d]
    dim: int

    def denoise(self, states: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:  # [n, d] -> [n, d]
        return self.denoiser(states, steps, self.schedule)


class LevelGather:
    """schedule.<name>[steps] on the states' device and in their dtype. A schedule lives on the host;
    its [K+1] levels are copied to a device once per schedule tensor (one small copy per sampling
    call), so that the gathers of every model call stay on the device without a host sync."""

    def __init__(self):
        self._copies: dict = {}  # (name, device) -> (the schedule's tensor, its copy on device)

    def __call__(
        self,
        schedule: Schedule,
        name: str,  # "signal", "noise", "model_time", "mean_state_coef", ...
        steps: torch.Tensor,  # [n] long, on the host or on the states' device
        like: torch.Tensor,  # the states: the result's device and dtype
        dtype: torch.dtype | None = None,  # the result's dtype if not like's
    ) -> torch.Tensor:  # [n]
        values = getattr(schedule, name)  # [K+1] or [K]
        if values.device != like.device:
            key = (name, like.device)
            cached = self._copies.get(key)
            if cached is None or cached[0] is not values:
                cached = (values, values.to(like.device))
                self._copies[key] = cached
            values = cached[1]
        return values[steps.to(like.device, non_blocking=True)].to(dtype or like.dtype)


def check_states_for_model(states: torch.Tensor, model, who: str, what: str = "states") -> None:
    """A clear error where states are not on the model's device or not of its dtype: model wrappers
    do not copy or cast them (a silent copy per call would hide a slow or lossy setup)."""
    parameter = next(model.parameters(), None) if hasattr(model, "parameters") else None
    if parameter is None:
        return
    if states.device != parameter.device:
        raise ValueError(f"{who}: the {what} are on {states.device} but the model is on {parameter.device}; put "
                         f"both on one device (model.to(device), and the initial noise made there)")
    if states.dtype != parameter.dtype:
        raise ValueError(f"{who}: the {what} are {states.dtype} but the model's weights are {parameter.dtype}; "
                         f"sample in the model's dtype (initial noise of dtype {parameter.dtype}) or cast the model")


def call_in_chunks(function, max_batch: int | None, *inputs: torch.Tensor) -> torch.Tensor:
    """function(*inputs) on rows [i, i + max_batch) at a time, concatenated: the same rows as one call,
    with the activations of one chunk in memory (and, on CPU, in cache) at a time. None: one call."""
    rows = inputs[0].shape[0]
    if max_batch is None or rows <= max_batch:
        return function(*inputs)
    return torch.cat([function(*(x[i:i + max_batch] for x in inputs)) for i in range(0, rows, max_batch)])
