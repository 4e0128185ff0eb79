"""`specdiff continuous bench`: the second paper's Table 2 / Tables 5-6 analog on the digits model.

For each churn epsilon and number of steps K, and for R, D, B (Table 1, Free drafter) and DDPM:
- speed, as in the paper: one sample at a time, median wall seconds over >= 50 samples, the methods
  interleaved sample by sample so that machine load hits them alike; speedup = DDPM / method. DDPM's
  cost does not depend on churn (the same K calls and the same arithmetic), so one DDPM sample is
  timed per sample index, its churn alternating over the grid's churns, and it is the baseline of
  R, D and B of every churn, timed right after it on the same noise;
- block efficiency: K / rounds, averaged over the timed samples;
- Frechet distance of a large batch (rows advance independently, one batched target call per
  round) to the 1797 real digits, on the project's classifier features; DDPM is run with several
  seeds to give its run-to-run spread. By default only at K = 250, where the FD target is: on 2
  cores the FD batches of K = 50 and 100 (~4.5 min of the cores' time) do not fit the 20-minute
  budget together with the timing; `fd_steps` asks for any K.

The grid is cut into units of work: timing per (K, share of the samples), FD per (churn, K). The
package's sweep runner (specdiff.eval.runner) runs them in parallel worker processes (one torch thread
each), or on Ray actors (`executor="ray"`), and each is written to SQLite when it finishes
(specdiff.eval.store): a killed bench keeps its finished units and a rerun does only the rest.

model_call: how the timed samples call the UNet. "eager" is the stock diffusers forward (what the
diffusers adapter and most users run); "traced" is a TorchScript trace of it (same weights and
maths, about 5x less fixed cost per call). The FD batches always use the trace: they are large
batches, where the per-call cost does not matter and the samples are the same.
"""
from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from specdiff.eval.runner import cpu_cores, execute, exit_with_parent, pending
from specdiff.eval.statistics import run_to_run_spread

__all__ = ["run_bench", "grid_units", "Unit", "markdown_table", "plot_speedup", "write_json", "run_to_run_spread",
           "target_checks", "exit_with_parent", "METHODS", "ALL_METHODS", "DEFAULT_DB"]

METHODS = {  # Table 1
    "R": ("sample", "reflection"),
    "D": ("sample", "decomposition"),
    "B": ("block", "decomposition"),
}
ALL_METHODS = ("DDPM", *METHODS)
DEFAULT_DB = Path("runs") / "continuous_bench.sqlite"


@dataclass(frozen=True)
class Unit:
    """One unit of work of the grid: kind "fd" (a large batch at one churn) or "time" (per-sample
    speed at every churn of `churns`, for the timed samples first..last-1 of num_timing)."""

    kind: str
    churn: float | None
    steps: int
    churns: tuple = ()
    first: int = 0
    last: int = 0

    @property
    def key(self) -> str:
        if self.kind == "time":
            churns = ",".join(str(c) for c in self.churns)
            return f"time/churns={churns}/K={self.steps}/samples={self.first}-{self.last}"
        return f"{self.kind}/churn={self.churn}/K={self.steps}"


def _samplers(target, draft_length: int) -> dict:
    from specdiff.continuous.sampler import SpeculativeSampler, ddpm_sample

    runs = {"DDPM": lambda x, g: ddpm_sample(target, x, g)}
    for name, (method, residual) in METHODS.items():
        runs[name] = SpeculativeSampler(target, "free", draft_length, method, residual).sample
    return runs


def time_methods(targets: dict, draft_length: int, samples: range, seed: int) -> dict:
    """Per-sample wall seconds on the same noise and seeds, interleaved sample by sample: for each
    sample index i, DDPM (at churn number i mod the number of churns), then R, D, B at every churn.
    targets: {churn: Target}. Returns {"DDPM": {...}, "churn=<c>": {"R": {...}, "D": ..., "B": ...}},
    each {"seconds": [...], "block_efficiency": [...]} in sample order."""
    from specdiff.continuous.sampler import initial_noise

    from specdiff.continuous.models import Target
    from specdiff.continuous.schedules import rectified_flow_schedule

    churns = list(targets)
    runs = {churn: _samplers(target, draft_length) for churn, target in targets.items()}
    warm = initial_noise(1, targets[churns[0]].dim, torch.Generator().manual_seed(seed))
    for churn, target in targets.items():  # warm-up: tracing, allocator, first-call costs of every code path
        short = Target(rectified_flow_schedule(4 * (draft_length + 1), churn), target.denoiser, target.dim)
        for run in _samplers(short, draft_length).values():  # same model and samplers, a short schedule
            run(warm, torch.Generator().manual_seed(seed))
    out = {"DDPM": {"seconds": [], "block_efficiency": []}}
    out.update({f"churn={c}": {m: {"seconds": [], "block_efficiency": []} for m in METHODS} for c in churns})

    def timed(run, noise, i, record):
        start = time.perf_counter()
        _, stats = run(noise, torch.Generator().manual_seed(seed + 5000 + i))
        record["seconds"].append(time.perf_counter() - start)
        record["block_efficiency"].append(stats.block_efficiency)

    for i in samples:
        noise = initial_noise(1, targets[churns[0]].dim, torch.Generator().manual_seed(seed + 1000 + i))
        timed(runs[churns[i % len(churns)]]["DDPM"], noise, i, out["DDPM"])
        for churn in churns:
            for name in METHODS:
                timed(runs[churn][name], noise, i, out[f"churn={churn}"][name])
    return out


def frechet_methods(target, draft_length: int, num_samples: int, ddpm_seeds: int, seed: int, classifier) -> dict:
    """Frechet distance of a batch of num_samples from each method; DDPM with ddpm_seeds seeds (its spread)."""
    from specdiff.continuous.metrics import digits_frechet_distance
    from specdiff.continuous.sampler import initial_noise

    out = {}
    for name, run in _samplers(target, draft_length).items():
        fds, efficiency = [], []
        for repeat in range(ddpm_seeds if name == "DDPM" else 1):
            noise = initial_noise(num_samples, target.dim, torch.Generator().manual_seed(seed + 10_000 + repeat))
            samples, stats = run(noise, torch.Generator().manual_seed(seed + 20_000 + repeat))
            fds.append(digits_frechet_distance(samples, classifier))
            efficiency.append(stats.block_efficiency)
        out[name] = {"fd": fds[0], "fd_runs": fds, "block_efficiency_fd_batch": statistics.fmean(efficiency)}
    return out


def run_unit(unit: Unit, settings: dict) -> dict:
    """Does one unit of work (in a worker process) and returns its JSON-able result."""
    from specdiff.continuous.models import load_digits_target

    torch.set_num_threads(settings["threads"])
    start = time.perf_counter()
    if unit.kind == "time":
        trace = settings["model_call"] == "traced"
        targets = {c: load_digits_target(unit.steps, c, trace=trace, path=settings["weights"]) for c in unit.churns}
        result = time_methods(targets, settings["draft_length"], range(unit.first, unit.last), settings["seed"])
    else:
        from specdiff.continuous.metrics import load_classifier

        target = load_digits_target(unit.steps, unit.churn, trace=True, path=settings["weights"])
        result = frechet_methods(target, settings["draft_length"], settings["fd_samples"], settings["ddpm_fd_seeds"],
                                 settings["seed"], load_classifier())
    return {"methods": result, "unit_seconds": time.perf_counter() - start}


def grid_units(steps, churns, fd_steps, fd_samples: int, num_timing: int = 50, timing_parts: int = 2) -> list[Unit]:
    """Every unit of the grid, the longest first (so that parallel workers finish together). The timed
    samples of each K are cut into `timing_parts` shares (one unit each), so that K = 1000 alone does
    not hold one worker while the other runs out of work."""
    parts = max(1, min(timing_parts, num_timing))
    bounds = [round(num_timing * p / parts) for p in range(parts + 1)]
    units = [Unit("time", None, k, tuple(churns), bounds[p], bounds[p + 1]) for k in steps for p in range(parts)]
    if fd_samples > 0:
        units += [Unit("fd", churn, k) for churn in churns for k in steps if k in fd_steps]
    return sorted(units, key=lambda u: (-u.steps, u.kind != "time", u.churn or 0, u.first))


def _execute(units: list[Unit], settings: dict, workers: int, on_done, progress: bool, executor: str = "process") -> None:
    """Runs the units with the sweep runner (specdiff.eval.runner) and calls on_done(unit, result) in
    this process as each finishes (so that only this process writes the store). executor: "process"
    (a local pool of `workers` processes; inline when workers is 1) or "ray" (one actor of `threads`
    CPUs per worker, on a local or an existing cluster)."""
    execute(units, run_unit, settings, on_done, workers=workers, executor=executor, progress=progress,
            unit_desc="bench units", cpus_per_worker=settings["threads"])


def merge_timing(results: dict, units: list[Unit], churn: float) -> dict | None:
    """The timed samples of every share of one K, in sample order, for one churn:
    {method: {"seconds": [...], "block_efficiency": [...]}} (DDPM's are shared by all churns)."""
    parts = [results.get(u.key, {}).get("methods") for u in sorted(units, key=lambda u: u.first)]
    if not parts or any(p is None for p in parts):
        return None
    merged = {name: {"seconds": [], "block_efficiency": []} for name in ALL_METHODS}
    for part in parts:
        for name in ALL_METHODS:
            record = part["DDPM"] if name == "DDPM" else part[f"churn={churn}"][name]
            merged[name]["seconds"] += record["seconds"]
            merged[name]["block_efficiency"] += record["block_efficiency"]
    return merged


def assemble_rows(results: dict, steps, churns, units: list[Unit]) -> list[dict]:
    """The `rows` of the JSON: one per (churn, K, method) with speedup, block efficiency and FD;
    `units` is the grid the results came from (its timing shares are merged per K)."""
    rows = []
    for churn in churns:
        for k in steps:
            timing = merge_timing(results, [u for u in units if u.kind == "time" and u.steps == k], churn)
            quality = results.get(Unit("fd", churn, k).key, {}).get("methods")
            ddpm_seconds = statistics.median(timing["DDPM"]["seconds"]) if timing else None
            for name in ALL_METHODS:
                row = {"method": name, "steps": k, "churn": churn, "speedup": None, "block_efficiency": None, "fd": None}
                if timing:
                    median = statistics.median(timing[name]["seconds"])
                    row["speedup"] = ddpm_seconds / median
                    row["block_efficiency"] = statistics.fmean(timing[name]["block_efficiency"])
                    row["median_seconds"] = median
                    row["num_timing_samples"] = len(timing[name]["seconds"])
                if quality:
                    row["fd"] = quality[name]["fd"]
                    row["block_efficiency_fd_batch"] = quality[name]["block_efficiency_fd_batch"]
                    if name == "DDPM":
                        row["fd_runs"] = quality[name]["fd_runs"]
                        row["fd_spread"] = run_to_run_spread(quality[name]["fd_runs"])
                rows.append(row)
    return rows


def target_checks(rows: list[dict], steps: int = 250) -> dict:
    """The issue's targets at K = 250, per churn: B's block efficiency over R's, B's speedup, FD in DDPM's spread."""
    checks = {}
    for churn in sorted({r["churn"] for r in rows}):
        at = {r["method"]: r for r in rows if r["churn"] == churn and r["steps"] == steps}
        if not at or at["B"]["speedup"] is None:
            continue
        entry = {"B_over_R_block_efficiency": at["B"]["block_efficiency"] / at["R"]["block_efficiency"],
                 "B_speedup_over_DDPM": at["B"]["speedup"]}
        spread = at["DDPM"].get("fd_spread")
        if spread:
            entry["fd_within_ddpm_spread"] = {m: spread[0] <= at[m]["fd"] <= spread[1] for m in METHODS}
            entry["fd"] = {m: at[m]["fd"] for m in ALL_METHODS}
            entry["ddpm_fd_spread"] = spread
        checks[f"churn={churn}"] = entry
    return checks


def run_bench(
    steps=(50, 100, 250, 500, 1000),
    churns=(0.25, 0.5),
    draft_length: int = 7,
    num_timing: int = 50,
    fd_samples: int = 256,
    fd_steps=(250,),
    ddpm_fd_seeds: int = 3,
    model_call: str = "eager",
    workers: int | None = None,
    threads: int = 1,
    seed: int = 0,
    weights: str | None = None,
    db: Path | str = DEFAULT_DB,
    fresh: bool = False,
    executor: str = "process",
    progress: bool = True,
    on_unit=None,
    timing_parts: int = 2,
) -> dict:
    """The whole grid; returns {"rows": [...], "targets_at_K250": {...}, "config": {...}, "wall_seconds": ...}."""
    from specdiff.eval.store import ResultStore, settings_id

    if model_call not in ("eager", "traced"):
        raise ValueError(f"run_bench: model_call must be 'eager' or 'traced', got {model_call!r}")
    if executor not in ("process", "ray"):
        raise ValueError(f"run_bench: executor must be 'process' or 'ray', got {executor!r}")
    if num_timing < 1 or draft_length < 1:
        raise ValueError("run_bench: num_timing and draft_length must be >= 1")
    weights = str(Path(weights).resolve()) if weights else None
    settings = dict(draft_length=draft_length, num_timing=num_timing, fd_samples=fd_samples,
                    ddpm_fd_seeds=ddpm_fd_seeds, model_call=model_call, threads=threads, seed=seed,
                    weights=weights, drafter="free")
    sweep = "continuous-bench/" + settings_id(settings)
    store = ResultStore(db)
    if fresh:
        store.forget(sweep)
    units = grid_units(steps, churns, fd_steps, fd_samples, num_timing, timing_parts)
    todo = pending(units, store.done(sweep))
    workers = workers or min(cpu_cores(), max(1, len(todo)))

    def on_done(unit, result):
        store.put(sweep, unit.key, result)
        if on_unit:
            on_unit(unit, result)

    start = time.perf_counter()
    _execute(todo, settings, workers, on_done, progress, executor)
    results = store.load(sweep)
    store.close()
    rows = assemble_rows(results, steps, churns, units)
    config = dict(settings, steps=list(steps), churns=list(churns), fd_steps=sorted(fd_steps), timing_parts=timing_parts, workers=workers,
                  executor=executor, db=str(db), sweep=sweep)
    return {
        "rows": rows,
        "targets_at_K250": target_checks(rows),
        "config": config,
        "units": {"total": len(units), "resumed": len(units) - len(todo), "run": len(todo)},
        "wall_seconds": time.perf_counter() - start,
        "unit_seconds": {key: value["unit_seconds"] for key, value in results.items()},
    }


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
    call = result.get("config", {}).get("model_call", "eager")
    ax.set_title(f"digits UNet2DModel ({call}), Free drafter, gamma = 7")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def markdown_table(result: dict) -> str:
    """The rows as a markdown table (for docs), speedups and block efficiencies to 2 decimals."""
    lines = ["| churn | K | method | speedup | block efficiency | median s / sample | FD |", "| --- " * 7 + "|"]
    fmt = lambda value, digits=2: "" if value is None else f"{value:.{digits}f}"  # noqa: E731
    for row in result["rows"]:
        fd = fmt(row["fd"])
        if row.get("fd_runs"):
            fd += " (runs " + ", ".join(fmt(v) for v in row["fd_runs"]) + ")"
        lines.append(f"| {row['churn']} | {row['steps']} | {row['method']} | {fmt(row['speedup'])} | "
                     f"{fmt(row['block_efficiency'])} | {fmt(row.get('median_seconds'), 3)} | {fd} |")
    return "\n".join(lines) + "\n"


def write_json(result: dict, path: Path | str) -> None:
    Path(path).write_text(json.dumps(result, indent=1))
