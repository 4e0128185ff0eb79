"""The continuous bench's bookkeeping: SQLite results survive a kill, a rerun resumes, no unit is
written twice, and the JSON rows carry what the issue asks for. (Speed itself is never asserted.)"""
import sqlite3
import time

import numpy as np
import pytest

from specdiff.continuous.bench import ALL_METHODS, Unit, grid_units, markdown_table, run_bench, run_to_run_spread, target_checks
from specdiff.eval.store import ResultStore, settings_id

TINY = dict(steps=(4, 6), churns=(0.5,), num_timing=2, fd_samples=24, fd_steps=(4,), ddpm_fd_seeds=2,
            draft_length=3, workers=1, progress=False)


def test_store_writes_each_unit_once(tmp_path):
    store = ResultStore(tmp_path / "r.sqlite")
    assert store.put("sweep", "a", {"x": 1}) is True
    assert store.put("sweep", "a", {"x": 2}) is False  # the first write stands
    assert store.put("other", "a", {"x": 3}) is True
    assert store.done("sweep") == {"a"} and store.load("sweep") == {"a": {"x": 1}}
    assert store.forget("sweep") == 1 and store.done("sweep") == set()
    assert settings_id({"b": 1, "a": 2}) == settings_id({"a": 2, "b": 1}) != settings_id({"a": 2, "b": 2})


def test_grid_runs_the_longest_units_first():
    units = grid_units([50, 1000, 250], [0.25, 0.5], fd_steps=(50, 250), fd_samples=10)
    assert [(u.kind, u.steps, u.first, u.last) for u in units][:2] == [("time", 1000, 0, 25), ("time", 1000, 25, 50)]
    assert sum(u.kind == "time" for u in units) == 6  # 3 K x 2 shares, each covering both churns
    assert {u.key for u in units if u.kind == "fd"} == {Unit("fd", c, k).key for c in (0.25, 0.5) for k in (50, 250)}


class Killed(RuntimeError):
    pass


def test_killed_bench_keeps_finished_units_and_resumes_without_duplicates(tmp_path):
    db = tmp_path / "bench.sqlite"
    finished = []

    def die_after_first(unit, result):
        finished.append(unit.key)
        raise Killed  # as if the process were killed right after the first unit was written

    with pytest.raises(Killed):
        run_bench(db=db, on_unit=die_after_first, **TINY)
    assert len(finished) == 1

    result = run_bench(db=db, **TINY)
    assert result["units"] == {"total": 5, "resumed": 1, "run": 4}  # 2 K x 2 timing shares + 1 FD unit
    again = run_bench(db=db, **TINY)
    assert again["units"] == {"total": 5, "resumed": 5, "run": 0}
    assert again["rows"] == result["rows"]
    (count,) = sqlite3.connect(db).execute("SELECT COUNT(*) FROM results").fetchone()
    assert count == 5

    table = markdown_table(result)
    assert table.count("\n") == 2 + len(result["rows"]) and "| free | 0.5 | 4 | B |" in table
    rows = result["rows"]
    assert [(r["steps"], r["method"]) for r in rows] == [(k, m) for k in (4, 6) for m in ALL_METHODS]
    for row in rows:
        assert row["num_timing_samples"] == 2 and row["speedup"] > 0 and 1.0 <= row["block_efficiency"] <= 4.0
        assert (row["fd"] is not None) == (row["steps"] == 4)  # FD only for K in fd_steps
    ddpm = next(r for r in rows if r["method"] == "DDPM" and r["steps"] == 4)
    assert ddpm["speedup"] == 1.0 and len(ddpm["fd_runs"]) == 2 and ddpm["fd_spread"][0] < min(ddpm["fd_runs"]) <= max(ddpm["fd_runs"]) < ddpm["fd_spread"][1]


def test_changed_settings_are_a_new_sweep(tmp_path):
    db = tmp_path / "bench.sqlite"
    run_bench(db=db, **{**TINY, "steps": (4,), "fd_samples": 0})
    other = run_bench(db=db, **{**TINY, "steps": (4,), "fd_samples": 0, "num_timing": 1})
    assert other["units"]["resumed"] == 0


def test_spread_is_the_prediction_interval_of_one_more_run():
    # mean 5, sd 1, m = 3: t_{0.975, 2} = 4.3027, sqrt(1 + 1/3) = 1.1547
    assert run_to_run_spread([4.0, 6.0, 5.0]) == pytest.approx([5 - 4.9683, 5 + 4.9683], abs=1e-3)
    assert run_to_run_spread([5.0]) == [5.0, 5.0]
    # coverage: from 3 runs of one sampler, the interval holds a 4th run of the same sampler 95% of the
    # time (20,000 trials: binomial sd 0.0015; tolerance 0.01). mean +- 2 sd of 3 runs would hold ~77%.
    rng = np.random.default_rng(0)
    draws = rng.normal(5.0, 1.0, size=(20_000, 4))
    covered = [lo <= row[3] <= hi for row in draws for lo, hi in [run_to_run_spread(list(row[:3]))]]
    assert abs(np.mean(covered) - 0.95) < 0.01


def test_target_checks_read_k250_rows():
    rows = [dict(method=m, steps=250, churn=0.5, speedup=s, block_efficiency=e, fd=f)
            for m, s, e, f in (("DDPM", 1.0, 1.0, 5.0), ("R", 1.2, 4.0, 6.0), ("D", 1.1, 4.1, 9.0), ("B", 1.6, 4.4, 5.5))]
    rows[0]["fd_spread"] = [4.0, 7.0]
    check = target_checks(rows)["churn=0.5"]
    assert check["B_over_R_block_efficiency"] == pytest.approx(1.1) and check["B_speedup_over_DDPM"] == 1.6
    assert check["fd_within_ddpm_spread"] == {"R": True, "D": False, "B": True}


def test_bad_bench_settings_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="model_call"):
        run_bench(db=tmp_path / "x.sqlite", model_call="compiled", **TINY)
    with pytest.raises(ValueError, match="executor"):
        run_bench(db=tmp_path / "x.sqlite", executor="dask", **TINY)


def test_ray_executor_runs_units_and_writes_them_once(tmp_path):
    """One local cluster for both runs, as in a user's session: the bench joins a running cluster
    (connect_ray starts one only when none is running; tests/test_sweep_ray.py covers that start)."""
    pytest.importorskip("ray", reason="Ray is the optional 'sweep' extra")
    from specdiff.eval.runner import connect_ray

    ray, started = connect_ray(2, None)
    try:
        settings = {**TINY, "steps": (4,), "fd_samples": 0, "workers": 2}
        result = run_bench(db=tmp_path / "ray.sqlite", executor="ray", **settings)
        assert result["units"] == {"total": 2, "resumed": 0, "run": 2} and result["config"]["executor"] == "ray"
        assert {r["method"] for r in result["rows"]} == set(ALL_METHODS) and all(r["speedup"] > 0 for r in result["rows"])
        assert run_bench(db=tmp_path / "ray.sqlite", executor="ray", **settings)["units"]["resumed"] == 2
    finally:
        if started:
            ray.shutdown()


def test_one_ddpm_timing_is_the_baseline_of_every_churn(tmp_path):
    """DDPM is timed once per sample index (its churn alternating); R, D, B of both churns are timed
    on the same noise right after it, and each churn's speedups divide by that one DDPM median."""
    result = run_bench(db=tmp_path / "b.sqlite", **{**TINY, "steps": (4,), "churns": (0.25, 0.5), "fd_samples": 0,
                                                     "num_timing": 3})
    rows = result["rows"]
    ddpm = [r for r in rows if r["method"] == "DDPM"]
    assert len(ddpm) == 2 and ddpm[0]["median_seconds"] == ddpm[1]["median_seconds"]
    for row in rows:
        assert row["num_timing_samples"] == 3
        base = next(d for d in ddpm if d["churn"] == row["churn"])
        assert row["speedup"] == pytest.approx(base["median_seconds"] / row["median_seconds"])
    assert result["units"]["total"] == 2  # the 3 samples in 2 shares: 0-2 and 2-3


def test_worker_exits_when_its_parent_is_gone():
    """A bench worker whose parent is not the process that started the bench ends itself (as after a
    kill of the bench): here the recorded parent pid is a wrong one, so it exits within a poll."""
    import subprocess
    import sys

    code = ("import os, time; from specdiff.continuous.bench import exit_with_parent; "
            "exit_with_parent(os.getppid() + 1, poll_seconds=0.05); time.sleep(30)")
    start = time.perf_counter()
    completed = subprocess.run([sys.executable, "-c", code], timeout=25)
    assert completed.returncode == 1 and time.perf_counter() - start < 20
