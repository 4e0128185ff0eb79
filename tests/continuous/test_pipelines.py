"""Users' own diffusers models (issue 15, items 4 and 6): from_diffusers on tiny random-initialised
pipelines, step for step against the scheduler's own `step` at churn 1, whole pipelines against
ddpm_sample, latent decoding, chunked calls, and a clear error for each input the adapter refuses."""
import types

import pytest
import torch

from specdiff.continuous.pipelines import DiffusersDenoiser, diffusers_target, from_diffusers
from specdiff.continuous.sampler import SpeculativeSampler, ddpm_sample
from specdiff.continuous.schedules import transition_mean

diffusers = pytest.importorskip("diffusers")

STEPS = 8


def tiny_unet(channels=1, size=8, **extra):
    torch.manual_seed(0)
    return diffusers.UNet2DModel(
        sample_size=size, in_channels=channels, out_channels=channels, block_out_channels=(8, 16), layers_per_block=1,
        norm_num_groups=4, down_block_types=("DownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "UpBlock2D"),
        add_attention=False, **extra,
    ).eval()


def tiny_autoencoder(kind):
    torch.manual_seed(1)
    blocks = dict(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 2,
                  up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=(8, 16), layers_per_block=1,
                  norm_num_groups=4, sample_size=16)
    if kind == "vq":
        return diffusers.VQModel(latent_channels=3, num_vq_embeddings=16, vq_embed_dim=3, **blocks).eval()
    return diffusers.AutoencoderKL(latent_channels=4, **blocks).eval()


def assert_steps_like_scheduler(target, unet, scheduler, step_options, batch=3):
    """From the same state, each step of the target (mean + sigma z) equals scheduler.step with the same z."""
    shape = (batch, *target.image_shape)
    state = torch.randn(shape, generator=torch.Generator().manual_seed(1))
    for k, t in enumerate(scheduler.timesteps):
        with torch.no_grad():
            out = unet(state, t).sample
        expected = scheduler.step(out, t, state, generator=torch.Generator().manual_seed(100 + k), **step_options)
        flat, steps = state.reshape(batch, -1), torch.full((batch,), k)
        mean = transition_mean(target.schedule, flat, steps, target.denoise(flat, steps))
        noise = torch.randn(shape, generator=torch.Generator().manual_seed(100 + k)).reshape(batch, -1)
        ours = mean + target.schedule.step_std[k].float() * noise
        torch.testing.assert_close(ours, expected.prev_sample.reshape(batch, -1), atol=2e-5, rtol=2e-5)
        state = expected.prev_sample


@pytest.mark.parametrize("prediction_type,clip,options", [
    ("epsilon", True, {}),  # DDIM's direction uses the unclipped noise prediction where clipping bites
    ("v_prediction", False, {"set_alpha_to_one": False}),  # the last step lands on alphas_cumprod[0], sigma > 0
    ("sample", True, {"steps_offset": 1, "timestep_spacing": "trailing"}),
])
def test_ddim_pipeline_steps_exactly_like_its_scheduler_at_eta_1(prediction_type, clip, options):
    scheduler = diffusers.DDIMScheduler(prediction_type=prediction_type, clip_sample=clip, **options)
    unet = tiny_unet()
    pipeline = diffusers.DDIMPipeline(unet=unet, scheduler=scheduler)  # (it keeps a copy of the scheduler)
    target = from_diffusers(pipeline, STEPS, churn=1.0)
    assert_steps_like_scheduler(target, unet, pipeline.scheduler, {"eta": 1.0})


@pytest.mark.parametrize("prediction_type,clip", [("epsilon", True), ("v_prediction", False)])
def test_ddpm_pipeline_steps_exactly_like_its_scheduler(prediction_type, clip):
    scheduler = diffusers.DDPMScheduler(prediction_type=prediction_type, clip_sample=clip)
    unet = tiny_unet()
    target = from_diffusers(diffusers.DDPMPipeline(unet=unet, scheduler=scheduler), STEPS, churn=1.0)
    assert_steps_like_scheduler(target, unet, scheduler, {})


@pytest.mark.parametrize("kind", ["ddpm", "ddim"])
def test_whole_pipeline_equals_ddpm_sample_of_its_target(kind):
    """DDPMPipeline and DDIMPipeline(eta=1) draw the initial noise, then one normal per step, from one
    generator; ddpm_sample on from_diffusers' target with the same generator gives the same images."""
    unet = tiny_unet(channels=3)
    if kind == "ddpm":
        pipeline, options = diffusers.DDPMPipeline(unet=unet, scheduler=diffusers.DDPMScheduler()), {}
    else:
        pipeline, options = diffusers.DDIMPipeline(unet=unet, scheduler=diffusers.DDIMScheduler()), {"eta": 1.0}
    pipeline.set_progress_bar_config(disable=True)
    images = pipeline(batch_size=2, generator=torch.Generator().manual_seed(3), num_inference_steps=STEPS,
                      output_type="np", **options).images  # [2, H, W, C] in [0, 1]
    target = from_diffusers(pipeline, STEPS, churn=1.0)
    generator = torch.Generator().manual_seed(3)
    initial = torch.randn((2, *target.image_shape), generator=generator).reshape(2, -1)
    samples, _ = ddpm_sample(target, initial, generator)
    ours = (target.decode(samples) / 2 + 0.5).clamp(0, 1).permute(0, 2, 3, 1).numpy()
    assert abs(ours - images).max() < 1e-4


@pytest.mark.parametrize("kind", ["vq", "kl"])
def test_latent_pipeline_steps_like_its_scheduler_and_decodes_like_the_autoencoder(kind):
    autoencoder = tiny_autoencoder(kind)
    latent_channels = autoencoder.config.latent_channels
    unet, scheduler = tiny_unet(channels=latent_channels), diffusers.DDIMScheduler()
    if kind == "vq":  # LDMPipeline holds a VQModel as `vqvae`; any object with unet, scheduler and vae will do
        pipeline = diffusers.LDMPipeline(vqvae=autoencoder, unet=unet, scheduler=scheduler)
    else:
        pipeline = types.SimpleNamespace(unet=unet, scheduler=scheduler, vae=autoencoder)
    target = from_diffusers(pipeline, STEPS, churn=1.0)
    assert target.image_shape == (latent_channels, 8, 8) and target.autoencoder is autoencoder
    assert_steps_like_scheduler(target, unet, scheduler, {"eta": 1.0}, batch=2)

    latents = torch.randn(3, target.dim, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        expected = autoencoder.decode(latents.reshape(3, latent_channels, 8, 8) / autoencoder.config.scaling_factor).sample
    target.max_batch = 2  # decoding runs in chunks too: 2 + 1
    decoded = target.decode(latents)
    assert decoded.shape == (3, 3, 16, 16)
    torch.testing.assert_close(decoded, expected, atol=1e-5, rtol=1e-5)


def test_speculative_sampler_runs_on_a_latent_pipeline():
    autoencoder = tiny_autoencoder("vq")
    pipeline = diffusers.LDMPipeline(vqvae=autoencoder, unet=tiny_unet(channels=3), scheduler=diffusers.DDIMScheduler())
    target = from_diffusers(pipeline, STEPS, churn=1.0)
    samples, stats = SpeculativeSampler(target, "free", 3, "block", "decomposition").sample(
        torch.randn(2, target.dim, generator=torch.Generator().manual_seed(0)), torch.Generator().manual_seed(1))
    assert samples.shape == (2, target.dim) and bool(torch.isfinite(samples).all())
    assert 1.0 <= stats.block_efficiency <= 4.0
    assert target.decode(samples).shape == (2, 3, 16, 16)


def test_diffusers_denoiser_chunks_large_calls_without_changing_them():
    """Same rows as one call, up to the last bits of a batch-size-dependent convolution (x0 = the model's output)."""
    scheduler = diffusers.DDPMScheduler(prediction_type="sample", clip_sample=False)
    target = diffusers_target(tiny_unet(), scheduler, num_steps=STEPS)
    states = torch.randn(11, target.dim, generator=torch.Generator().manual_seed(1))
    steps = torch.arange(11) % STEPS
    unet = target.denoiser.unet
    whole = DiffusersDenoiser(unet, scheduler, target.image_shape, max_batch=None)(states, steps, target.schedule)
    chunked = DiffusersDenoiser(unet, scheduler, target.image_shape, max_batch=4)(states, steps, target.schedule)
    torch.testing.assert_close(chunked, whole, atol=1e-5, rtol=1e-5)  # 4 + 4 + 3
    assert not torch.allclose(whole[0], whole[1])  # rows differ: a chunk mix-up would show


# ----------------------------------------------------------------------------- bad input (item 6)


@pytest.mark.parametrize("make_scheduler,message", [
    (lambda: diffusers.EulerDiscreteScheduler(), "unsupported scheduler EulerDiscreteScheduler"),
    (lambda: diffusers.DDPMScheduler(prediction_type="flow"), "unsupported prediction_type 'flow'"),
    (lambda: diffusers.DDIMScheduler(prediction_type="flow"), "DDIMScheduler has unsupported prediction_type"),
    (lambda: diffusers.DDPMScheduler(variance_type="learned_range"), "variance_type 'learned_range'"),
    (lambda: diffusers.DDPMScheduler(thresholding=True), "thresholding"),
    (lambda: diffusers.DDIMScheduler(timestep_spacing="linspace"), "timestep_spacing 'linspace'"),
    (lambda: diffusers.DDIMScheduler(rescale_betas_zero_snr=True, timestep_spacing="trailing"), "zero terminal SNR"),
])
def test_unsupported_schedulers_are_named(make_scheduler, message):
    with pytest.raises(ValueError, match=message):
        from_diffusers(types.SimpleNamespace(unet=tiny_unet(), scheduler=make_scheduler()), STEPS)


def test_unsupported_models_and_pipelines_are_named():
    scheduler = diffusers.DDPMScheduler()
    with pytest.raises(ValueError, match="unsupported pipeline object"):
        from_diffusers(object(), STEPS)
    with pytest.raises(ValueError, match="unsupported denoiser Conv2d"):
        from_diffusers(types.SimpleNamespace(unet=torch.nn.Conv2d(1, 1, 1), scheduler=scheduler), STEPS)
    with pytest.raises(ValueError, match="class-conditional UNet2DModel"):
        diffusers_target(tiny_unet(num_class_embeds=4), scheduler, STEPS)
    with pytest.raises(ValueError, match="unsupported autoencoder Linear"):
        from_diffusers(types.SimpleNamespace(unet=tiny_unet(), scheduler=scheduler, vae=torch.nn.Linear(1, 1)), STEPS)


def test_states_on_another_device_or_dtype_are_a_clear_error_not_a_copy():
    target = diffusers_target(tiny_unet(), diffusers.DDPMScheduler(), STEPS)
    steps = torch.zeros(2, dtype=torch.long)
    with pytest.raises(ValueError, match="the states are on meta but the model is on cpu"):
        target.denoise(torch.empty(2, target.dim, device="meta"), steps)
    with pytest.raises(ValueError, match="the states are torch.float64 but the model's weights are torch.float32"):
        target.denoise(torch.zeros(2, target.dim, dtype=torch.float64), steps)
    latent = from_diffusers(types.SimpleNamespace(unet=tiny_unet(channels=3), scheduler=diffusers.DDIMScheduler(),
                                                  vae=tiny_autoencoder("vq")), STEPS)
    with pytest.raises(ValueError, match="DiffusersTarget.decode: the samples are torch.float64"):
        latent.decode(torch.zeros(1, latent.dim, dtype=torch.float64))


def test_mixture_and_unet_denoiser_refuse_states_on_another_device():
    from specdiff.continuous.models import UNetDenoiser, gaussian_mixture_2d
    from specdiff.continuous.schedules import rectified_flow_schedule

    schedule, steps = rectified_flow_schedule(4, 1.0), torch.zeros(2, dtype=torch.long)
    with pytest.raises(ValueError, match="GaussianMixture: the states are on meta but the mixture is on cpu"):
        gaussian_mixture_2d()(torch.empty(2, 2, device="meta", dtype=torch.float64), steps, schedule)
    with pytest.raises(ValueError, match="UNetDenoiser: the states are torch.float64"):
        UNetDenoiser(tiny_unet(), trace=False)(torch.zeros(2, 64, dtype=torch.float64), steps, schedule)


# ----------------------------------------------------------------------------- the command (item 4)


@pytest.mark.parametrize("kind", ["pixels", "latent"])
def test_sample_command_writes_an_image_grid_from_a_saved_pipeline(kind, tmp_path, capsys):
    import json

    import matplotlib.image

    from specdiff.cli import main

    if kind == "pixels":
        pipeline = diffusers.DDPMPipeline(unet=tiny_unet(channels=3), scheduler=diffusers.DDPMScheduler())
        size = 8
    else:
        pipeline = diffusers.LDMPipeline(vqvae=tiny_autoencoder("vq"), unet=tiny_unet(channels=3),
                                         scheduler=diffusers.DDIMScheduler())
        size = 16
    pipeline.save_pretrained(tmp_path / "pipeline")
    grid = tmp_path / "grid.png"
    assert main(["continuous", "sample", "--diffusers", str(tmp_path / "pipeline"), "--steps", "6", "--churn", "1",
                 "--gamma", "3", "--method", "B", "--num-samples", "3", "--out", str(grid), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["out"] == str(grid) and payload["num_steps"] == 6 and 1.0 <= payload["block_efficiency"] <= 4.0
    image = matplotlib.image.imread(grid)  # one row of 3 images, 2 pixels of padding around each
    assert image.shape[:2] == (size + 4, 3 * size + 8)


def test_sample_command_refuses_a_directory_without_a_pipeline(tmp_path, capsys):
    from specdiff.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["continuous", "sample", "--diffusers", str(tmp_path), "--json"])
    assert exit_info.value.code == 2
    assert "is not a saved diffusers pipeline (no model_index.json in it)" in capsys.readouterr().err
