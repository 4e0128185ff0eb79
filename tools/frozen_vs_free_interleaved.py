"""The Frozen against the Free drafter timed interleaved, sample by sample, in one process (issue 33, item 8).

`specdiff continuous bench --drafters free frozen` times each drafter in its own units, so the two
drafters' seconds come from different minutes of a loaded machine and each speedup is divided by its
own DDPM. Here, for every sample index i and every K, DDPM, then the Free and the Frozen drafter's
methods run back to back on the same noise and seeds (the order of the two drafters alternates with i,
so that a drift in load favours neither). The figures are the raw seconds' medians, the median of the
per-sample ratios Frozen / Free (each pair timed seconds apart) and each drafter's speedup over the
DDPM timed in the same loop.

    nice -n 10 python tools/frozen_vs_free_interleaved.py --steps 250 --methods R D B --num-timing 24 \\
        --out docs/results/continuous/frozen_vs_free_interleaved.json
    nice -n 10 python tools/frozen_vs_free_interleaved.py --steps 1000 --methods R D B --num-timing 12 \\
        --append --out docs/results/continuous/frozen_vs_free_interleaved.json
    python tools/frozen_vs_free_interleaved.py --table docs/results/continuous/frozen_vs_free_interleaved.json --check docs/continuous.md   # or --update: its block of the doc
    python tools/frozen_vs_free_interleaved.py --table docs/results/continuous/frozen_vs_free_interleaved.json

One torch thread, eager UNet (the bench's defaults), churn 1.0 and gamma = 7 (the second paper's
Table 4). Writes the JSON after every K, so that an interrupted run keeps what it measured; `--append`
adds a run to the file's `runs`, each with its own command and settings.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch


def load(steps: int, churn: float, model_call: str):
    from specdiff.continuous.models import load_digits_target

    return load_digits_target(steps, churn, trace=model_call == "traced")


def time_interleaved(steps: int, churn: float, gamma: int, methods, num_timing: int, seed: int,
                     model_call: str) -> dict:
    from specdiff.continuous.bench import METHODS, CallClock
    from specdiff.continuous.models import Target
    from specdiff.continuous.sampler import SpeculativeSampler, ddpm_sample, initial_noise
    from specdiff.continuous.schedules import rectified_flow_schedule

    target = load(steps, churn, model_call)
    clock = CallClock(target.denoiser)
    target = dataclasses.replace(target, denoiser=clock)

    def samplers(t):
        runs = {"DDPM": lambda x, g: ddpm_sample(t, x, g)}
        for drafter in ("free", "frozen"):
            for m in methods:
                method, residual = METHODS[m]
                runs[f"{drafter}/{m}"] = SpeculativeSampler(t, drafter, gamma, method, residual).sample
        return runs

    runs = samplers(target)
    short = Target(rectified_flow_schedule(4 * (gamma + 1), churn), target.denoiser, target.dim)
    warm = initial_noise(1, target.dim, torch.Generator().manual_seed(seed))
    for run in samplers(short).values():  # warm-up of every code path
        run(warm, torch.Generator().manual_seed(seed))
    records = {name: {"seconds": [], "block_efficiency": [], "calls": []} for name in runs}
    for i in range(num_timing):
        noise = initial_noise(1, target.dim, torch.Generator().manual_seed(seed + 1000 + i))
        order = ["DDPM"]
        for m in methods:
            pair = [f"free/{m}", f"frozen/{m}"]
            order += pair if i % 2 == 0 else pair[::-1]
        for name in order:
            clock.reset()
            start = time.perf_counter()
            _, stats = runs[name](noise, torch.Generator().manual_seed(seed + 5000 + i))
            records[name]["seconds"].append(time.perf_counter() - start)
            records[name]["block_efficiency"].append(float(stats.block_efficiency))
            records[name]["calls"].append(clock.calls[0])
        print(f"K={steps} sample {i}: " + ", ".join(f"{n} {records[n]['seconds'][-1]:.3f}s" for n in order),
              file=sys.stderr, flush=True)
    ddpm = statistics.median(records["DDPM"]["seconds"])
    summary = {"ddpm_median_seconds": ddpm}
    for m in methods:
        free, frozen = records[f"free/{m}"], records[f"frozen/{m}"]
        paired = [b / a for a, b in zip(free["seconds"], frozen["seconds"])]
        summary[m] = {
            "free_median_seconds": statistics.median(free["seconds"]),
            "frozen_median_seconds": statistics.median(frozen["seconds"]),
            "frozen_over_free_median_seconds": statistics.median(frozen["seconds"]) / statistics.median(free["seconds"]),
            "frozen_over_free_paired_median": statistics.median(paired),
            "frozen_faster_in_samples": sum(p < 1 for p in paired),
            "samples": len(paired),
            "free_speedup": ddpm / statistics.median(free["seconds"]),
            "frozen_speedup": ddpm / statistics.median(frozen["seconds"]),
            "free_block_efficiency": statistics.fmean(free["block_efficiency"]),
            "frozen_block_efficiency": statistics.fmean(frozen["block_efficiency"]),
        }
    return {"steps": steps, "summary": summary, "records": records}


def median_interval(values: list[float], confidence: float = 0.95) -> tuple[float, float]:
    """A distribution-free interval for the median (order statistics; binomial ranks), at least `confidence`."""
    from math import comb

    xs, n = sorted(values), len(values)
    best = (xs[0], xs[-1])
    for k in range(1, n // 2 + 1):  # order statistics k .. n-k+1 (1-based) cover the median with
        coverage = sum(comb(n, i) for i in range(k, n - k + 1)) / 2 ** n  # P(k <= Binomial(n, 1/2) <= n-k)
        if coverage < confidence:
            break
        best = (xs[k - 1], xs[n - k])
    return best


def markdown(result: dict) -> str:
    """docs/continuous.md's table: per K and method, from every run's per-sample records."""
    lines = ["| K | method | samples | Frozen / Free, median of per-sample ratios [95%] | Frozen faster in | "
             "median s Free / Frozen / DDPM | block efficiency Free / Frozen |", "| --- " * 7 + "|"]
    for run in result["runs"]:
        for entry in run["by_steps"]:
            records = entry["records"]
            for m in run["config"]["methods"]:
                free, frozen = records[f"free/{m}"]["seconds"], records[f"frozen/{m}"]["seconds"]
                paired = [b / a for a, b in zip(free, frozen)]
                low, high = median_interval(paired)
                s = entry["summary"][m]
                lines.append(f"| {entry['steps']} | {m} | {len(paired)} | {statistics.median(paired):.2f} "
                             f"[{low:.2f}, {high:.2f}] | {sum(p < 1 for p in paired)} of {len(paired)} | "
                             f"{s['free_median_seconds']:.2f} / {s['frozen_median_seconds']:.2f} / "
                             f"{entry['summary']['ddpm_median_seconds']:.2f} | {s['free_block_efficiency']:.2f} / "
                             f"{s['frozen_block_efficiency']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, nargs="+", default=[250, 1000])
    parser.add_argument("--churn", type=float, default=1.0)
    parser.add_argument("--gamma", type=int, default=7)
    parser.add_argument("--methods", nargs="+", default=["B", "R"], choices=["R", "D", "B"])
    parser.add_argument("--num-timing", type=int, default=20, help="timed samples per K (each: DDPM + both drafters)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--model-call", choices=["eager", "traced"], default="eager")
    parser.add_argument("--out", type=Path, help="the JSON (written after every K)")
    parser.add_argument("--table", type=Path, help="print the markdown table of this JSON (runs nothing)")
    parser.add_argument("--update", type=Path, help="with --table: write the table into this markdown file's block")
    parser.add_argument("--check", type=Path, help="with --table: compare this markdown file's block (exit 1 if it differs)")
    parser.add_argument("--append", action="store_true",
                        help="add these K to the runs already in --out (each run keeps its own command and settings)")
    args = parser.parse_args(argv)
    if args.table:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import doc_blocks

        return doc_blocks.write_or_check(args.check or args.update, "frozen_vs_free_interleaved.py", markdown(json.loads(args.table.read_text())),
                                         args.check is not None, args.update is not None)
    if args.out is None:
        parser.error("--out is required to run")
    torch.set_num_threads(args.threads)
    config = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    run = {"command": "python tools/frozen_vs_free_interleaved.py " + " ".join(argv or sys.argv[1:]),
           "config": config, "started_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
           "load_average_at_start": os.getloadavg(), "steps": []}
    runs = json.loads(args.out.read_text())["runs"] if args.append and args.out.exists() else []
    runs.append(run)
    start = time.perf_counter()
    for k in args.steps:
        entry = time_interleaved(k, args.churn, args.gamma, args.methods, args.num_timing, args.seed, args.model_call)
        run["steps"].append(k)
        run["wall_seconds"] = time.perf_counter() - start
        run["load_average_at_end"] = os.getloadavg()
        entry["run"] = len(runs) - 1
        run.setdefault("by_steps", []).append(entry)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"runs": runs}, indent=1) + "\n")
    for entry in run["by_steps"]:
        for m in args.methods:
            s = entry["summary"][m]
            print(f"K={entry['steps']} {m}: Free {s['free_median_seconds']:.3f}s, Frozen {s['frozen_median_seconds']:.3f}s, "
                  f"Frozen/Free {s['frozen_over_free_median_seconds']:.3f} (paired median "
                  f"{s['frozen_over_free_paired_median']:.3f}, Frozen faster in {s['frozen_faster_in_samples']}/"
                  f"{s['samples']}); speedups Free {s['free_speedup']:.2f}x, Frozen {s['frozen_speedup']:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
