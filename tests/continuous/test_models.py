"""Models and schedules: the analytic mixture's exact score, the diffusers adapter against
DDPMScheduler.step, the reverse step's variance, and the shipped digits weights."""
import math

import pytest
import torch

from specdiff.continuous.models import (
    WEIGHTS_DIR,
    GaussianMixture,
    Target,
    diffusers_target,
    gaussian_mixture_2d,
    gaussian_mixture_64d,
)
from specdiff.continuous.sampler import ddpm_sample, initial_noise
from specdiff.continuous.schedules import rectified_flow_schedule, score_from_denoised, transition_mean


def _log_density(mixture: GaussianMixture, y, a, s):
    """log p_t(y) of the noised mixture, written directly (not through the denoiser)."""
    var = a**2 * mixture.variances + s**2  # [J]
    diff = y.unsqueeze(1) - a * mixture.means  # [n, J, d]
    log_comp = -0.5 * (diff**2).sum(-1) / var - 0.5 * mixture.dim * torch.log(2 * math.pi * var)
    return torch.logsumexp(mixture.log_weights + log_comp, dim=-1)


@pytest.mark.parametrize("mixture", [gaussian_mixture_2d(), gaussian_mixture_64d()], ids=["2d", "64d"])
def test_mixture_denoiser_gives_the_exact_score(mixture):
    schedule = rectified_flow_schedule(10, churn=1.0)
    g = torch.Generator().manual_seed(0)
    for k in (0, 4, 9):
        a, s = schedule.signal[k], schedule.noise[k]
        y = (a * mixture.sample(64, g) + s * torch.randn(64, mixture.dim, generator=g, dtype=torch.float64)).requires_grad_(True)
        autograd_score = torch.autograd.grad(_log_density(mixture, y, a, s).sum(), y)[0]
        steps = torch.full((64,), k)
        score = score_from_denoised(schedule, y.detach(), steps, mixture(y.detach(), steps, schedule))
        assert torch.allclose(score, autograd_score, rtol=1e-6, atol=1e-8)


def test_reverse_step_variance_and_last_step():
    schedule = rectified_flow_schedule(20, churn=0.5)
    assert schedule.step_std[-1] == 0  # the last step is deterministic
    assert bool((schedule.step_std[:-1] > 0).all())
    full = rectified_flow_schedule(20, churn=1.0)
    assert torch.allclose(schedule.step_std, 0.5 * full.step_std)
    # churn 1 is the DDPM posterior: sigma^2 = s_s^2 / s_t^2 (s_t^2 - (a_t / a_s)^2 s_s^2)
    a, s = full.signal, full.noise
    expected = s[1:] ** 2 / s[:-1] ** 2 * (s[:-1] ** 2 - (a[:-1] / a[1:]) ** 2 * s[1:] ** 2)
    assert torch.allclose(full.step_std**2, expected.clamp(min=0))


def _tiny_unet():
    from diffusers import UNet2DModel

    torch.manual_seed(0)
    return UNet2DModel(
        sample_size=8, in_channels=1, out_channels=1, block_out_channels=(8, 16), layers_per_block=1,
        norm_num_groups=4, down_block_types=("DownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "UpBlock2D"),
        add_attention=False,
    ).eval()


@pytest.mark.parametrize("prediction_type,clip", [("epsilon", True), ("v_prediction", False), ("sample", True)])
def test_diffusers_adapter_steps_exactly_like_ddpm_scheduler(prediction_type, clip):
    """churn 1: mean + sigma z of the adapter equals DDPMScheduler.step with the same noise, every step."""
    from diffusers import DDPMScheduler

    unet = _tiny_unet()
    scheduler = DDPMScheduler(num_train_timesteps=1000, prediction_type=prediction_type, clip_sample=clip)
    target = diffusers_target(unet, scheduler, num_steps=10, churn=1.0)
    x = torch.randn(4, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    ours = x.reshape(4, -1).clone()
    for k, t in enumerate(scheduler.timesteps):
        with torch.no_grad():
            out = unet(x, t).sample
        x = scheduler.step(out, t, x, generator=torch.Generator().manual_seed(100 + k)).prev_sample
        steps = torch.full((4,), k)
        mean = transition_mean(target.schedule, ours, steps, target.denoise(ours, steps))
        noise = torch.randn((4, 1, 8, 8), generator=torch.Generator().manual_seed(100 + k)).reshape(4, -1)
        ours = mean + target.schedule.step_std[k].float() * noise if t > 0 else mean
    assert torch.allclose(ours, x.reshape(4, -1), atol=1e-4, rtol=1e-4)


def test_diffusers_adapter_rejects_unsupported_schedulers():
    from diffusers import DDPMScheduler

    with pytest.raises(ValueError, match="variance_type"):
        diffusers_target(_tiny_unet(), DDPMScheduler(variance_type="learned"), num_steps=5)


@pytest.mark.skipif(not (WEIGHTS_DIR / "digits_unet" / "model.safetensors").exists(), reason="no shipped weights")
def test_shipped_digits_model_makes_recognisable_digits():
    from specdiff.continuous.metrics import load_classifier
    from specdiff.continuous.models import load_digits_target

    target = load_digits_target(25, churn=0.5)
    samples, _ = ddpm_sample(target, initial_noise(128, 64, torch.Generator().manual_seed(0)), torch.Generator().manual_seed(1))
    classifier = load_classifier()
    with torch.no_grad():
        confidence = classifier(samples.reshape(-1, 1, 8, 8).clamp(-1, 1)).softmax(-1).amax(-1)
    assert confidence.mean() > 0.7
    noise_confidence = classifier(torch.randn(128, 1, 8, 8).clamp(-1, 1)).softmax(-1).amax(-1)
    assert confidence.mean() > noise_confidence.mean() + 0.1


@pytest.mark.parametrize("trace", [False, True], ids=["eager", "traced"])
def test_unet_denoiser_chunks_large_calls_without_changing_them(trace):
    """A call over max_batch states runs in chunks (cheaper per state on CPU); each row's output is the
    same as in one call, including a last chunk shorter than max_batch."""
    from diffusers import UNet2DModel

    from specdiff.continuous.models import UNetDenoiser, digits_unet_config

    torch.manual_seed(0)
    unet = UNet2DModel.from_config(digits_unet_config())
    schedule = rectified_flow_schedule(10, 0.5)
    states = torch.randn(11, 64, generator=torch.Generator().manual_seed(1))
    steps = torch.arange(11) % 10
    whole = UNetDenoiser(unet, trace=trace, max_batch=64)(states, steps, schedule)
    chunked = UNetDenoiser(unet, trace=trace, max_batch=4)(states, steps, schedule)  # 4 + 4 + 3
    assert torch.allclose(chunked, whole, atol=1e-5)
    assert not torch.allclose(whole[0], whole[1])  # rows differ: a chunk mix-up would show
