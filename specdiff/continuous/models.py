"""Denoisers: x0_hat(y, k), the only thing a model contributes to a Gaussian reverse step.

A denoiser is a callable (states [n, d], steps [n] long, schedule) -> x0_hat [n, d]. The
transition mean m_k(y) is then schedules.transition_mean, shared by every model.

- GaussianMixture: an analytic target with its exact posterior mean (so exact score), any d.
- UNetDenoiser: a diffusers UNet2DModel trained with velocity prediction on the rectified flow
  (the shipped digits model, see train.py).
- DiffusersDenoiser, diffusers_target, from_diffusers: a user's diffusers models (pipelines.py,
  re-exported here).

Wrappers never copy states between devices or dtypes: a mismatch is a clear error (target.py).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import torch

from specdiff.continuous.pipelines import DiffusersDenoiser, diffusers_schedule, diffusers_target  # noqa: F401
from specdiff.continuous.schedules import Schedule
from specdiff.continuous.target import LevelGather, Target, call_in_chunks, check_states_for_model  # noqa: F401

WEIGHTS_DIR = Path(__file__).parent / "weights"


# ----------------------------------------------------------------------------- analytic target


class GaussianMixture:
    """x0 ~ sum_j w_j N(mu_j, v_j Id); with y = a x0 + s z, E[x0 | y] is closed form:
    resp_j(y) prop. to w_j N(y; a mu_j, (a^2 v_j + s^2) Id),  E[x0 | y, j] = mu_j + c_j (y - a mu_j),
    c_j = a v_j / (a^2 v_j + s^2). Its parameters live on one device (`to(device)`); states elsewhere
    are a clear error."""

    def __init__(self, means: torch.Tensor, stds: torch.Tensor, weights: torch.Tensor):
        self.means = means.to(torch.float64)  # [J, d]
        self.variances = stds.to(torch.float64).to(self.means.device) ** 2  # [J]
        self.log_weights = torch.log(weights.to(torch.float64) / weights.sum()).to(self.means.device)  # [J]
        self.levels = LevelGather()

    @property
    def dim(self) -> int:
        return self.means.shape[1]

    @property
    def device(self) -> torch.device:
        return self.means.device

    def to(self, device) -> "GaussianMixture":
        """The same mixture with its parameters on `device`."""
        return GaussianMixture(self.means.to(device), self.variances.sqrt().to(device), self.log_weights.exp().to(device))

    def __call__(self, states: torch.Tensor, steps: torch.Tensor, schedule: Schedule) -> torch.Tensor:
        # states [n, d], steps [n] long -> E[x0 | y] [n, d]
        if states.device != self.device:
            raise ValueError(f"GaussianMixture: the states are on {states.device} but the mixture is on {self.device}; "
                             "use mixture.to(device)")
        dtype = states.dtype
        y = states.to(torch.float64)  # [n, d]
        a = self.levels(schedule, "signal", steps, y).unsqueeze(-1)  # [n, 1]
        s = self.levels(schedule, "noise", steps, y).unsqueeze(-1)  # [n, 1]
        var_y = a**2 * self.variances + s**2  # [n, J]
        sq_dist = (y * y).sum(-1, keepdim=True) - 2 * a * (y @ self.means.T) + a**2 * (self.means**2).sum(-1)
        log_resp = self.log_weights - 0.5 * self.dim * torch.log(var_y) - 0.5 * sq_dist / var_y  # [n, J]
        resp = torch.softmax(log_resp, dim=-1)
        gain = a * self.variances / var_y  # [n, J] c_j
        x0 = (resp * gain).sum(-1, keepdim=True) * y + (resp * (1 - a * gain)) @ self.means
        return x0.to(dtype)

    def sample(self, num: int, generator: torch.Generator | None = None) -> torch.Tensor:  # [num, d]
        """Exact draws, on the mixture's device (the generator's device must match)."""
        component = torch.multinomial(self.log_weights.exp(), num, replacement=True, generator=generator)
        noise = torch.randn(num, self.dim, generator=generator, dtype=torch.float64, device=self.device)
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
    prediction on the rectified flow: v = z - x0, so x0_hat = y - t v_hat. Conditioned on 1000 t.
    States must be on the UNet's device and of its dtype (a clear error otherwise)."""

    def __init__(self, unet, image_shape=(1, 8, 8), trace: bool = True, max_batch: int | None = 256):
        self.unet = unet.eval().requires_grad_(False)
        self.image_shape = tuple(image_shape)
        self.dim = math.prod(self.image_shape)
        self._forward = None
        self.trace = trace
        # larger calls run in chunks of max_batch states: same outputs, and on CPU a quarter cheaper
        # per state at 2048 states (the activations of a chunk stay in cache; docs/continuous.md)
        self.max_batch = max_batch
        self.levels = LevelGather()

    def velocity(self, images: torch.Tensor, model_time: torch.Tensor) -> torch.Tensor:  # [n, c, h, w], [n]
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
        # states [n, d], steps [n] long -> x0_hat [n, d]
        check_states_for_model(states, self.unet, "UNetDenoiser")
        t = self.levels(schedule, "model_time", steps, states).unsqueeze(-1)  # [n, 1]
        images = states.reshape(-1, *self.image_shape)
        with torch.inference_mode():
            v_hat = call_in_chunks(self.velocity, self.max_batch, images, 1000.0 * t.reshape(-1))
        return torch.addcmul(states, t, v_hat.reshape(states.shape), value=-1.0)  # y - t v_hat


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
