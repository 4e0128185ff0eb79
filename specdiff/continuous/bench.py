"""`specdiff continuous bench`: the second paper's Table 2 / Tables 5-6 analog on the digits model.

For each churn epsilon and number of steps K, and for R, D, B (Table 1, Free drafter) and DDPM:
- speed, as in the paper: one sample at a time, median wall seconds over >= 50 samples, the four
  methods interleaved sample by sample so that machine load hits them alike; speedup = DDPM / method;
- block efficiency: K / rounds, averaged over samples;
- Frechet distance of a large batch (rows advance independently, one batched target call per
  round) to the 1797 real digits, on the project's classifier features; DDPM is run with several
  seeds to give its run-to-run spread.
"""
from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import torch

METHODS = {  # Table 1
    "R": ("sample", "reflection"),
    "D": ("sample", "decomposition"),
    "B": ("block", "decomposition"),
}


def _time_one(fn) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def bench_config(target, draft_length: int, num_timing: int, fd_samples: int, ddpm_fd_seeds: int, seed: int, classifier, drafter="free") -> list[dict]:
    """All rows for one (K, churn): speed on single samples, quality on a batch."""
    from specdiff.continuous.metrics import digits_frechet_distance
    from specdiff.continuous.sampler import SpeculativeSampler, ddpm_sample, initial_noise

    samplers = {name: SpeculativeSampler(target, drafter, draft_length, *spec) for name, spec in METHODS.items()}
    run = {"DDPM": lambda x, g: ddpm_sample(target, x, g)}
    run.update({name: sampler.sample for name, sampler in samplers.items()})

    # warm-up (tracing, allocator)
    warm = initial_noise(1, target.dim, torch.Generator().manual_seed(seed))
    for fn in run.values():
        fn(warm, torch.Generator().manual_seed(seed))

    seconds = {name: [] for name in run}
    efficiency = {name: [] for name in run}
    for i in range(num_timing):
        noise = initial_noise(1, target.dim, torch.Generator().manual_seed(seed + 1000 + i))
        for name, fn in run.items():
            elapsed, (_, stats) = _time_one(lambda: fn(noise, torch.Generator().manual_seed(seed + 5000 + i)))
            seconds[name].append(elapsed)
            efficiency[name].append(stats.block_efficiency)

    rows = []
    timed = num_timing > 0  # num_timing = 0: quality only
    ddpm_median = statistics.median(seconds["DDPM"]) if timed else None
    for name in run:
        median = statistics.median(seconds[name]) if timed else None
        row = {
            "method": name,
            "steps": target.schedule.num_steps,
            "churn": target.schedule.churn,
            "speedup": ddpm_median / median if timed else None,
            "block_efficiency": statistics.fmean(efficiency[name]) if timed else None,
            "median_seconds": median,
            "num_timing_samples": num_timing,
            "fd": None,
        }
        if fd_samples > 0:
            fds, batch_efficiency = [], []
            for repeat in range(ddpm_fd_seeds if name == "DDPM" else 1):
                noise = initial_noise(fd_samples, target.dim, torch.Generator().manual_seed(seed + 10_000 + repeat))
                samples, stats = run[name](noise, torch.Generator().manual_seed(seed + 20_000 + repeat))
                fds.append(digits_frechet_distance(samples, classifier))
                batch_efficiency.append(stats.block_efficiency)
            row["fd"] = fds[0]
            row["fd_samples"] = fd_samples
            row["block_efficiency_fd_batch"] = statistics.fmean(batch_efficiency)
            if name == "DDPM" and len(fds) > 1:
                row["fd_runs"] = fds
                row["fd_spread"] = [min(fds), max(fds)]
        rows.append(row)
    return rows


def run_bench(
    steps=(50, 100, 250, 500, 1000),
    churns=(0.25, 0.5),
    draft_length: int = 7,
    num_timing: int = 50,
    fd_samples: int = 500,
    fd_max_steps: int = 1000,
    ddpm_fd_seeds: int = 3,
    threads: int = 1,
    seed: int = 0,
    weights: str | None = None,
    progress: bool = True,
    on_row=None,
) -> dict:
    """The whole grid; returns {"rows": [...], "config": {...}, "wall_seconds": ...}."""
    from tqdm import tqdm

    from specdiff.continuous.metrics import load_classifier
    from specdiff.continuous.models import load_digits_target

    torch.set_num_threads(threads)
    classifier = load_classifier()
    start = time.perf_counter()
    rows = []
    grid = [(churn, k) for churn in churns for k in steps]
    for churn, k in tqdm(grid, desc="bench", disable=not progress):
        target = load_digits_target(k, churn, path=weights)
        fd = fd_samples if k <= fd_max_steps else 0
        new_rows = bench_config(target, draft_length, num_timing, fd, ddpm_fd_seeds, seed, classifier)
        rows.extend(new_rows)
        if on_row:
            on_row(new_rows)
    config = dict(steps=list(steps), churns=list(churns), draft_length=draft_length, drafter="free",
                  num_timing=num_timing, fd_samples=fd_samples, fd_max_steps=fd_max_steps,
                  ddpm_fd_seeds=ddpm_fd_seeds, threads=threads, seed=seed)
    return {"rows": rows, "config": config, "wall_seconds": time.perf_counter() - start}


def plot_speedup(result: dict, path: Path | str) -> None:
    """Speedup over DDPM against steps, one line per method and churn (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    styles = {0.25: "-", 0.5: "--"}
    colors = {"R": "C0", "D": "C1", "B": "C2"}
    for churn in sorted({row["churn"] for row in result["rows"]}):
        for method in ("R", "D", "B"):
            rows = sorted((r for r in result["rows"] if r["method"] == method and r["churn"] == churn and r["speedup"] is not None), key=lambda r: r["steps"])
            ax.plot([r["steps"] for r in rows], [r["speedup"] for r in rows], styles.get(churn, ":"), marker="o",
                    color=colors[method], label=f"{method}, churn {churn}")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xscale("log")
    steps = sorted({row["steps"] for row in result["rows"]})
    ax.set_xticks(steps, [str(k) for k in steps])
    ax.minorticks_off()
    ax.set_xlabel("denoising steps K")
    ax.set_ylabel("wall-clock speedup over DDPM (per sample)")
    ax.set_title("digits UNet2DModel, Free drafter, gamma = 7")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def write_json(result: dict, path: Path | str) -> None:
    Path(path).write_text(json.dumps(result, indent=1))
