"""`specdiff continuous bench`: the second paper's Table 2 / Tables 5-6 analog on the digits model,
and its Table 4 (the Frozen against the Free drafter, `drafters=("free", "frozen")`).

For each drafter (Free by default, Sec. 3.3; Frozen, Eq. 10), churn epsilon and number of steps K,
and for R, D, B (Table 1) and DDPM:
- speed, as in the paper: one sample at a time, median wall seconds over >= 50 samples, the methods
  interleaved sample by sample so that machine load hits them alike; speedup = DDPM / method. DDPM's
  cost does not depend on churn (the same K calls and the same arithmetic), so one DDPM sample is
  timed per sample index, its churn alternating over the grid's churns, and it is the baseline of
  R, D and B of every churn, timed right after it on the same noise; each drafter's units time
  their own DDPM, so that a drafter's speedups are ratios measured side by side;
- block efficiency: K / rounds, averaged over the timed samples;
- the cost of a round (DDPM: of a step), in ms averaged over the timed samples: the drafting call (the
  target call a drafter asks for before it drafts: the Frozen drafter's every round, the Free drafter's
  first), the verification call (DDPM: its step's call), and the rest (drafting arithmetic, verification,
  residual, bookkeeping), from a clock around the target model (`CallClock`, told by `ClockedDrafter`
  which calls are drafting calls; exact on the CPU, where a call returns when its work is done);
- Frechet distance of a large batch (rows advance independently, one batched target call per
  round) to the 1797 real digits, on the project's classifier features; DDPM is run with several
  seeds to give its run-to-run spread. By default only at K = 250, where the FD target is: on 2
  cores the FD batches of K = 50 and 100 (~4.5 min of the cores' time) do not fit the 20-minute
  budget together with the timing; `fd_steps` asks for any K.

The grid is cut into units of work: timing per (drafter, K, share of the samples), FD per (drafter,
churn, K); the drafter is part of each unit's key (`Unit.key`), and a key that names none, as in stores
written before the Frozen drafter was benched, is the Free drafter's (`canonical_key`). The
package's sweep runner (specdiff.eval.runner) runs them in parallel worker processes (one torch thread
each), or on Ray actors (`executor="ray"`), and each is written to SQLite when it finishes
(specdiff.eval.store): a killed bench keeps its finished units and a rerun does only the rest.

model_call: how the timed samples call the UNet. "eager" is the stock diffusers forward (what the
diffusers adapter and most users run); "traced" is a TorchScript trace of it (same weights and
maths, about 5x less fixed cost per call). The FD batches always use the trace: they are large
batches, where the per-call cost does not matter and the samples are the same.

Table 4, Proposition 3.4 and its corollary are read off the rows by `continuous.drafter_comparison`.
"""
from __future__ import annotations

import dataclasses
import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from specdiff.eval.runner import cpu_cores, execute, exit_with_parent, pending
from specdiff.eval.statistics import run_to_run_spread

__all__ = ["run_bench", "grid_units", "Unit", "canonical_key", "sweep_name", "CallClock", "markdown_table", "plot_speedup",
           "write_json", "run_to_run_spread", "target_checks", "exit_with_parent", "METHODS", "ALL_METHODS", "DRAFTERS",
           "DEFAULT_DB"]

METHODS = {  # Table 1
    "R": ("sample", "reflection"),
    "D": ("sample", "decomposition"),
    "B": ("block", "decomposition"),
}
ALL_METHODS = ("DDPM", *METHODS)
DRAFTERS = ("free", "frozen")  # Sec. 3.3 and Eq. 10 (drafters.FreeDrafter, drafters.FrozenDrafter)
LEGACY_DRAFTER = "free"  # the drafter of a stored unit whose key names none (stores from before Table 4)
DEFAULT_DB = Path("runs") / "continuous_bench.sqlite"
TIMED_FIELDS = ("seconds", "block_efficiency", "rounds", "call_seconds", "calls", "drafting_call_seconds",
                "drafting_calls")  # per timed sample, in sample order


@dataclass(frozen=True)
class Unit:
    """One unit of work of the grid: kind "fd" (a large batch at one churn) or "time" (per-sample
    speed at every churn of `churns`, for the timed samples first..last-1 of num_timing), of one drafter."""

    kind: str
    churn: float | None
    steps: int
    churns: tuple = ()
    first: int = 0
    last: int = 0
    drafter: str = "free"

    @property
    def key(self) -> str:
        if self.kind == "time":
            churns = ",".join(str(c) for c in self.churns)
            return f"time/drafter={self.drafter}/churns={churns}/K={self.steps}/samples={self.first}-{self.last}"
        return f"{self.kind}/drafter={self.drafter}/churn={self.churn}/K={self.steps}"


def canonical_key(key: str) -> str:
    """A stored unit's key with its drafter named: a key that names none (`time/churns=...`,
    `fd/churn=...`, written before the drafter was part of the key) is the Free drafter's."""
    kind, _, rest = key.partition("/")
    return key if rest.startswith("drafter=") else f"{kind}/drafter={LEGACY_DRAFTER}/{rest}"


class CallClock:
    """A denoiser that times its calls since `reset`: seconds and counts of all calls and of the drafting
    calls (those made while `drafting` is set, by ClockedDrafter). Other attributes (`unet`, `device`:
    what the sampler checks placement with) are the model's."""

    def __init__(self, denoiser):
        self.denoiser = denoiser
        self.reset()

    def reset(self) -> None:
        self.seconds, self.calls = [0.0, 0.0], [0, 0]  # [all calls, drafting calls]
        self.drafting = False

    def __call__(self, states, steps, schedule):  # states [n, d], steps [n] -> x0_hat [n, d]
        start = time.perf_counter()
        denoised = self.denoiser(states, steps, schedule)
        seconds = time.perf_counter() - start
        self.seconds[0] += seconds
        self.calls[0] += 1
        if self.drafting:
            self.seconds[1] += seconds
            self.calls[1] += 1
        return denoised

    def __getattr__(self, name):
        if name == "denoiser":  # not set yet (e.g. while unpickling)
            raise AttributeError(name)
        return getattr(self.denoiser, name)


def clocked_drafter(drafter: str, clock: CallClock):
    """The drafter `drafter` ("free" | "frozen"), telling `clock` which target calls are its drafting calls:
    by the ContinuousDrafter contract the sampler makes them between root_rows and draft (the root call),
    and the round's other call, after draft, is the verification call."""
    from specdiff.continuous.drafters import ContinuousDrafter, make_drafter

    class ClockedDrafter(ContinuousDrafter):
        def __init__(self, inner):
            self.inner, self.name = inner, inner.name

        def start(self, initial):
            self.inner.start(initial)

        def root_rows(self, drafting):
            clock.drafting = True
            return self.inner.root_rows(drafting)

        def draft(self, schedule, states, steps, draft_noise, root_denoised, rows):
            clock.drafting = False
            return self.inner.draft(schedule, states, steps, draft_noise, root_denoised, rows)

        def observe(self, schedule, rows, states, steps, denoised, num_accepted):
            self.inner.observe(schedule, rows, states, steps, denoised, num_accepted)

    return ClockedDrafter(make_drafter(drafter))


def _samplers(target, draft_length: int, drafter: str = "free", clock: CallClock | None = None) -> dict:
    from specdiff.continuous.sampler import SpeculativeSampler, ddpm_sample

    runs = {"DDPM": lambda x, g: ddpm_sample(target, x, g)}
    for name, (method, residual) in METHODS.items():
        kind = drafter if clock is None else clocked_drafter(drafter, clock)
        runs[name] = SpeculativeSampler(target, kind, draft_length, method, residual).sample
    return runs


def time_methods(targets: dict, draft_length: int, samples: range, seed: int, drafter: str = "free") -> dict:
    """Per-sample wall seconds on the same noise and seeds, interleaved sample by sample: for each
    sample index i, DDPM (at churn number i mod the number of churns), then R, D, B at every churn,
    with `drafter`. targets: {churn: Target}. Returns {"DDPM": {...}, "churn=<c>": {"R": {...}, "D": ...,
    "B": ...}}, each {field: [...]} in sample order, for the TIMED_FIELDS: wall seconds, block
    efficiency, rounds (DDPM: K), and the CallClock's seconds and counts of all target calls and of the
    drafting calls."""
    from specdiff.continuous.sampler import initial_noise

    from specdiff.continuous.models import Target
    from specdiff.continuous.schedules import rectified_flow_schedule

    churns = list(targets)
    clocks = {churn: CallClock(target.denoiser) for churn, target in targets.items()}
    targets = {churn: dataclasses.replace(target, denoiser=clocks[churn]) for churn, target in targets.items()}
    runs = {churn: _samplers(target, draft_length, drafter, clocks[churn]) for churn, target in targets.items()}
    warm = initial_noise(1, targets[churns[0]].dim, torch.Generator().manual_seed(seed))
    for churn, target in targets.items():  # warm-up: tracing, allocator, first-call costs of every code path
        short = Target(rectified_flow_schedule(4 * (draft_length + 1), churn), target.denoiser, target.dim)
        for run in _samplers(short, draft_length, drafter, clocks[churn]).values():  # same model, a short schedule
            run(warm, torch.Generator().manual_seed(seed))
    out = {"DDPM": {name: [] for name in TIMED_FIELDS}}
    out.update({f"churn={c}": {m: {name: [] for name in TIMED_FIELDS} for m in METHODS} for c in churns})

    def timed(run, clock, noise, i, record):
        clock.reset()
        start = time.perf_counter()
        _, stats = run(noise, torch.Generator().manual_seed(seed + 5000 + i))
        record["seconds"].append(time.perf_counter() - start)
        record["block_efficiency"].append(stats.block_efficiency)
        record["rounds"].append(float(stats.rounds.double().mean()))
        record["call_seconds"].append(clock.seconds[0])
        record["calls"].append(clock.calls[0])
        record["drafting_call_seconds"].append(clock.seconds[1])
        record["drafting_calls"].append(clock.calls[1])

    for i in samples:
        noise = initial_noise(1, targets[churns[0]].dim, torch.Generator().manual_seed(seed + 1000 + i))
        ddpm_churn = churns[i % len(churns)]
        timed(runs[ddpm_churn]["DDPM"], clocks[ddpm_churn], noise, i, out["DDPM"])
        for churn in churns:
            for name in METHODS:
                timed(runs[churn][name], clocks[churn], noise, i, out[f"churn={churn}"][name])
    return out


def frechet_methods(target, draft_length: int, num_samples: int, ddpm_seeds: int, seed: int, classifier,
                    drafter: str = "free") -> dict:
    """Frechet distance of a batch of num_samples from each method; DDPM with ddpm_seeds seeds (its spread)."""
    from specdiff.continuous.metrics import digits_frechet_distance
    from specdiff.continuous.sampler import initial_noise

    out = {}
    for name, run in _samplers(target, draft_length, drafter).items():
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
        result = time_methods(targets, settings["draft_length"], range(unit.first, unit.last), settings["seed"],
                              unit.drafter)
    else:
        from specdiff.continuous.metrics import load_classifier

        target = load_digits_target(unit.steps, unit.churn, trace=True, path=settings["weights"])
        result = frechet_methods(target, settings["draft_length"], settings["fd_samples"], settings["ddpm_fd_seeds"],
                                 settings["seed"], load_classifier(), unit.drafter)
    return {"methods": result, "unit_seconds": time.perf_counter() - start}


def grid_units(steps, churns, fd_steps, fd_samples: int, num_timing: int = 50, timing_parts: int = 2,
               drafters=("free",)) -> list[Unit]:
    """Every unit of the grid, for each drafter, the longest first (so that parallel workers finish
    together). The timed samples of each K are cut into `timing_parts` shares (one unit each), so that
    K = 1000 alone does not hold one worker while the other runs out of work."""
    parts = max(1, min(timing_parts, num_timing))
    bounds = [round(num_timing * p / parts) for p in range(parts + 1)]
    units = [Unit("time", None, k, tuple(churns), bounds[p], bounds[p + 1], drafter)
             for drafter in drafters for k in steps for p in range(parts)]
    if fd_samples > 0:
        units += [Unit("fd", churn, k, drafter=drafter) for drafter in drafters for churn in churns for k in steps
                  if k in fd_steps]
    order = {drafter: i for i, drafter in enumerate(drafters)}
    return sorted(units, key=lambda u: (-u.steps, u.kind != "time", u.churn or 0, u.first, order[u.drafter]))


def _execute(units: list[Unit], settings: dict, workers: int, on_done, progress: bool, executor: str = "process") -> None:
    """Runs the units with the sweep runner (specdiff.eval.runner) and calls on_done(unit, result) in
    this process as each finishes (so that only this process writes the store). executor: "process"
    (a local pool of `workers` processes; inline when workers is 1) or "ray" (one actor of `threads`
    CPUs per worker, on a local or an existing cluster)."""
    execute(units, run_unit, settings, on_done, workers=workers, executor=executor, progress=progress,
            unit_desc="bench units", cpus_per_worker=settings["threads"])


def merge_timing(results: dict, units: list[Unit], churn: float) -> dict | None:
    """The timed samples of every share of one (drafter, K), in sample order, for one churn:
    {method: {field: [...]}} (DDPM's are shared by all churns). A field that a share lacks (a unit
    stored before the field was recorded) is left out."""
    parts = [results.get(u.key, {}).get("methods") for u in sorted(units, key=lambda u: u.first)]
    if not parts or any(p is None for p in parts):
        return None
    merged = {}
    for name in ALL_METHODS:
        records = [part["DDPM"] if name == "DDPM" else part[f"churn={churn}"][name] for part in parts]
        fields = [f for f in TIMED_FIELDS if all(f in record for record in records)]
        merged[name] = {f: [value for record in records for value in record[f]] for f in fields}
    return merged


def round_costs(record: dict) -> dict | None:
    """Mean ms per round (DDPM: per step) over the timed samples, from one method's merged record: the
    drafting calls, the verification calls (DDPM: its step's call), the rest of the round and the total;
    and the drafting and all target calls per round. None for a record without the clock's fields."""
    if any(f not in record for f in TIMED_FIELDS):
        return None
    per_round = lambda values: statistics.fmean(v / r for v, r in zip(values, record["rounds"]))  # noqa: E731
    verification = [a - b for a, b in zip(record["call_seconds"], record["drafting_call_seconds"])]
    rest = [s - a for s, a in zip(record["seconds"], record["call_seconds"])]
    return {
        "drafting_call_ms": 1e3 * per_round(record["drafting_call_seconds"]),
        "verification_call_ms": 1e3 * per_round(verification),
        "rest_ms": 1e3 * per_round(rest),
        "total_ms": 1e3 * per_round(record["seconds"]),
        "drafting_calls": per_round(record["drafting_calls"]),
        "calls": per_round(record["calls"]),
    }


def assemble_rows(results: dict, steps, churns, units: list[Unit], drafters=("free",)) -> list[dict]:
    """The `rows` of the JSON: one per (drafter, churn, K, method) with speedup, block efficiency, the
    round's costs and FD; `units` is the grid the results came from (its timing shares are merged per K).
    Each drafter's speedups divide by the DDPM timed in its own units (its DDPM row)."""
    rows = []
    for drafter in drafters:
        for churn in churns:
            for k in steps:
                rows += _rows_at(results, drafter, churn, k, units)
    return rows


def _rows_at(results: dict, drafter: str, churn: float, k: int, units: list[Unit]) -> list[dict]:
    shares = [u for u in units if u.kind == "time" and u.steps == k and u.drafter == drafter]
    timing = merge_timing(results, shares, churn)
    quality = results.get(Unit("fd", churn, k, drafter=drafter).key, {}).get("methods")
    ddpm_seconds = statistics.median(timing["DDPM"]["seconds"]) if timing else None
    rows = []
    for name in ALL_METHODS:
        row = {"drafter": drafter, "method": name, "steps": k, "churn": churn, "speedup": None,
               "block_efficiency": None, "fd": None}
        if timing:
            median = statistics.median(timing[name]["seconds"])
            row["speedup"] = ddpm_seconds / median
            row["block_efficiency"] = statistics.fmean(timing[name]["block_efficiency"])
            row["median_seconds"] = median
            row["num_timing_samples"] = len(timing[name]["seconds"])
            row["round_costs"] = round_costs(timing[name])
        if quality:
            row["fd"] = quality[name]["fd"]
            row["block_efficiency_fd_batch"] = quality[name]["block_efficiency_fd_batch"]
            if name == "DDPM":
                row["fd_runs"] = quality[name]["fd_runs"]
                row["fd_spread"] = run_to_run_spread(quality[name]["fd_runs"])
        rows.append(row)
    return rows


def target_checks(rows: list[dict], steps: int = 250, drafter: str = "free") -> dict:
    """The issue's targets at K = 250, per churn, for one drafter's rows (a row without a drafter is
    the Free drafter's): B's block efficiency over R's, B's speedup, FD in DDPM's spread."""
    checks = {}
    rows = [r for r in rows if r.get("drafter", "free") == drafter]
    for churn in sorted({r["churn"] for r in rows}):
        at = {r["method"]: r for r in rows if r["churn"] == churn and r["steps"] == steps}
        if not at or at["B"]["speedup"] is None:
            continue
        entry = {"drafter": drafter, "B_over_R_block_efficiency": at["B"]["block_efficiency"] / at["R"]["block_efficiency"],
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
    drafters=("free",),
) -> dict:
    """The whole grid, for each of `drafters` ("free", "frozen"); returns {"rows": [...], "targets_at_K250":
    {...}, "proposition_3_4": [...] (with the Frozen drafter), "frozen_vs_free": [...] (with both: Table 4
    and the corollary), "config": {...}, "wall_seconds": ...}."""
    from specdiff.continuous.drafter_comparison import compare_drafters, proposition_3_4
    from specdiff.eval.store import ResultStore

    if model_call not in ("eager", "traced"):
        raise ValueError(f"run_bench: model_call must be 'eager' or 'traced', got {model_call!r}")
    if executor not in ("process", "ray"):
        raise ValueError(f"run_bench: executor must be 'process' or 'ray', got {executor!r}")
    if num_timing < 1 or draft_length < 1:
        raise ValueError("run_bench: num_timing and draft_length must be >= 1")
    drafters = check_drafters(drafters)
    weights = str(Path(weights).resolve()) if weights else None
    settings = dict(draft_length=draft_length, num_timing=num_timing, fd_samples=fd_samples,
                    ddpm_fd_seeds=ddpm_fd_seeds, model_call=model_call, threads=threads, seed=seed,
                    weights=weights)
    sweep = sweep_name(settings)
    store = ResultStore(db)
    if fresh:
        store.forget(sweep)
    units = grid_units(steps, churns, fd_steps, fd_samples, num_timing, timing_parts, drafters)
    todo = pending(units, {canonical_key(key) for key in store.done(sweep)})
    workers = workers or min(cpu_cores(), max(1, len(todo)))

    def on_done(unit, result):
        store.put(sweep, unit.key, result)
        if on_unit:
            on_unit(unit, result)

    start = time.perf_counter()
    _execute(todo, settings, workers, on_done, progress, executor)
    results = {canonical_key(key): value for key, value in store.load(sweep).items()}
    store.close()
    rows = assemble_rows(results, steps, churns, units, drafters)
    config = dict(settings, drafters=list(drafters), steps=list(steps), churns=list(churns), fd_steps=sorted(fd_steps),
                  timing_parts=timing_parts, workers=workers, executor=executor, db=str(db), sweep=sweep)
    comparison = {}
    if "frozen" in drafters:
        comparison["proposition_3_4"] = proposition_3_4(rows)
    if {"free", "frozen"} <= set(drafters):
        comparison["frozen_vs_free"] = compare_drafters(rows)
    return {
        "rows": rows,
        "targets_at_K250": target_checks(rows, drafter="free" if "free" in drafters else drafters[0]),
        **comparison,
        "config": config,
        "units": {"total": len(units), "resumed": len(units) - len(todo), "run": len(todo)},
        "wall_seconds": time.perf_counter() - start,
        "unit_seconds": {key: value["unit_seconds"] for key, value in results.items()},
    }


def sweep_name(settings: dict) -> str:
    """The store's name for a grid's settings (draft length, timing and FD sizes, model call, threads, seed,
    weights). It keeps the entry drafter="free" that stores written before the drafter was part of each
    unit's key were named with (it is the drafter of their keys, canonical_key), so that they resume."""
    from specdiff.eval.store import settings_id

    return "continuous-bench/" + settings_id(dict(settings, drafter=LEGACY_DRAFTER))


def check_drafters(drafters) -> tuple:
    """The bench's drafters as a tuple of names, after a ValueError for an empty list, an unknown name or
    a repeated one."""
    drafters = (drafters,) if isinstance(drafters, str) else tuple(drafters)
    if not drafters:
        raise ValueError(f"run_bench: drafters must name at least one of {DRAFTERS}")
    unknown = [d for d in drafters if d not in DRAFTERS]
    if unknown:
        raise ValueError(f"run_bench: unknown drafter {unknown[0]!r}; the bench runs {' and '.join(DRAFTERS)}")
    if len(set(drafters)) < len(drafters):
        raise ValueError(f"run_bench: drafters {list(drafters)} name one drafter twice")
    return drafters


def plot_speedup(result: dict, path: Path | str) -> None:
    """Speedup over DDPM against steps, one line per drafter, method and churn (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    styles = {0.25: "-", 0.5: "--"}
    colors = {"R": "C0", "D": "C1", "B": "C2"}
    markers = {"free": "o", "frozen": "s"}
    drafters = list(dict.fromkeys(row.get("drafter", "free") for row in result["rows"]))
    for drafter in drafters:
        for churn in sorted({row["churn"] for row in result["rows"]}):
            for method in ("R", "D", "B"):
                rows = sorted((r for r in result["rows"] if r.get("drafter", "free") == drafter and r["method"] == method
                               and r["churn"] == churn and r["speedup"] is not None), key=lambda r: r["steps"])
                label = f"{method}, churn {churn}" + (f", {drafter}" if len(drafters) > 1 else "")
                ax.plot([r["steps"] for r in rows], [r["speedup"] for r in rows], styles.get(churn, ":"),
                        marker=markers.get(drafter, "^"), color=colors[method], label=label,
                        alpha=1.0 if drafter == drafters[0] else 0.6)
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xscale("log")
    steps = sorted({row["steps"] for row in result["rows"]})
    ax.set_xticks(steps, [str(k) for k in steps])
    ax.minorticks_off()
    ax.set_xlabel("denoising steps K")
    ax.set_ylabel("wall-clock speedup over DDPM (per sample)")
    config = result.get("config", {})
    names = " and ".join(d.capitalize() for d in drafters)
    ax.set_title(f"digits UNet2DModel ({config.get('model_call', 'eager')}), {names} drafter"
                 f"{'s' if len(drafters) > 1 else ''}, gamma = {config.get('draft_length', 7)}")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def markdown_table(result: dict) -> str:
    """The rows as a markdown table (for docs), speedups and block efficiencies to 2 decimals; then, where
    the result has them, the Table 4 layout, Proposition 3.4 and the corollary (drafter_comparison)."""
    from specdiff.continuous.drafter_comparison import comparison_markdown

    lines = ["| drafter | churn | K | method | speedup | block efficiency | median s / sample | FD |", "| --- " * 8 + "|"]
    fmt = lambda value, digits=2: "" if value is None else f"{value:.{digits}f}"  # noqa: E731
    for row in result["rows"]:
        fd = fmt(row["fd"])
        if row.get("fd_runs"):
            fd += " (runs " + ", ".join(fmt(v) for v in row["fd_runs"]) + ")"
        lines.append(f"| {row.get('drafter', 'free')} | {row['churn']} | {row['steps']} | {row['method']} | "
                     f"{fmt(row['speedup'])} | {fmt(row['block_efficiency'])} | {fmt(row.get('median_seconds'), 3)} | {fd} |")
    return "\n".join(lines) + "\n" + comparison_markdown(result)


def write_json(result: dict, path: Path | str) -> None:
    Path(path).write_text(json.dumps(result, indent=1))
