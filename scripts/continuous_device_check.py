"""The continuous half on an accelerator, end to end: exactness at scale, the cost side of the speedup
on a realistic pixel UNet, and verification round times. Prints JSON (and writes it with --out).

    python scripts/continuous_device_check.py --device cuda --out docs/results/continuous/continuous_device_check.json
    python scripts/continuous_device_check.py --toy     # CPU, seconds: CI runs this so that the script cannot rot

Sections (independent: one that fails records its error and the others still run):
- verify_exactness: gaussian_verify at gamma = 1 (the tests' one-step case, test_gaussian.py), n rows in
  one call: KS p-values of the state of step 1 against the target step N(m^q, sigma^2 Id) along Delta
  and across it, and the acceptance rate against the closed form of Appendix A.2 (z in standard errors).
- sampler_exactness: R, D and B end to end (SpeculativeSampler, Free drafter) on the 2-D Gaussian mixture
  with its parameters and all n >= 1e6 states on the device, against DDPM on the same target: two-sample
  KS p-values over random 1-D projections, block efficiency, wall time, host syncs per round.
- unet_cost: a random-initialised 3 x 64 x 64 UNet2DModel of DDPM's CIFAR-10 architecture (35.7M parameters,
  the size of the paper's pixel models) with a DDPMScheduler, at batch 1 and 64: one model call at b and
  at b (gamma + 1) states, a DDPM step, and a speculative round of B (time per round, time in the model,
  the overhead outside it, host syncs). Random weights make acceptance meaningless: the speedup is
  block efficiency (from the trained models) / cost_ratio (round / DDPM step).
- verify_round_ms: one gaussian_verify round of gamma = 7 for rows x d, and D, B against R at 65,536 x 64.

Host syncs are counted with torch.cuda.set_sync_debug_mode("warn") (null off CUDA). Timings are medians
after warm-ups, synchronised.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
import time
import traceback
import warnings

import torch

from specdiff.continuous.gaussian import acceptance_probability, gaussian_verify
from specdiff.continuous.metrics import projection_two_sample_pvalues
from specdiff.continuous.models import gaussian_mixture_2d
from specdiff.continuous.sampler import SpeculativeSampler, ddpm_sample
from specdiff.continuous.schedules import rectified_flow_schedule
from specdiff.continuous.target import Target

METHODS = {"R": ("sample", "reflection"), "D": ("sample", "decomposition"), "B": ("block", "decomposition")}
FULL = dict(verify_rows=2_000_000, sampler_rows=1_000_000, sampler_steps=10, image_size=64, batches=(1, 64),
            unet_steps=10, round_rows=(1, 4096, 65536), round_dims=(64, 12288), repeats=10)
TOY = dict(verify_rows=20_000, sampler_rows=2_000, sampler_steps=6, image_size=8, batches=(1, 2),
           unet_steps=3, round_rows=(1, 64), round_dims=(64,), repeats=1)


def pixel_unet_config(image_size: int, toy: bool) -> dict:
    """DDPM's CIFAR-10 UNet (google/ddpm-cifar10-32: 35.7M parameters) at image_size; toy: 8/16 channels."""
    if toy:
        return dict(sample_size=image_size, in_channels=3, out_channels=3, block_out_channels=(8, 16),
                    layers_per_block=1, norm_num_groups=4, down_block_types=("DownBlock2D",) * 2,
                    up_block_types=("UpBlock2D",) * 2, add_attention=False)
    return dict(sample_size=image_size, in_channels=3, out_channels=3, block_out_channels=(128, 256, 256, 256),
                layers_per_block=2, down_block_types=("DownBlock2D", "AttnDownBlock2D", "DownBlock2D", "DownBlock2D"),
                up_block_types=("UpBlock2D", "UpBlock2D", "AttnUpBlock2D", "UpBlock2D"))


# ----------------------------------------------------------------------------- measuring


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def median_seconds(function, device: str, repeats: int, warmups: int = 1) -> float:
    """The median wall time of function() over `repeats` runs after `warmups`, synchronised."""
    times = []
    for repeat in range(warmups + repeats):
        synchronize(device)
        start = time.perf_counter()
        function()
        synchronize(device)
        if repeat >= warmups:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def count_host_syncs(function, device: str):
    """(function(), the host syncs it made), counted by torch.cuda.set_sync_debug_mode("warn"); None off CUDA."""
    if not device.startswith("cuda"):
        return function(), None
    synchronize(device)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            result = function()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return result, sum("synchroniz" in str(w.message) for w in caught)


class TimedDenoiser:
    """A denoiser that adds up the synchronised wall time of its calls (the model's share of a run)."""

    def __init__(self, denoiser, device: str):
        self.denoiser, self.device, self.seconds, self.calls = denoiser, device, 0.0, 0

    def __call__(self, states, steps, schedule):  # states [n, d], steps [n] long
        synchronize(self.device)
        start = time.perf_counter()
        out = self.denoiser(states, steps, schedule)
        synchronize(self.device)
        self.seconds += time.perf_counter() - start
        self.calls += 1
        return out


# ----------------------------------------------------------------------------- sections


def verify_exactness(device: str, n: int, d: int = 8, delta_norm: float = 1.2) -> dict:
    from scipy import stats

    out = {"rows": n}
    for name, (method, residual) in METHODS.items():
        g = torch.Generator(device=device).manual_seed(4)
        sigma = torch.tensor([0.5, 0.5], dtype=torch.float64, device=device)
        target_mean = torch.linspace(-1, 1, d, dtype=torch.float64, device=device)
        delta = torch.zeros(d, dtype=torch.float64, device=device)
        delta[0] = delta_norm
        draft_mean = target_mean + sigma[0] * delta
        z = torch.randn(n, 1, d, generator=g, dtype=torch.float64, device=device)
        target_means = torch.stack([target_mean, target_mean + 3.0]).expand(n, 2, d)
        result = gaussian_verify(z, draft_mean.expand(n, 1, d), target_means, sigma, method=method, residual=residual,
                                 generator=g)
        accepted = (result.num_accepted == 1).unsqueeze(-1)
        step_one = torch.where(accepted, delta + z[:, 0], (result.next_state - target_mean) / sigma[0]).cpu()
        measured = accepted.double().mean().item()
        expected = acceptance_probability(delta_norm).item()
        out[name] = {
            "ks_p_along_delta": stats.kstest(step_one[:, 0].numpy(), "norm").pvalue,
            "ks_p_across": stats.kstest(step_one[:, 1].numpy(), "norm").pvalue,
            "acceptance": measured,
            "acceptance_closed_form": expected,
            "acceptance_z": (measured - expected) / math.sqrt(expected * (1 - expected) / n),
        }
    return out


def sampler_exactness(device: str, n: int, steps: int, gamma: int, churn: float = 1.0) -> dict:
    mixture = gaussian_mixture_2d().to(device)
    target = Target(rectified_flow_schedule(steps, churn), mixture, mixture.dim)
    out = {"rows": n, "steps": steps, "churn": churn, "gamma": gamma, "model": "gmm2d, on the device", "methods": {}}

    def draw(method, seed):
        g = torch.Generator(device=device).manual_seed(seed)
        initial = torch.randn(n, mixture.dim, generator=g, dtype=torch.float64, device=device)
        if method == "ddpm":
            return ddpm_sample(target, initial, g)
        return SpeculativeSampler(target, "free", gamma, *METHODS[method]).sample(initial, g)

    synchronize(device)
    start = time.perf_counter()
    reference, _ = draw("ddpm", 0)
    synchronize(device)
    out["ddpm_seconds"] = time.perf_counter() - start
    reference = reference.cpu()
    for seed, method in enumerate(METHODS, start=1):
        synchronize(device)
        start = time.perf_counter()
        (samples, stats), syncs = count_host_syncs(lambda: draw(method, seed), device)
        synchronize(device)
        wall = time.perf_counter() - start
        iterations = int(stats.rounds.max())
        pvalues = projection_two_sample_pvalues(samples.cpu(), reference)
        out["methods"][method] = {"min_projection_ks_p_vs_ddpm": min(pvalues), "projection_ks_p": pvalues,
                                  "block_efficiency": stats.block_efficiency, "rounds": iterations,
                                  "seconds": wall, "host_syncs_per_round": None if syncs is None else syncs / iterations}
    return out


def unet_cost(device: str, image_size: int, batches, steps: int, gamma: int, toy: bool, repeats: int) -> dict:
    from diffusers import DDPMScheduler, UNet2DModel

    from specdiff.continuous.pipelines import diffusers_target

    torch.manual_seed(0)
    unet = UNet2DModel(**pixel_unet_config(image_size, toy)).to(device)
    out = {"parameters": sum(p.numel() for p in unet.parameters()), "image": [3, image_size, image_size],
           "steps": steps, "gamma": gamma, "method": "B", "drafter": "free", "batches": {}}
    for batch in batches:
        target = diffusers_target(unet, DDPMScheduler(), steps, churn=1.0, max_batch=batch * (gamma + 1))
        denoiser = target.denoiser
        g = torch.Generator(device=device).manual_seed(batch)
        initial = torch.randn(batch, target.dim, generator=g, device=device)
        states = {rows: torch.randn(rows, target.dim, generator=g, device=device) for rows in (batch, batch * (gamma + 1))}
        entry = {f"model_call_ms_{rows}_states": 1e3 * median_seconds(
            lambda: denoiser(x, torch.zeros(rows, dtype=torch.long, device=device), target.schedule), device, repeats)
            for rows, x in states.items()}
        sampler = SpeculativeSampler(target, "free", gamma, *METHODS["B"])

        def speculative():
            return sampler.sample(initial, torch.Generator(device=device).manual_seed(1))

        ddpm_seconds = median_seconds(lambda: ddpm_sample(target, initial, torch.Generator(device=device).manual_seed(1)),
                                      device, repeats)
        round_seconds = median_seconds(speculative, device, repeats)
        (_, stats), syncs = count_host_syncs(speculative, device)
        iterations = int(stats.rounds.max())
        timed = TimedDenoiser(denoiser, device)  # a second, instrumented run: the model's share of a round
        timed_sampler = SpeculativeSampler(dataclasses.replace(target, denoiser=timed), "free", gamma, *METHODS["B"])
        synchronize(device)
        start = time.perf_counter()
        timed_sampler.sample(initial, torch.Generator(device=device).manual_seed(1))
        synchronize(device)
        instrumented = time.perf_counter() - start
        entry.update({
            "ddpm_step_ms": 1e3 * ddpm_seconds / steps,
            "round_ms": 1e3 * round_seconds / iterations,
            "rounds": iterations,
            "target_evaluations_per_round": stats.target_evaluations / iterations,
            "model_ms_per_round": 1e3 * timed.seconds / iterations,
            "overhead_ms_per_round": 1e3 * (instrumented - timed.seconds) / iterations,
            "host_syncs_per_round": None if syncs is None else syncs / iterations,
        })
        entry["cost_ratio"] = entry["round_ms"] / entry["ddpm_step_ms"]  # speedup = block efficiency / cost_ratio
        out["batches"][str(batch)] = entry
    return out


def verify_round_ms(device: str, rows_list, dims, repeats: int, gamma: int = 7) -> dict:
    out = {"gamma": gamma, "rounds": []}
    for dim in dims:
        for rows in rows_list:
            if rows * dim > 65536 * 12288 // 4 and dim > 64:  # keep each tensor under ~1 GB
                continue
            entry = {"rows": rows, "dim": dim}
            for name, (method, residual) in METHODS.items():
                g = torch.Generator(device=device).manual_seed(0)
                target_means = torch.randn(rows, gamma + 1, dim, generator=g, device=device)
                draft_means = target_means[:, :gamma] + 0.3 / math.sqrt(dim) * torch.randn(
                    rows, gamma, dim, generator=g, device=device)
                noise = torch.randn(rows, gamma, dim, generator=g, device=device)
                sigma = torch.full((gamma + 1,), 0.2, device=device)
                entry[f"{name}_ms"] = 1e3 * median_seconds(lambda: gaussian_verify(
                    noise, draft_means, target_means, sigma, method=method, residual=residual, generator=g),
                    device, repeats, warmups=2)
            out["rounds"].append(entry)
            print(json.dumps(entry), file=sys.stderr, flush=True)
    largest = max(out["rounds"], key=lambda e: (e["dim"] == 64, e["rows"]))
    out["largest_d64"] = {"rows": largest["rows"], "D_over_R": largest["D_ms"] / largest["R_ms"],
                          "B_over_R": largest["B_ms"] / largest["R_ms"]}
    return out


# ----------------------------------------------------------------------------- main


SECTIONS = ("verify_exactness", "sampler_exactness", "unet_cost", "verify_round_ms")


def run_checks(device: str, toy: bool, sections=SECTIONS, gamma: int = 7, out: str | None = None) -> dict:
    """The report of the sections; with `out`, rewritten there after each section (a run cut short keeps
    what it finished)."""
    size = TOY if toy else FULL
    report = {"device": device, "toy": toy, "torch": torch.__version__,
              "device_name": torch.cuda.get_device_name() if device.startswith("cuda") else "cpu",
              "tf32": {"matmul": torch.backends.cuda.matmul.allow_tf32, "cudnn": torch.backends.cudnn.allow_tf32},
              "command": " ".join(sys.argv), "started_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    checks = {
        "verify_exactness": lambda: verify_exactness(device, size["verify_rows"]),
        "sampler_exactness": lambda: sampler_exactness(device, size["sampler_rows"], size["sampler_steps"], gamma),
        "unet_cost": lambda: unet_cost(device, size["image_size"], size["batches"], size["unet_steps"], gamma, toy,
                                       size["repeats"]),
        "verify_round_ms": lambda: verify_round_ms(device, size["round_rows"], size["round_dims"], size["repeats"]),
    }
    start = time.perf_counter()
    for name in sections:
        began = time.perf_counter()
        try:
            report[name] = checks[name]()
        except Exception as error:  # a GPU run is scarce: keep the other sections' results
            report[name] = {"error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()[-2000:]}
        report[name]["section_seconds"] = time.perf_counter() - began
        print(f"{name}: {report[name]['section_seconds']:.1f} s", file=sys.stderr, flush=True)
        report["wall_seconds"] = time.perf_counter() - start
        if out:
            with open(out, "w") as handle:
                handle.write(json.dumps(report, indent=1) + "\n")
    return report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="default cuda (cpu with --toy)")
    parser.add_argument("--toy", action="store_true", help="toy sizes, seconds on a CPU (CI)")
    parser.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    parser.add_argument("--gamma", type=int, default=7, help="draft length")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--out", help="also write the JSON here (after every section)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = args.device or ("cpu" if args.toy else "cuda")
    print(json.dumps(run_checks(device, args.toy, args.sections, args.gamma, args.out), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
