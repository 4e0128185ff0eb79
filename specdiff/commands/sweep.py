"""`specdiff sweep CONFIG.toml --store PATH`: every combination of the config's [grid] lists is one
generation configuration (diffusion effort K or tau, leniency rule and its lam / eps / delta, method,
proposal, block size), run on the task's problems one at a time (batch 1: latency is per problem).

Each (configuration, problem) is one unit of the package's sweep runner (specdiff.eval.runner) and one
row of the SQLite store (specdiff.eval.sweepstore) once it finishes: a rerun skips finished rows, a
killed sweep loses only the problems in flight. Every problem has its own seed (the sweep's seed and
the problem's index), the same in every configuration and on every backend, so that configurations
are compared on the same draws and a Ray run writes the same texts as a local one.

The config is checked in full before anything runs (specdiff.eval.sweepconfig): an unknown section,
key, model, task or rule, or a grid value out of range, is an error naming its line. docs/frontier.md
describes the keys.
"""
from __future__ import annotations

import hashlib
import inspect
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from specdiff.runs import RULES
from specdiff.eval.sweepconfig import ConfigText, Field, check_config, check_section, expand_grid

LENIENCY_KEYS = {"linear": "lam", "tv": "eps", "cactus": "delta", "typical": "typical_epsilon"}  # rule -> its axis
SUPPORTS = ("truncated", "untruncated")
METHODS = ("token", "block")
PROPOSALS = ("marginal", "point_mass")

SCHEMA = {
    "models": {
        "drafter": Field("str", "a zoo name, lookup (prompt lookup) or a local checkpoint directory", required=True),
        "verifier": Field("str", "a zoo name, a fetched name (specdiff models list) or a local checkpoint directory",
                          required=True),
    },
    "task": {
        "name": Field("str", "arith, gsm8k, humaneval, gpqa, or prompts (your JSONL file: [task.options] path)",
                      required=True),
        "problems": Field("int", "how many problems, the first of the task", required=True, low=1),
        "max_new_tokens": Field("int", "generation limit per problem", default=96, low=1, high=100_000),
        "boxed": Field("bool", "ask for the answer in \\boxed{}", default=False),
    },
    "task.options": None,  # the task's own load() options (split, path, seed...), checked against its signature
    "run": {
        "seed": Field("int", "seed of every problem's draws", default=0, low=0),
        "threads": Field("int", "torch threads per worker", default=1, low=1, high=256),
    },
    "grid": {
        "steps": Field("int", "diffusion effort: K denoising steps per round", many=True, low=1, high=4096),
        "threshold": Field("float", "diffusion effort: confidence threshold tau", many=True, low=0, low_open=True,
                           high=1),
        "rule": Field("str", "leniency rule", many=True, choices=RULES, default=["lossless"]),
        "lam": Field("float", "Linear leniency lambda", many=True, low=0, high=1),
        "eps": Field("float", "TV budget epsilon", many=True, low=0, high=1),
        "delta": Field("float", "Cactus KL budget delta", many=True, low=0),
        "typical_epsilon": Field("float", "Typical's epsilon: accept y where p(y) > min(eps, delta exp(-H))",
                                 many=True, low=0, high=1),
        "typical_delta": Field("float", "Typical's delta (default sqrt(epsilon))", many=True, low=0),
        "gate_top": Field("float", "Gated: the rule only where the verifier's top-1 mass <= this (1: no gate)",
                          many=True, low=0, high=1),
        "gate_entropy": Field("float", "Gated: the rule only where the verifier's entropy >= this, nats (0: no gate)",
                              many=True, low=0),
        "support": Field("str", "drafts measured after top-p/top-k (truncated) or before", many=True,
                         choices=SUPPORTS, default=["truncated"]),
        "method": Field("str", "verification", many=True, choices=METHODS, default=["token"]),
        "proposal": Field("str", "proposal mode", many=True, choices=PROPOSALS, default=["marginal"]),
        "block_size": Field("int", "draft length B", many=True, low=1, high=4096, default=[8]),
        "controller": Field("str", "run-time controller of effort and draft length ('none': fixed K and B; "
                                   "docs/adaptive.md)", many=True, default=["none"]),
    },
}
TIMING_COLUMNS = ("wall_s", "draft_s", "verify_s", "written")


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


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "sweep", help="run a grid of (effort, leniency, ...) configurations into a resumable SQLite store",
        description="Runs every combination of CONFIG.toml's [grid] on the task's problems; one row per "
                    "(configuration, problem) in the store. A rerun skips finished rows. See docs/frontier.md.")
    p.add_argument("config", metavar="CONFIG.toml", help="the sweep's configuration")
    p.add_argument("--store", required=True, metavar="PATH", help="SQLite file of the results (created if missing)")
    p.add_argument("--backend", choices=("process", "ray"), default="process",
                   help="local processes, or Ray actors (pip install 'specdiff[sweep]')")
    p.add_argument("--workers", type=int, default=1, help="parallel workers (default 1: timings without contention)")
    p.add_argument("--ray-address", default=None,
                   help="a running Ray cluster (ray.init(address=...)); default RAY_ADDRESS, else a local one")
    p.add_argument("--check", action="store_true", help="check the config and print the configurations; run nothing")
    p.add_argument("--json", action="store_true", help="print the summary as JSON (and no progress bars)")
    p.set_defaults(handler=run)


def load_config(path: str | Path, text: str | None = None) -> tuple[dict, list[dict], str]:
    """(settings, configurations, source text) of a sweep config; ConfigError naming the line otherwise."""
    config = ConfigText(path, text)
    raw_subgrids = _pop_subgrids(config)
    checked = check_config(config, SCHEMA, required_sections=("models", "task", "grid"))
    models, task = checked["models"], checked["task"]
    for role in ("drafter", "verifier"):
        _check_model(config, role, models[role])
    _check_task(config, task, checked["task.options"])
    try:
        from specdiff.runs.kinds import check_pair

        check_pair(models["drafter"], models["verifier"])
    except ValueError as error:
        raise config.error("models", "drafter", f"[models] drafter: {error}") from None
    autoregressive = _drafter_kind(models["drafter"]).ignores_effort  # AR, lookup: no diffusion effort
    grids = {"grid": _checked_grid(config, "grid", checked["grid"], autoregressive, models["drafter"])}
    if raw_subgrids:  # [grid]'s own keys are the sub-grids' defaults, and only the sub-grids are run
        shared = config.data["grid"]
        grids = {f"grid.{name}": _checked_grid(config, f"grid.{name}", check_section(
                     config, f"grid.{name}", {**shared, **values}, SCHEMA["grid"]), autoregressive, models["drafter"])
                 for name, values in raw_subgrids.items()}
    grid = grids["grid"] if not raw_subgrids else dict(
        {key: value for key, value in checked["grid"].items() if key in shared},
        grids={section.removeprefix("grid."): values for section, values in grids.items()})
    settings = {"models": models, "task": dict(task, options=checked["task.options"]), "run": checked["run"],
                "grid": grid}
    configs, seen = [], set()
    for section, values in grids.items():  # the union of the sub-grids, each configuration once
        for c in configurations(config, models, values, section):
            if c["config_id"] not in seen:
                seen.add(c["config_id"])
                configs.append(c)
    return settings, configs, config.text


def _pop_subgrids(config: ConfigText) -> dict[str, dict]:
    """[grid.NAME] tables, taken out of [grid]: each is a grid of its own (the union is run), with
    [grid]'s plain keys as its defaults. Lets one sweep cross a rule only with the gates it needs."""
    grid = config.data.get("grid")
    if not isinstance(grid, dict):
        return {}
    subgrids = {name: value for name, value in grid.items() if isinstance(value, dict)}
    for name in subgrids:
        del grid[name]
    return subgrids


def _checked_grid(config: ConfigText, section: str, values: dict, autoregressive: bool, drafter: str) -> dict:
    grid = {key: value for key, value in values.items() if value is not None}
    if autoregressive and (len(grid.get("steps", [1])) > 1 or "threshold" in grid):
        raise config.error(section, "steps" if "steps" in grid else "threshold",
                           f"the drafter {drafter!r} is autoregressive or prompt lookup: diffusion effort "
                           "(steps, threshold) does not apply to it")
    return grid


def _check_model(config: ConfigText, role: str, name: str) -> None:
    from specdiff import zoo
    from specdiff.zoo import distilled
    from specdiff.checkpoints import FETCHABLE, fetched_dir
    from specdiff.models import LOOKUP

    if role == "drafter" and (name == LOOKUP or distilled.folder(name) is not None):
        return
    if name in FETCHABLE:
        if fetched_dir(name) is None:
            raise config.error("models", role, f"[models] {role}: {name!r} is not fetched yet: run "
                                               f"`specdiff models fetch {name}`")
        return
    if name not in zoo.MODEL_NAMES and not (Path(name) / "config.json").is_file():
        raise config.error("models", role, f"[models] {role}: unknown model {name!r}: not a zoo name "
                                           f"({', '.join(zoo.MODEL_NAMES)}), a fetched name ({', '.join(FETCHABLE)}), "
                                           f"{LOOKUP!r} (drafter) nor a local directory with a config.json")


def _drafter_kind(name: str):
    """The registered kind of a sweep's drafter (`specdiff.models.resolve`)."""
    from specdiff.models import kind_spec

    return kind_spec(name)


def _check_task(config: ConfigText, task: dict, options: dict) -> None:
    from specdiff.eval.tasks import TASKS

    if task["name"] not in TASKS:
        raise config.error("task", "name", f"[task] name: unknown task {task['name']!r}; known tasks: "
                                           f"{', '.join(sorted(TASKS))}")
    accepted = [p for p in inspect.signature(TASKS[task["name"]].load).parameters if p != "n"]
    for key in options:
        if key not in accepted:
            raise config.error("task.options", key, f"[task.options] {key}: the task {task['name']!r} takes no "
                                                     f"option {key!r}; it takes {', '.join(accepted) or 'none'}")


def configurations(config: ConfigText, models: dict, grid: dict, section: str = "grid") -> list[dict]:
    """Every grid point as {config_id, name, effort, params}: each rule with its own leniency list,
    times the efforts (each K, then each tau), methods, proposals and block sizes."""
    from specdiff.engine.controllers import parse_controller
    from specdiff.eval.store import settings_id

    for rule, key in LENIENCY_KEYS.items():
        if key in grid and rule not in grid["rule"]:
            raise config.error(section, key, f"[{section}] {key} is the leniency of rule {rule!r}, which "
                                             f"[{section}] rule does not list ({grid['rule']})")
        if rule in grid["rule"] and key not in grid:
            raise config.error(section, "rule", f"[{section}] rule {rule!r} needs its leniency list {key} = [...]")
    efforts = [dict(steps=k, threshold=None) for k in grid.get("steps", [] if "threshold" in grid else [1])]
    efforts += [dict(steps=1, threshold=t) for t in grid.get("threshold", [])]
    out = []
    if "typical_delta" in grid and "typical" not in grid["rule"]:
        raise config.error(section, "typical_delta", f"[{section}] typical_delta needs rule 'typical' in "
                                                     f"[{section}] rule")
    for rule in grid["rule"]:
        lenient = rule != "lossless"  # gates and support apply to lenient rules (and support to lossless too)
        axes = dict(effort=efforts, leniency=grid.get(LENIENCY_KEYS.get(rule), [0.0]), method=grid["method"],
                    proposal=grid["proposal"], block_size=grid["block_size"],
                    typical_delta=grid.get("typical_delta", [None]) if rule == "typical" else [None],
                    gate_top=grid.get("gate_top", [1.0]) if lenient else [1.0],
                    gate_entropy=grid.get("gate_entropy", [0.0]) if lenient else [0.0],
                    support=grid["support"], controller=grid.get("controller", ["none"]))
        for point in expand_grid(axes):
            try:  # 'none' is left out of the id, so that older stores keep theirs
                controller = point.pop("controller").strip()
                controller = controller if parse_controller(controller) is not None else None
            except ValueError as error:
                raise config.error("grid", "controller", str(error)) from None
            params = dict(drafter=models["drafter"], verifier=models["verifier"], **point.pop("effort"), rule=rule,
                          **_leniency_params(point), **({"controller": controller} if controller else {}))
            effort = f"tau={params['threshold']:g}" if params["threshold"] is not None else f"K={params['steps']}"
            out.append(dict(config_id=settings_id(params), name=f"{effort} {_rule_name(params)} {params['method']} "
                                                                 f"{params['proposal']} B={params['block_size']}"
                                                                 + (f" {controller}" if controller else ""),
                            effort=effort, params=params))
    return out


def _leniency_params(point: dict) -> dict:
    """A grid point's RunConfig keywords. The defaults (no Typical delta, gates always open, truncated
    support) are left out, so that the configuration ids of older stores stay the same."""
    params = dict(point)
    for key, default in (("typical_delta", None), ("gate_top", 1.0), ("gate_entropy", 0.0), ("support", "truncated")):
        if params[key] == default:
            del params[key]
    return params


def _rule_name(params: dict) -> str:
    """"linear lam=0.1", "typical typical_epsilon=0.09 delta=0.3 gated top<=0.9 untruncated"."""
    rule = params["rule"]
    name = rule if rule == "lossless" else f"{rule} {LENIENCY_KEYS[rule]}={params['leniency']:g}"
    if "typical_delta" in params:
        name += f" delta={params['typical_delta']:g}"
    gates = [f"top<={params['gate_top']:g}"] if "gate_top" in params else []
    gates += [f"H>={params['gate_entropy']:g}"] if "gate_entropy" in params else []
    if gates:
        name += " gated " + " or ".join(gates)
    if params.get("support", "truncated") != "truncated":
        name += " untruncated"
    return name


# ----------------------------------------------------------------------------------------------
# The unit function (runs in the worker processes; per-process caches)
# ----------------------------------------------------------------------------------------------

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

    from specdiff.runs import ModelCache, run_config

    if "models" not in _CACHE:
        torch.set_num_threads(settings["run"]["threads"])
        from transformers.utils import logging

        logging.disable_progress_bar()
        device = "cuda" if torch.cuda.is_available() else None  # a Ray worker given a GPU uses it
        _CACHE["models"], _CACHE["warm"] = ModelCache(device=device), set()
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


# ----------------------------------------------------------------------------------------------
# The command
# ----------------------------------------------------------------------------------------------


def problem_ids(settings: dict) -> list[str]:
    """A stable id per problem: the task's own id, else the index."""
    _, problems = _problems(settings["task"])
    return [problem.id or f"{index:05d}" for index, problem in enumerate(problems)]


def run_sweep(config_path: str | Path, store_path: str | Path, backend: str = "process", workers: int = 1,
              ray_address: str | None = None, progress: bool = True, on_row=None) -> dict:
    """Checks the config, opens (or creates) the store, runs every unfinished (configuration, problem)
    and returns a summary. on_row(row) is called after each row is written (tests use it)."""
    from specdiff.eval.runner import execute, pending
    from specdiff.eval.sweepstore import SweepStore

    if workers < 1:
        raise ValueError(f"--workers must be >= 1, got {workers}")
    settings, configs, source = load_config(config_path)
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
            "backend": backend, "workers": workers, "wall_seconds": time.perf_counter() - start}


def run(args) -> int:
    if args.check:
        settings, configs, _ = load_config(args.config)
        out = {"settings": settings, "configurations": [dict(config_id=c["config_id"], name=c["name"]) for c in configs]}
        if args.json:
            print(json.dumps(out, indent=1))
        else:
            for c in configs:
                print(f"{c['config_id']}  {c['name']}")
            print(f"{len(configs)} configurations x {settings['task']['problems']} problems")
        return 0
    summary = run_sweep(args.config, args.store, args.backend, args.workers, args.ray_address,
                        progress=not args.json)
    print(json.dumps(summary, indent=1))
    if not args.json:
        print(f"next: specdiff frontier {args.store}   |   specdiff report {args.store}", file=sys.stderr)
    return 0
