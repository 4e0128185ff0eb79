"""A sweep run into its SQLite store (`run_sweep`): every (configuration, problem) is one unit.

Each (configuration, problem) is one unit of the package's sweep runner (specdiff.eval.runner) and one
row of the SQLite store (specdiff.eval.sweepstore) once it finishes: a rerun skips finished rows, a
killed sweep loses only the problems in flight. Every problem runs alone (batch 1: latency is per
problem) with its own seed (the sweep's seed and the problem's index), the same in every configuration
and on every backend, so that configurations are compared on the same draws and a Ray run writes the
same texts as a local one. The config is read by `specdiff.runs.sweep_config.load_config`.
"""
from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path

from specdiff.lm import precision
from specdiff.runs.sweep_config import load_config


def run_sweep(config_path: str | Path, store_path: str | Path, backend: str = "process", workers: int = 1,
              ray_address: str | None = None, progress: bool = True, on_row=None, dtype: str | None = None) -> dict:
    """Checks the config, opens (or creates) the store, runs every unfinished (configuration, problem)
    and returns a summary. on_row(row) is called after each row is written (tests use it). dtype: overrides
    [run] dtype (a store keeps the dtype it was started with: another one is refused)."""
    from specdiff.eval.runner import execute, pending
    from specdiff.eval.sweepstore import SweepStore

    if workers < 1:
        raise ValueError(f"--workers must be >= 1, got {workers}")
    settings, configs, source = load_config(config_path)
    if dtype is not None:
        settings["run"]["dtype"] = precision.resolve(dtype)
    try:
        ids = problem_ids(settings)
    except (OSError, ValueError) as error:
        raise ValueError(f"{config_path}: the task's problems cannot be loaded: {error}") from None
    store = SweepStore(store_path, settings, source)
    try:
        store.add_configurations(configs)
        units = [ProblemUnit(c["config_id"], i, pid, tuple(sorted(c["params"].items())))
                 for c in configs for i, pid in enumerate(ids)]
        todo = pending(units, {f"{c}/{p}" for c, p in store.done()})

        def on_done(unit, row):
            store.put(row)
            if on_row:
                on_row(row)

        start = time.perf_counter()
        execute(todo, run_problem, settings, on_done, workers=workers, executor=backend, progress=progress,
                unit_desc="problems", group_desc="configurations", cpus_per_worker=settings["run"]["threads"],
                ray_address=ray_address)
        rows = len(store.done())
    finally:
        store.close()
    return {"store": str(store_path), "configurations": len(configs), "problems": len(ids),
            "rows": {"total": len(units), "resumed": len(units) - len(todo), "run": len(todo), "in_store": rows},
            "backend": backend, "workers": workers, "dtype": settings["run"].get("dtype") or "default",
            "wall_seconds": time.perf_counter() - start}


def problem_ids(settings: dict) -> list[str]:
    """A stable id per problem: the task's own id, else the index."""
    _, problems = _problems(settings["task"])
    return [problem.id or f"{index:05d}" for index, problem in enumerate(problems)]


@dataclass(frozen=True)
class ProblemUnit:
    """One (configuration, problem): the runner's unit; the configuration is its group."""

    config_id: str
    problem_index: int
    problem_id: str
    params: tuple  # the RunConfig keyword arguments, as sorted (key, value) pairs (hashable)

    @property
    def key(self) -> str:
        return f"{self.config_id}/{self.problem_id}"

    @property
    def group(self) -> str:
        return self.config_id


# The unit function (runs in the worker processes; per-process caches)

_CACHE = {}


def problem_seed(seed: int, index: int) -> int:
    """The seed of problem `index`: the same in every configuration and on every backend."""
    return int.from_bytes(hashlib.sha1(f"{seed}/{index}".encode()).digest()[:6], "big")


def _problems(task_settings: dict):
    from specdiff.eval.tasks import get_task

    key = json.dumps(task_settings, sort_keys=True)
    if key not in _CACHE:
        task = get_task(task_settings["name"])
        _CACHE[key] = (task, task.load(task_settings["problems"], **task_settings["options"]))
    return _CACHE[key]


def _models(settings: dict, config):
    """The process's ModelCache, warmed up once per (drafter, verifier) pair with a short generation."""
    import torch

    from specdiff.models import ModelCache
    from specdiff.runs import run_config

    if "models" not in _CACHE:
        torch.set_num_threads(settings["run"]["threads"])
        from transformers.utils import logging

        logging.disable_progress_bar()
        device = "cuda" if torch.cuda.is_available() else None  # a Ray worker given a GPU uses it
        _CACHE["models"], _CACHE["warm"] = ModelCache(device=device, dtype=settings["run"].get("dtype")), set()
    cache = _CACHE["models"]
    if (config.drafter, config.verifier) not in _CACHE["warm"]:
        run_config(config, ["1 + 1 =\n"], None, cache, 8)  # a raw prompt: every tokenizer takes it
        _CACHE["warm"].add((config.drafter, config.verifier))
    return cache


def run_problem(unit: ProblemUnit, settings: dict) -> dict:
    """Generates one problem's answer under one configuration and scores it: the store's row."""
    from specdiff.runs import RunConfig, run_config

    params = dict(unit.params)
    config = RunConfig(name=unit.config_id, **params)
    cache = _models(settings, config)
    task, problems = _problems(settings["task"])
    problem = problems[unit.problem_index]
    tokenizer = cache.tokenizer(config.verifier)
    prompt = task.build_prompt(problem, tokenizer, boxed=settings["task"]["boxed"])
    result = run_config(config, [prompt], None, cache, settings["task"]["max_new_tokens"],
                        seed=problem_seed(settings["run"]["seed"], unit.problem_index))
    record = result["records"][0]
    score = task.score([problem], [record["text"]])[0]
    return dict(config_id=unit.config_id, problem_id=unit.problem_id, problem_index=unit.problem_index,
                text=record["text"], correct=int(score.correct), extracted=score.extracted,
                prompt_tokens=len(tokenizer(prompt).input_ids), new_tokens=record["new_tokens"],
                rounds=record.get("rounds"), accepted=record.get("accepted"), draft_s=record.get("draft_s"),
                verify_s=record.get("verify_s"), wall_s=record["wall_s"], exact=int(result["exact"]),
                calls=record.get("calls"))
