"""The sweep runner: units of work, given their unit function, run inline, in a local process pool
or on Ray, with their results handed back to this process one by one (so that only it writes the
store) and progress shown per group and per unit.

A **unit** is any picklable object with a `key` (a str, unique in the sweep) and optionally a
`group` (default: its key). Units of one group run in order on one worker: the language sweep makes
a group of each configuration and a unit of each (configuration, problem), so that a configuration
is measured on one machine and a kill loses only the problems in flight. The **unit function**
`unit_fn(unit, settings) -> result` is a module-level function (workers import it by name); it may
keep per-process caches (loaded models), since a worker process runs many units.

Resuming is the caller's store's business: `pending(units, done)` drops the finished keys, and
`execute` runs the rest. Executors:

- "process": `workers` <= 1 runs inline; otherwise a spawn pool (one clean interpreter per worker,
  no inherited torch threads), each worker ending itself when its parent dies (`exit_with_parent`).
- "ray": one actor per worker on `ray.init(address=...)` (a running cluster), or on a local cluster
  of `workers` CPUs when no address is given (neither as argument nor as RAY_ADDRESS); each actor
  takes `cpus_per_worker` CPUs and one GPU where the cluster has GPUs, and works through whole groups.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Callable, Iterable

EXECUTORS = ("process", "ray")


def cpu_cores() -> int:
    """The cores this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def group_of(unit) -> str:
    return getattr(unit, "group", None) or unit.key


def pending(units: Iterable, done: set) -> list:
    """The units whose key is not in `done` (the finished ones), in their order."""
    return [unit for unit in units if unit.key not in done]


class Progress:
    """Two bars (`specdiff.progress`), groups (e.g. configurations) and units (e.g. problems); one bar
    when every unit is its own group."""

    def __init__(self, units: list, enabled: bool, unit_desc: str, group_desc: str | None):
        from specdiff.progress import progress

        self.left = {}
        for unit in units:
            self.left[group_of(unit)] = self.left.get(group_of(unit), 0) + 1
        nested = group_desc is not None and len(self.left) < len(units)
        self.groups = (progress(total=len(self.left), desc=group_desc, enabled=enabled, position=0, leave=True)
                       if nested else None)
        self.units = progress(total=len(units), desc=unit_desc, enabled=enabled, position=1 if nested else 0,
                              leave=not nested)

    def update(self, unit) -> None:
        self.units.update()
        group = group_of(unit)
        self.left[group] -= 1
        if self.groups is not None and self.left[group] == 0:
            self.groups.update()

    def close(self) -> None:
        self.units.close()
        if self.groups is not None:
            self.groups.close()


def execute(units: list, unit_fn: Callable, settings: dict, on_done: Callable, *, workers: int = 1,
            executor: str = "process", progress: bool = True, unit_desc: str = "units", group_desc: str | None = None,
            cpus_per_worker: int = 1, ray_address: str | None = None) -> None:
    """Runs unit_fn(unit, settings) for every unit and calls on_done(unit, result) here as each finishes.
    An exception in a unit (or in on_done) stops the run; the results already handed over stay."""
    if executor not in EXECUTORS:
        raise ValueError(f"executor must be one of {EXECUTORS}, got {executor!r}")
    bar = Progress(units, progress, unit_desc, group_desc)

    def done(unit, result):
        on_done(unit, result)
        bar.update(unit)

    try:
        if executor == "ray":
            _execute_ray(units, unit_fn, settings, done, workers, cpus_per_worker, ray_address)
        elif workers <= 1:
            for unit in units:
                done(unit, unit_fn(unit, settings))
        else:
            _execute_processes(units, unit_fn, settings, done, workers)
    finally:
        bar.close()


def _execute_processes(units: list, unit_fn: Callable, settings: dict, done: Callable, workers: int) -> None:
    """A spawn pool; the units of a group are submitted together, groups in order."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    context = multiprocessing.get_context("spawn")  # a clean interpreter: no inherited torch threads
    with ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=exit_with_parent,
                             initargs=(os.getpid(),)) as pool:
        futures = {pool.submit(unit_fn, unit, settings): unit for unit in units}
        try:
            for future in as_completed(futures):
                done(futures[future], future.result())
        except BaseException:
            for future in futures:
                future.cancel()
            raise


def exit_with_parent(parent_pid: int, poll_seconds: float = 1.0) -> None:
    """Worker initializer: a daemon thread ends this worker once its parent is gone. A killed sweep must
    not leave workers finishing their units for minutes (the finished units are in the store already;
    a rerun redoes only the unfinished ones)."""
    import threading

    def watch():
        while os.getppid() == parent_pid:
            time.sleep(poll_seconds)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="exit-with-parent").start()


def _import_path() -> str:
    """PYTHONPATH for local Ray workers: the folder of the imported `specdiff` package, then this
    process's sys.path, so that workers import the same specdiff (not another installed copy) and the
    same modules the unit function comes from."""
    folders = [str(Path(__file__).resolve().parents[2])]  # specdiff/eval/runner.py -> the folder above specdiff
    folders += [str(Path(p or os.getcwd()).resolve()) for p in sys.path if Path(p or os.getcwd()).is_dir()]
    return os.pathsep.join(dict.fromkeys(folders))


def connect_ray(workers: int, address: str | None):
    """ray.init on `address` (or RAY_ADDRESS); else a local cluster of `workers` CPUs whose workers import
    this very specdiff. Returns (ray, started_here)."""
    try:
        import ray
    except ImportError:
        raise ValueError("executor 'ray' needs Ray; pip install 'specdiff[sweep]'") from None
    if ray.is_initialized():
        return ray, False
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, log_to_driver=False)
    else:
        ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": _import_path()}})
    return ray, True


class _Worker:
    """A Ray actor: runs units in its own long-lived process (its caches persist between units)."""

    def __init__(self, unit_fn: Callable, settings: dict):
        self.unit_fn, self.settings = unit_fn, settings

    def run(self, unit):
        return self.unit_fn(unit, self.settings)


def _execute_ray(units: list, unit_fn: Callable, settings: dict, done: Callable, workers: int, cpus_per_worker: int,
                 address: str | None) -> None:
    """Whole groups go to actors: each actor runs one unit at a time and takes the next group when its
    own is finished."""
    ray, started_here = connect_ray(max(workers, cpus_per_worker), address)
    try:
        gpus = 1 if ray.cluster_resources().get("GPU", 0) >= 1 else 0
        groups: dict[str, list] = {}
        for unit in units:
            groups.setdefault(group_of(unit), []).append(unit)
        queue = list(groups.values())
        actor_class = ray.remote(num_cpus=cpus_per_worker, num_gpus=gpus)(_Worker)
        actors = [actor_class.remote(unit_fn, settings) for _ in range(max(1, min(workers, len(queue))))]
        work = {actor: [] for actor in actors}
        in_flight = {}

        def feed(actor):
            if not work[actor] and queue:
                work[actor] = list(queue.pop(0))
            if work[actor]:
                unit = work[actor].pop(0)
                in_flight[actor.run.remote(unit)] = (actor, unit)

        for actor in actors:
            feed(actor)
        while in_flight:
            finished, _ = ray.wait(list(in_flight), num_returns=1)
            for ref in finished:
                actor, unit = in_flight.pop(ref)
                done(unit, ray.get(ref))
                feed(actor)
    finally:
        if started_here:
            ray.shutdown()

