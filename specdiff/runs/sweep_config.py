"""A sweep's TOML config, checked in full and expanded into its configurations (`load_config`).

Every combination of the config's [grid] lists is one generation configuration (diffusion effort K or
tau, leniency rule and its lam / eps / delta, method, proposal, block size); [grid.NAME] tables are
sub-grids whose union is run. The config is checked before anything runs (specdiff.eval.sweepconfig):
an unknown section, key, model, task or rule, or a grid value out of range, is an error naming its line.
docs/frontier.md describes the keys. `specdiff.runs.sweep` runs the configurations.
"""
from __future__ import annotations

import inspect
from pathlib import Path

from specdiff.runs.config import RULES
from specdiff.eval.sweepconfig import ConfigText, Field, check_config, check_section, expand_grid

LENIENCY_KEYS = {"linear": "lam", "tv": "eps", "cactus": "delta", "typical": "typical_epsilon"}  # rule -> its axis
SUPPORTS = ("truncated", "untruncated")
METHODS = ("token", "block")
PROPOSALS = ("marginal", "point_mass")

SCHEMA = {
    "models": {
        "drafter": Field("str", "a kind (masked, ar, ...), a zoo name, a distilled drafter, lookup (prompt lookup) or a "
                                 "local checkpoint directory", required=True),
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
        "dtype": Field("str", "a real verifier's dtype, its drafter following (default: bfloat16 where the hardware "
                              "computes it natively, else float32; the testbed's models stay float32)",
                       choices=("float32", "bfloat16")),
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
        from specdiff.models import check_pair

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
    """A drafter is anything `specdiff.models.resolve` names (a kind, a zoo, distilled or local drafter, prompt
    lookup); a verifier is a zoo name, a fetched name or a local checkpoint."""
    from specdiff import zoo
    from specdiff.checkpoints import FETCHABLE, fetched_dir
    from specdiff.models import LOOKUP, resolve

    if name in FETCHABLE:
        if fetched_dir(name) is None:
            raise config.error("models", role, f"[models] {role}: {name!r} is not fetched yet: run "
                                               f"`specdiff models fetch {name}`")
        return
    if role == "drafter":
        try:
            resolve(name)
        except ValueError as error:
            reason = str(error).split(": ", 1)[-1]  # what it is not
            raise config.error("models", role, f"[models] {role}: unknown model {name!r}: {reason}") from None
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
