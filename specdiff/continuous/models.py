"""Denoisers: x0_hat(y, k), the only thing a model contributes to a Gaussian reverse step.

A denoiser is a callable (states [n, d], steps [n] long, schedule) -> x0_hat [n, d]. The
transition mean m_k(y) is then schedules.transition_mean, shared by every model.

- GaussianMixture: an analytic target with its exact posterior mean (so exact score), any d.
- UNetDenoiser: a diffusers UNet2DModel trained with velocity prediction on the rectified flow
  (the shipped digits model, see train.py).
- DiffusersDenoiser + diffusers_schedule: any diffusers UNet + noise scheduler a user brings
  (epsilon / sample / v_prediction, clip_sample), stepping exactly like DDPMScheduler.step at churn 1.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch

from specdiff.continuous.schedules import Schedule, variance_preserving_schedule

WEIGHTS_DIR = Path(__file__).parent / "weights"


@dataclass
class Target:
    """A diffusion model sampled by Gaussian steps: a schedule and a denoiser."""

    schedule: Schedule
    denoiser: object  # callable(states [n, d], steps [n], schedule) -> [n, d]
    dim: int

    def denoise(self, states: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:  # [n, d] -> [n, d]
        return self.denoiser(states, steps, self.schedule)


# ----------------------------------------------------------------------------- analytic target


class GaussianMixture:
    """x0 ~ sum_j w_j N(mu_j, v_j Id); with y = a x0 + s z, E[x0 | y] is closed form:
    resp_j(y) prop. to w_j N(y; a mu_j, (a^2 v_j + s^2) Id),  E[x0 | y, j] = mu_j + c_j (y - a mu_j),
    c_j = a v_j / (a^2 v_j + s^2)."""

    def __init__(self, means: torch.Tensor, stds: torch.Tensor, weights: torch.Tensor):
        self.means = means.to(torch.float64)  # [J, d]
        self.variances = stds.to(torch.float64) ** 2  # [J]
        self.log_weights = torch.log(weights.to(torch.float64) / weights.sum())  # [J]

    @property
    def dim(self) -> int:
        return self.means.shape[1]

    def __call__(self, states: torch.Tensor, steps: torch.Tensor, schedule: Schedule) -> torch.Tensor:
        dtype = states.dtype
        y = states.to(torch.float64)  # [n, d]
        a = schedule.signal[steps].to(torch.float64).unsqueeze(-1)  # [n, 1]
        s = schedule.noise[steps].to(torch.float64).unsqueeze(-1)  # [n, 1]
        var_y = a**2 * self.variances + s**2  # [n, J]
        sq_dist = (y * y).sum(-1, keepdim=True) - 2 * a * (y @ self.means.T) + a**2 * (self.means**2).sum(-1)
        log_resp = self.log_weights - 0.5 * self.dim * torch.log(var_y) - 0.5 * sq_dist / var_y  # [n, J]
        resp = torch.softmax(log_resp, dim=-1)
        gain = a * self.variances / var_y  # [n, J] c_j
        x0 = (resp * gain).sum(-1, keepdim=True) * y + (resp * (1 - a * gain)) @ self.means
        return x0.to(dtype)

    def sample(self, num: int, generator: torch.Generator | None = None) -> torch.Tensor:  # [num, d]
        component = torch.multinomial(self.log_weights.exp(), num, replacement=True, generator=generator)
        noise = torch.randn(num, self.dim, generator=generator, dtype=torch.float64)
        return self.means[component] + self.variances[component].sqrt().unsqueeze(-1) * noise


def gaussian_mixture_2d() -> GaussianMixture:
    """Eight components on a circle of radius 2, std 0.25: the usual 2-D test target."""
    angle = torch.arange(8, dtype=torch.float64) * (2 * math.pi / 8)
    means = 2.0 * torch.stack([angle.cos(), angle.sin()], dim=-1)
    return GaussianMixture(means, torch.full((8,), 0.25), torch.ones(8))


def gaussian_mixture_64d(seed: int = 0) -> GaussianMixture:
    """Four components in 64 dimensions, random means of norm 3, stds 0.3-0.8, unequal weights."""
    generator = torch.Generator().manual_seed(seed)
    means = torch.randn(4, 64, generator=generator, dtype=torch.float64)
    means = 3.0 * means / means.norm(dim=-1, keepdim=True)
    return GaussianMixture(means, torch.tensor([0.3, 0.5, 0.6, 0.8]), torch.tensor([0.4, 0.3, 0.2, 0.1]))


# ----------------------------------------------------------------------------- UNet denoisers


class UNetDenoiser:
    """A diffusers UNet2DModel on images [c, h, w] flattened to d = c h w, trained with velocity
    prediction on the rectified flow: v = z - x0, so x0_hat = y - t v_hat. Conditioned on 1000 t."""

    def __init__(self, unet, image_shape=(1, 8, 8), trace: bool = True, max_batch: int = 256):
        self.unet = unet.eval().requires_grad_(False)
        self.image_shape = tuple(image_shape)
        self.dim = math.prod(self.image_shape)
        self._forward = None
        self.trace = trace
        # larger calls run in chunks of max_batch states: same outputs, and on CPU a quarter cheaper
        # per state at 2048 states (the activations of a chunk stay in cache; docs/continuous.md)
        self.max_batch = max_batch

    def velocity(self, images: torch.Tensor, model_time: torch.Tensor) -> torch.Tensor:
        if self._forward is None:
            def forward(x, t):
                return self.unet(x, t, return_dict=False)[0]
            self._forward = forward
            if self.trace:  # removes Python overhead per call; same weights and maths
                import warnings
                with warnings.catch_warnings(), torch.inference_mode():
                    warnings.simplefilter("ignore")
                    example = (images[:2].clone() if images.shape[0] >= 2 else images.repeat(2, 1, 1, 1), model_time[:1].repeat(2))
                    self._forward = torch.jit.trace(forward, example, check_trace=False)
        return self._forward(images, model_time)

    def __call__(self, states: torch.Tensor, steps: torch.Tensor, schedule: Schedule) -> torch.Tensor:
        t = schedule.model_time[steps].to(states.dtype).unsqueeze(-1)  # [n, 1]
        images = states.to(torch.float32).reshape(-1, *self.image_shape)
        model_time = 1000.0 * t.to(torch.float32).reshape(-1)  # [n]
        with torch.inference_mode():
            if images.shape[0] <= self.max_batch:
                v_hat = self.velocity(images, model_time)
            else:
                v_hat = torch.cat([self.velocity(images[i:i + self.max_batch], model_time[i:i + self.max_batch])
                                   for i in range(0, images.shape[0], self.max_batch)])
        return torch.addcmul(states, t, v_hat.reshape(states.shape).to(states.dtype), value=-1.0)  # y - t v_hat


def digits_unet_config() -> dict:
    """A tiny UNet2DModel on 8x8 digits: two levels (8x8, 4x4), 16/32 channels, no attention and no
    middle block (its two resnets cost 19% of every call and the speed budget of the bench needs it;
    trained 6000 steps it samples as well as the session-1 model with one, see docs/continuous.md)."""
    return dict(
        sample_size=8,
        in_channels=1,
        out_channels=1,
        down_block_types=("DownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "UpBlock2D"),
        mid_block_type=None,
        block_out_channels=(16, 32),
        layers_per_block=1,
        norm_num_groups=8,
        add_attention=False,
    )


def load_unet(path: Path | str):
    """A UNet2DModel from <path>/config.json and <path>/model.safetensors."""
    from diffusers import UNet2DModel
    from safetensors.torch import load_file

    path = Path(path)
    if not (path / "model.safetensors").exists():
        raise FileNotFoundError(f"no weights at {path}; run `specdiff continuous train` to make them")
    unet = UNet2DModel.from_config(json.loads((path / "config.json").read_text()))
    unet.load_state_dict(load_file(str(path / "model.safetensors")))
    return unet


def load_digits_target(num_steps: int, churn: float, trace: bool = True, path: Path | str | None = None) -> Target:
    """The shipped digits denoiser on the rectified-flow schedule with K steps and churn epsilon."""
    from specdiff.continuous.schedules import rectified_flow_schedule

    unet = load_unet(path or WEIGHTS_DIR / "digits_unet")
    return Target(rectified_flow_schedule(num_steps, churn), UNetDenoiser(unet, trace=trace), dim=64)


# ----------------------------------------------------------------------------- diffusers adapter


class DiffusersDenoiser:
    """Adapter for any diffusers UNet (called as unet(sample, timestep).sample) and a scheduler
    with alphas_cumprod (DDPMScheduler, DDIMScheduler, ...). x0_hat follows the scheduler's
    prediction_type and clip_sample, as DDPMScheduler.step computes pred_original_sample."""

    def __init__(self, unet, scheduler, image_shape):
        config = scheduler.config
        if config.prediction_type not in ("epsilon", "sample", "v_prediction"):
            raise ValueError(f"DiffusersDenoiser: unsupported prediction_type {config.prediction_type!r}")
        if getattr(config, "thresholding", False):
            raise ValueError("DiffusersDenoiser: dynamic thresholding is not supported")
        self.unet = unet.eval().requires_grad_(False) if hasattr(unet, "eval") else unet
        self.prediction_type = config.prediction_type
        self.clip_range = config.clip_sample_range if getattr(config, "clip_sample", False) else None
        self.image_shape = tuple(image_shape)
        self.dim = math.prod(self.image_shape)

    def __call__(self, states: torch.Tensor, steps: torch.Tensor, schedule: Schedule) -> torch.Tensor:
        a = schedule.signal[steps].to(states.dtype).unsqueeze(-1)
        s = schedule.noise[steps].to(states.dtype).unsqueeze(-1)
        timesteps = schedule.model_time[steps].long()
        images = states.reshape(-1, *self.image_shape)
        with torch.inference_mode():
            out = self.unet(images, timesteps)
        out = (out.sample if hasattr(out, "sample") else out).reshape(states.shape[0], -1).to(states.dtype)
        if self.prediction_type == "epsilon":
            x0 = (states - s * out) / a
        elif self.prediction_type == "sample":
            x0 = out
        else:
            x0 = a * states - s * out
        if self.clip_range is not None:
            x0 = x0.clamp(-self.clip_range, self.clip_range)
        return x0


def diffusers_schedule(scheduler, num_steps: int, churn: float = 1.0) -> Schedule:
    """Levels from scheduler.set_timesteps(K): abar at each timestep, then abar = 1 (DDPM's last step)."""
    if getattr(scheduler.config, "variance_type", "fixed_small") not in ("fixed_small", None):
        raise ValueError(f"diffusers_schedule: variance_type {scheduler.config.variance_type!r} is not supported")
    scheduler.set_timesteps(num_steps)
    return variance_preserving_schedule(scheduler.alphas_cumprod, scheduler.timesteps, churn)


def diffusers_target(unet, scheduler, num_steps: int, churn: float = 1.0, image_shape=None) -> Target:
    """A Target from a user's diffusers UNet and scheduler; image_shape defaults to the UNet's config."""
    if image_shape is None:
        size = unet.config.sample_size
        size = (size, size) if isinstance(size, int) else tuple(size)
        image_shape = (unet.config.in_channels, *size)
    denoiser = DiffusersDenoiser(unet, scheduler, image_shape)
    return Target(diffusers_schedule(scheduler, num_steps, churn), denoiser, dim=denoiser.dim)
