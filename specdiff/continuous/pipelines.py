"""Users' own diffusers models as speculative targets.

    target = from_diffusers(pipeline, num_steps=250, churn=1.0)   # DDPMPipeline, DDIMPipeline, LDMPipeline, ...
    samples, stats = SpeculativeSampler(target, "free", 7, "block", "decomposition").sample(noise)
    images = target.decode(samples)                                # [n, C, H, W], nominally in [-1, 1]

Supported: a UNet2DModel (unconditional), on pixels or on latents, with a DDPMScheduler (variance_type
fixed_small) or a DDIMScheduler (eta = churn), any prediction_type of epsilon / sample / v_prediction,
clip_sample on or off; latents are decoded by an AutoencoderKL or a VQModel. At churn 1 a target step
is exactly the scheduler's own `step` (DDPMScheduler.step, or DDIMScheduler.step with eta = 1), which
tests/continuous/test_pipelines.py checks step for step. Anything else gets an error that names it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from specdiff.continuous.schedules import Schedule
from specdiff.continuous.target import LevelGather, Target, call_in_chunks, check_states_for_model

PREDICTION_TYPES = ("epsilon", "sample", "v_prediction")
DDPM_VARIANCE_TYPES = ("fixed_small", "fixed_small_log")  # the posterior variance (the same number, two ways)


def check_scheduler(scheduler, who: str = "diffusers_target") -> None:
    """A clear error for a scheduler, or a setting of one, whose step is not a Gaussian posterior step
    on its own alphas_cumprod."""
    from diffusers import DDIMScheduler, DDPMScheduler

    name = type(scheduler).__name__
    if not isinstance(scheduler, (DDPMScheduler, DDIMScheduler)):
        raise ValueError(f"{who}: unsupported scheduler {name}; supported: DDPMScheduler, DDIMScheduler")
    config = scheduler.config
    if config.prediction_type not in PREDICTION_TYPES:
        raise ValueError(f"{who}: {name} has unsupported prediction_type {config.prediction_type!r}; "
                         f"supported: {', '.join(PREDICTION_TYPES)}")
    if getattr(config, "thresholding", False):
        raise ValueError(f"{who}: {name} with thresholding=True (dynamic thresholding) is not supported")
    variance_type = getattr(config, "variance_type", "fixed_small")
    if isinstance(scheduler, DDPMScheduler) and variance_type not in DDPM_VARIANCE_TYPES:
        raise ValueError(f"{who}: {name} with variance_type {variance_type!r} is not supported; supported: "
                         f"{', '.join(DDPM_VARIANCE_TYPES)}")


def check_unet(unet, who: str = "diffusers_target") -> None:
    """The denoiser must be an unconditional UNet2DModel, called as unet(sample, timestep)."""
    from diffusers import UNet2DModel

    if not isinstance(unet, UNet2DModel):
        raise ValueError(f"{who}: unsupported denoiser {type(unet).__name__}; supported: UNet2DModel (unconditional)")
    if unet.config.class_embed_type is not None or unet.config.num_class_embeds is not None:
        raise ValueError(f"{who}: a class-conditional UNet2DModel (class_embed_type {unet.config.class_embed_type!r}, "
                         f"num_class_embeds {unet.config.num_class_embeds}) is not supported: it needs class labels")


def scheduler_levels(scheduler, num_steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """alphas_cumprod at the K + 1 levels the scheduler's own `step` visits [K+1] (float64), and its
    timesteps [K], after scheduler.set_timesteps(K). DDPMScheduler steps to the next timestep of its
    list and from the last to abar = 1; DDIMScheduler steps from t to t - T // K, and below 0 to its
    final_alpha_cumprod (1 with set_alpha_to_one)."""
    from diffusers import DDIMScheduler

    check_scheduler(scheduler, "diffusers_schedule")
    scheduler.set_timesteps(num_steps)
    timesteps = scheduler.timesteps.long()  # [K] descending
    alphas_cumprod = scheduler.alphas_cumprod.to(torch.float64)
    final = torch.ones((), dtype=torch.float64)
    if isinstance(scheduler, DDIMScheduler):
        previous = timesteps - scheduler.config.num_train_timesteps // scheduler.num_inference_steps  # [K]
        if not torch.equal(previous[:-1], timesteps[1:]):
            raise ValueError(f"diffusers_schedule: DDIMScheduler with timestep_spacing "
                             f"{scheduler.config.timestep_spacing!r} at {num_steps} steps steps from t to "
                             f"t - {scheduler.config.num_train_timesteps // num_steps}, which is not its next "
                             "timestep; not supported (use num_steps dividing num_train_timesteps)")
        last = int(previous[-1])
        final = alphas_cumprod[last] if last >= 0 else scheduler.final_alpha_cumprod.to(torch.float64)
    levels = torch.cat([alphas_cumprod[timesteps], final.reshape(1)])  # [K+1]
    if not bool((levels > 0).all()) or not bool((levels[:-1] < 1).all()):
        raise ValueError("diffusers_schedule: the scheduler's alphas_cumprod must lie in (0, 1) at every timestep "
                         "(a zero terminal SNR, rescale_betas_zero_snr=True, is not supported)")
    return levels, timesteps


def diffusers_schedule(scheduler, num_steps: int, churn: float = 1.0) -> Schedule:
    """The levels of scheduler_levels on the variance-preserving interpolant a = sqrt(abar), s = sqrt(1 - abar),
    conditioned on the scheduler's timesteps; churn is DDIM's eta (1: DDPM's posterior step)."""
    levels, timesteps = scheduler_levels(scheduler, num_steps)
    model_time = torch.cat([timesteps.to(torch.float64), torch.full((1,), -1.0, dtype=torch.float64)])
    return Schedule(signal=levels.sqrt(), noise=(1 - levels).sqrt(), model_time=model_time, churn=churn)


class DiffusersDenoiser:
    """x0_hat(y, k) from a diffusers UNet2DModel, as the scheduler's `step` computes pred_original_sample
    (prediction_type, clip_sample). DDIMScheduler.step (use_clipped_model_output=False, the pipelines'
    default) points its noise direction along the *unclipped* prediction; where clipping bites, the
    denoiser returns the x0 for which the shared transition_mean gives DDIM's mean exactly:
    x0 = x0_clipped + (mean_state_coef a_t / mean_denoised_coef) (x0_clipped - x0_unclipped).

    States must be on the UNet's device and of its dtype (a clear error otherwise: no silent copies).
    Calls over max_batch states run in chunks (same outputs, bounded activations; None: one call)."""

    def __init__(self, unet, scheduler, image_shape, max_batch: int | None = 256):
        from diffusers import DDIMScheduler

        check_unet(unet, "DiffusersDenoiser")
        check_scheduler(scheduler, "DiffusersDenoiser")
        config = scheduler.config
        self.unet = unet.eval().requires_grad_(False)
        self.prediction_type = config.prediction_type
        self.clip_range = config.clip_sample_range if config.clip_sample else None
        self.direction_unclipped = isinstance(scheduler, DDIMScheduler) and self.clip_range is not None
        self.image_shape = tuple(image_shape)
        self.dim = math.prod(self.image_shape)
        self.max_batch = max_batch
        self.levels = LevelGather()

    def model_output(self, images: torch.Tensor, timesteps: torch.Tensor) -> torch.Tensor:  # [n, C, H, W], [n]
        return self.unet(images, timesteps, return_dict=False)[0]

    def __call__(self, states: torch.Tensor, steps: torch.Tensor, schedule: Schedule) -> torch.Tensor:
        # states [n, d], steps [n] long -> x0_hat [n, d]
        check_states_for_model(states, self.unet, "DiffusersDenoiser")
        a = self.levels(schedule, "signal", steps, states).unsqueeze(-1)  # [n, 1]
        s = self.levels(schedule, "noise", steps, states).unsqueeze(-1)  # [n, 1]
        timesteps = self.levels(schedule, "model_time", steps, states, torch.long)  # [n]
        with torch.inference_mode():
            out = call_in_chunks(self.model_output, self.max_batch, states.reshape(-1, *self.image_shape), timesteps)
        out = out.reshape(states.shape)
        if self.prediction_type == "epsilon":
            x0 = (states - s * out) / a
        elif self.prediction_type == "sample":
            x0 = out
        else:  # v_prediction
            x0 = a * states - s * out
        if self.clip_range is None:
            return x0
        clipped = x0.clamp(-self.clip_range, self.clip_range)
        if not self.direction_unclipped:
            return clipped
        state_coef = self.levels(schedule, "mean_state_coef", steps, states).unsqueeze(-1)  # [n, 1]
        denoised_coef = self.levels(schedule, "mean_denoised_coef", steps, states).unsqueeze(-1)  # [n, 1]
        return clipped + (state_coef * a / denoised_coef) * (clipped - x0)


@dataclass
class DiffusersTarget(Target):
    """A Target from a diffusers UNet; decode() turns samples [n, d] into images [n, C, H, W]."""

    image_shape: tuple = ()  # the UNet's [C, H, W]
    autoencoder: object = None  # AutoencoderKL or VQModel for a latent UNet, else None
    max_batch: int | None = 256

    def decode(self, samples: torch.Tensor) -> torch.Tensor:  # [n, d] -> [n, C', H', W']
        """Pixel UNet: the samples as images. Latent UNet: the autoencoder's decode of
        latents / scaling_factor (+ shift_factor), as LDMPipeline does, in chunks of max_batch."""
        images = samples.reshape(-1, *self.image_shape)
        if self.autoencoder is None:
            return images
        check_states_for_model(images, self.autoencoder, "DiffusersTarget.decode", "samples")
        config = self.autoencoder.config
        latents = images / config.scaling_factor
        if getattr(config, "shift_factor", None) is not None:
            latents = latents + config.shift_factor

        def decode(chunk):
            return self.autoencoder.decode(chunk, return_dict=False)[0]

        with torch.inference_mode():
            return call_in_chunks(decode, self.max_batch, latents)


def check_autoencoder(autoencoder, who: str = "from_diffusers") -> None:
    from diffusers import AutoencoderKL, VQModel

    if not isinstance(autoencoder, (AutoencoderKL, VQModel)):
        raise ValueError(f"{who}: unsupported autoencoder {type(autoencoder).__name__}; supported: AutoencoderKL, "
                         "VQModel")


def diffusers_target(unet, scheduler, num_steps: int, churn: float = 1.0, image_shape=None,
                     max_batch: int | None = 256, autoencoder=None) -> DiffusersTarget:
    """A Target from a user's UNet2DModel and scheduler; image_shape defaults to the UNet's config.
    With an autoencoder the UNet works on its latents and decode() gives images."""
    if autoencoder is not None:
        check_autoencoder(autoencoder, "diffusers_target")
    check_unet(unet)
    if image_shape is None:
        size = unet.config.sample_size
        size = (size, size) if isinstance(size, int) else tuple(size)
        image_shape = (unet.config.in_channels, *size)
    denoiser = DiffusersDenoiser(unet, scheduler, image_shape, max_batch)
    return DiffusersTarget(diffusers_schedule(scheduler, num_steps, churn), denoiser, denoiser.dim,
                           tuple(image_shape), autoencoder, max_batch)


def from_diffusers(pipeline, num_steps: int, churn: float = 1.0, max_batch: int | None = 256) -> DiffusersTarget:
    """The speculative sampler's target for a diffusers pipeline: its `unet` and `scheduler`, and for a
    latent pipeline its `vqvae` or `vae` (target.decode). churn 1: DDPM's posterior step (DDIM's eta = 1)."""
    unet, scheduler = getattr(pipeline, "unet", None), getattr(pipeline, "scheduler", None)
    if unet is None or scheduler is None:
        raise ValueError(f"from_diffusers: unsupported pipeline {type(pipeline).__name__}: it needs a `unet` "
                         "(UNet2DModel) and a `scheduler` (DDPMScheduler or DDIMScheduler), as DDPMPipeline, "
                         "DDIMPipeline and LDMPipeline have")
    autoencoder = getattr(pipeline, "vqvae", None)
    if autoencoder is None:
        autoencoder = getattr(pipeline, "vae", None)
    if autoencoder is not None:
        check_autoencoder(autoencoder)
    check_unet(unet, "from_diffusers")
    check_scheduler(scheduler, "from_diffusers")
    return diffusers_target(unet, scheduler, num_steps, churn, max_batch=max_batch, autoencoder=autoencoder)


def load_pipeline(path):
    """A pipeline saved with save_pretrained, from a local directory (nothing is downloaded)."""
    from pathlib import Path

    from diffusers import DiffusionPipeline

    if not (Path(path) / "model_index.json").is_file():
        raise FileNotFoundError(f"{path}: no model_index.json; save the pipeline with pipeline.save_pretrained(PATH)")
    return DiffusionPipeline.from_pretrained(str(path), local_files_only=True)
