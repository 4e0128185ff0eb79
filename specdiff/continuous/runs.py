"""Run glue of the continuous half's command (`specdiff continuous sample|eval`): a target by name or a
saved diffusers pipeline (`make_target`), samples drawn with DDPM or a speculative method (`draw`), and
the exactness and Frechet-distance evaluation of R, D and B against DDPM (`evaluate`).

`StepProgress` wraps a denoiser so that a progress bar follows the slowest row's step.
"""
from __future__ import annotations


def make_target(model: str, steps: int, churn: float, diffusers: str | None = None):
    """The target of `--model` (digits, gmm2d, gmm64d) or of a saved diffusers pipeline at K = `steps`."""
    from specdiff.continuous.models import Target, gaussian_mixture_2d, gaussian_mixture_64d, load_digits_target
    from specdiff.continuous.schedules import rectified_flow_schedule

    if diffusers:
        from specdiff.continuous.pipelines import from_diffusers, load_pipeline

        return from_diffusers(load_pipeline(diffusers), steps, churn)
    if model == "digits":
        return load_digits_target(steps, churn)
    mixture = gaussian_mixture_2d() if model == "gmm2d" else gaussian_mixture_64d()
    return Target(rectified_flow_schedule(steps, churn), mixture, mixture.dim)


def draw(target, method: str, num_samples: int, seed: int, drafter: str = "free", gamma: int = 7,
         temperature: float = 1.0, dtype=None, seed_offset: int = 0):
    """(samples [n, d], stats) of `method` (ddpm, or R/D/B of Table 1); the noise is seeded with
    seed + seed_offset and the draws with seed + 1 + seed_offset. dtype: the noise's (float32 default)."""
    import torch

    from specdiff.continuous.bench import METHODS
    from specdiff.continuous.sampler import SpeculativeSampler, ddpm_sample, initial_noise

    noise = initial_noise(num_samples, target.dim, torch.Generator().manual_seed(seed + seed_offset),
                          dtype or torch.float32)
    generator = torch.Generator().manual_seed(seed + 1 + seed_offset)
    if method == "ddpm":
        return ddpm_sample(target, noise, generator)
    sampler = SpeculativeSampler(target, drafter, gamma, *METHODS[method], temperature=temperature)
    return sampler.sample(noise, generator)


def evaluate(model: str, steps: int, churn: float, num_samples: int, seed: int, drafter: str = "free",
             gamma: int = 7, temperature: float = 1.0) -> dict:
    """R, D and B against DDPM on `model`: block efficiency, the least two-sample p-value over random
    projections, and (digits) the Frechet distance; the JSON of `specdiff continuous eval`."""
    import torch

    from specdiff.continuous import metrics

    target = make_target(model, steps, churn)
    dtype = torch.float32 if model == "digits" else torch.float64
    options = dict(drafter=drafter, gamma=gamma, temperature=temperature, dtype=dtype)
    reference, _ = draw(target, "ddpm", num_samples, seed, seed_offset=100, **options)
    payload = {"model": model, "steps": steps, "churn": churn, "num_samples": num_samples, "methods": {}}
    if model == "digits":
        payload["ddpm_fd"] = metrics.digits_frechet_distance(reference)
    for method in ("R", "D", "B"):
        samples, stats = draw(target, method, num_samples, seed, **options)
        entry = {"block_efficiency": stats.block_efficiency,
                 "min_projection_pvalue_vs_ddpm": min(metrics.projection_two_sample_pvalues(samples, reference))}
        if model == "digits":
            entry["fd"] = metrics.digits_frechet_distance(samples)
        payload["methods"][method] = entry
    return payload


class StepProgress:
    """A denoiser that moves a progress bar to the least step it is called at: the slowest unfinished row."""

    def __init__(self, denoiser, bar):
        self.denoiser, self.bar = denoiser, bar

    def __call__(self, states, steps, schedule):  # states [n, d], steps [n] long
        slowest = int(steps.min())
        if slowest > self.bar.n:
            self.bar.update(slowest - self.bar.n)
        return self.denoiser(states, steps, schedule)
