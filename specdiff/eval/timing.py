"""One median timer for every benchmark (docs/architecture.md, "How speed is measured": warm up, take the median).

    interleaved_median_ms({"ours": f, "theirs": g}, repeats=7)  # {"ours": ms, "theirs": ms}
    median_ms(f, repeats=30, warmup=5)                           # ms

The functions of one call are timed round-robin (f, g, f, g, ...), so that load from other
processes falls on all of them alike; ratios of the medians are what benchmarks report.
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def interleaved_median_ms(functions: dict[str, Callable[[], object]], repeats: int, warmup: int = 1) -> dict[str, float]:
    """Median wall time in milliseconds of each no-argument function, over `repeats` round-robin
    rounds after `warmup` untimed rounds. Returns {name: ms}."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    times = {name: [] for name in functions}
    for round_index in range(warmup + repeats):
        for name, fn in functions.items():
            start = time.perf_counter()
            fn()
            if round_index >= warmup:
                times[name].append(time.perf_counter() - start)
    return {name: 1e3 * statistics.median(values) for name, values in times.items()}


def median_ms(fn: Callable[[], object], repeats: int = 30, warmup: int = 5) -> float:
    """Median wall time in milliseconds of one no-argument function (interleaved_median_ms of one)."""
    return interleaved_median_ms({"fn": fn}, repeats, warmup)["fn"]
