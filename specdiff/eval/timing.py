"""One median timer for every benchmark (docs/architecture.md, "How speed is measured": warm up, take the median).

    interleaved_median_ms({"ours": f, "theirs": g}, repeats=7)  # {"ours": ms, "theirs": ms}
    median_ms(f, repeats=30, warmup=5)                           # ms
    interleaved_runs({"ours": f, "theirs": g}, repeats=3)       # {"ours": [Run(seconds, cpu_s, value), ...], ...}

The functions of one call are timed round-robin (f, g, f, g, ...), so that load from other
processes falls on all of them alike; ratios of the medians are what benchmarks report. `rotate`
starts each round at a later function (a bench that calls the timer once per prompt rotates the
order from prompt to prompt, so that no function always runs first).
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class Run:
    seconds: float  # wall seconds of one call
    cpu_s: float  # CPU seconds of the process (all threads) during it
    value: object  # what the function returned


def interleaved_runs(functions: dict[str, Callable[[], object]], repeats: int, warmup: int = 1,
                     rotate: int = 0) -> dict[str, list[Run]]:
    """Every timed call of each no-argument function: `warmup` untimed round-robin rounds, then `repeats` timed
    ones, each round in the order of `functions` rotated by `rotate`. Returns {name: [Run per timed round]}."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    names = list(functions)
    shift = rotate % len(names) if names else 0
    order = names[shift:] + names[:shift]
    runs = {name: [] for name in names}
    for round_index in range(warmup + repeats):
        for name in order:
            cpu = time.process_time()
            start = time.perf_counter()
            value = functions[name]()
            seconds = time.perf_counter() - start
            if round_index >= warmup:
                runs[name].append(Run(seconds, time.process_time() - cpu, value))
    return runs


def interleaved_median_ms(functions: dict[str, Callable[[], object]], repeats: int, warmup: int = 1) -> dict[str, float]:
    """Median wall time in milliseconds of each no-argument function, over `repeats` round-robin
    rounds after `warmup` untimed rounds. Returns {name: ms}."""
    runs = interleaved_runs(functions, repeats, warmup)
    return {name: 1e3 * statistics.median(run.seconds for run in values) for name, values in runs.items()}


def median_ms(fn: Callable[[], object], repeats: int = 30, warmup: int = 5) -> float:
    """Median wall time in milliseconds of one no-argument function (interleaved_median_ms of one)."""
    return interleaved_median_ms({"fn": fn}, repeats, warmup)["fn"]
