"""The bench's one tuner: every candidate measured interleaved on the suite's validation prompts (and only those),
the fastest chosen per row.

Terms:
- a row: what the measurement reports (`spec_<kind>`, `spec_<kind>_adaptive`, `hf_lookup`); its candidates are
  configurations: a drafter's from its kind's grid (`settings.grid`, `KindSpec.bench_candidates`, B capped at
  the drafter's trained block), HF prompt lookup's from `hf_lookup_tokens`, a drafter's adaptive ones from its
  tuned configuration with each controller (`adaptive_candidates`), tuned after the fixed ones; its draft-tree
  ones (`spec_<kind>_tree`) from its tuned configuration at each node budget of `trees` (`tree_candidates`);
- `choose`: the fastest candidate by tokens/s; candidates within TIE_TOLERANCE of it are tied, and the tie goes
  to more tokens per round;
- a tuning (what `tune` returns and `specdiff bench tune` writes): {"chosen": {row: {config, exact,
  validation_tokens_per_s, validation_tokens_per_round}}, "grid": every candidate's figures, "references":
  {kind: drafter}, "verifier", "on", "prompts", ...}; `specdiff bench speedup --tuning FILE` measures its
  chosen configurations without tuning;
- with `compile` (issue 53) the drafters' candidates run on the compiled verifier (`compiled.tuning_candidates`), so
  B is chosen for the rounds the compiled rows run (the eager rows then run the same choice); the tuning says
  `compiled` (inductor's mode). Draft trees stay eager.
"""
from __future__ import annotations

import json
from pathlib import Path

from specdiff.bench import methods as rows
from specdiff.bench import rows as named
from specdiff.bench.figures import figures
from specdiff.bench.settings import grid
from specdiff.bench.timer import measure

TIE_TOLERANCE = 0.02  # candidates within 2% of the fastest on validation are tied: more tokens/round wins


def tune(references: dict, settings, suite, cache, verifier, say=None) -> dict:
    """Chooses every row's configuration on the suite's validation prompts (module docstring)."""
    from specdiff.runs import RunConfig

    say = say or (lambda *a: None)
    tuning = {"chosen": {}, "grid": [], "references": dict(references), "verifier": settings.verifier,
              "on": suite.tuned_on, "max_new_tokens": settings.tune_max_new_tokens or settings.max_new_tokens,
              "repeats": settings.tune_repeats, "tie_tolerance": TIE_TOLERANCE}
    make = (lambda config: rows.speculative(config, cache))  # noqa: E731
    if settings.compile:  # candidates measured on the compiled verifier: the rounds its rows will run
        from specdiff.bench.compiled import tuning_candidates
        from specdiff.engine.compiled import compile_mode

        make = tuning_candidates(verifier, cache, suite.validation, tuning["max_new_tokens"])
        tuning["compiled"] = compile_mode()
    methods, groups = {}, {}
    for kind, reference in references.items():
        for config in candidates(kind, reference, settings):
            methods[config.name], groups[config.name] = make(config), named.spec(kind).name
    for n in settings.hf_lookup_tokens:
        name = f"hf prompt lookup N={n}"
        methods[name] = rows.hf(verifier, name, prompt_lookup_num_tokens=n,
                                config={"name": name, "prompt_lookup_num_tokens": n})
        groups[name] = named.hf("hf_lookup").name
    _run(methods, groups, suite, settings, tuning, say, "tune")
    methods, groups = {}, {}
    for index, (kind, reference) in enumerate(references.items()):
        tuned = RunConfig(**tuning["chosen"][named.spec(kind).name]["config"])
        group = named.spec(kind, adaptive=True).name
        for config in adaptive_candidates(kind, reference, tuned, settings, controllers_of(settings, kind, index)):
            methods[config.name], groups[config.name] = make(config), group
    if methods:
        _run(methods, groups, suite, settings, tuning, say, "tune adaptive")
    methods, groups = {}, {}
    for kind in tree_kinds(references, settings) if len(settings.trees) > 1 else []:  # one budget: no choice
        for config in tree_candidates(kind, RunConfig(**tuning["chosen"][named.spec(kind).name]["config"]), settings):
            methods[config.name], groups[config.name] = rows.speculative(config, cache), named.spec(kind, tree=0).name
            # trees stay eager: the compiled verifier scores no trees
    if methods:
        _run(methods, groups, suite, settings, tuning, say, "tune trees")
    tuning.update(prompts=len(suite.validation), kinds=sorted({p.kind for p in suite.validation}))
    return tuning


def candidates(kind: str, reference: str, settings) -> list:
    """A drafter's tuning candidates: its kind's grid by B (module docstring)."""
    from specdiff.drafters import registry
    from specdiff.runs import RunConfig

    spec = registry.get(kind)
    mine = grid(settings, spec)
    out = []
    for block in _blocks(spec, reference, mine["blocks"]):
        out += [RunConfig(name, drafter=reference, verifier=settings.verifier, sampling=dict(settings.sampling),
                          **fields) for name, fields in spec.bench_candidates(block, mine)]
    return out


def adaptive_candidates(kind: str, reference: str, tuned, settings, controllers) -> list:
    """A drafter's tuned configuration with each controller at each most-steps K and longest draft B
    (`settings.adaptive_steps`, `adaptive_blocks`), point mass where its marginal is not exact."""
    from dataclasses import replace

    from specdiff.drafters import registry

    spec = registry.get(kind)
    if not controllers or (settings.controlled_kinds and settings.controlled_kinds not in spec.effort):
        return []
    steps = settings.adaptive_steps if settings.adaptive_steps and "steps" in spec.effort else [tuned.steps]
    blocks = _blocks(spec, reference, settings.adaptive_blocks or sorted({tuned.block_size, max(settings.blocks)}))
    cache = settings.adaptive_cache if settings.adaptive_cache and "prefix_cache" in spec.option_keys else None
    out = []
    for controller in controllers:
        for k in steps:
            for b in blocks:
                if k > b:
                    continue
                effort = {"steps": k} if tuned.threshold is None else {"steps": k, "threshold": tuned.threshold}
                exact = tuned.proposal == "marginal" and spec.marginal_exact(effort)
                out.append(replace(tuned, name=f"{kind} adaptive K<={k} B<={b} {controller}", steps=k, block_size=b,
                                   controller=controller, proposal="marginal" if exact else "point_mass",
                                   prefix_cache=tuned.prefix_cache if cache is None else cache, extra=dict(tuned.extra),
                                   sampling=dict(tuned.sampling)))
    return out


def tree_kinds(references: dict, settings) -> list[str]:
    """The drafter kinds that get draft-tree rows: every drafter with `trees`, or those of `tree_drafters`."""
    if not settings.trees:
        return []
    return [kind for kind in references if not settings.tree_drafters or kind in settings.tree_drafters]


def tree_candidates(kind: str, tuned, settings) -> list:
    """A drafter's tuned configuration (its B the tree's depth) at each node budget of `settings.trees`."""
    from dataclasses import replace

    return [replace(tuned, name=f"{kind} tree {n}", tree_budget=int(n), extra=dict(tuned.extra),
                    sampling=dict(tuned.sampling)) for n in settings.trees]


def controllers_of(settings, kind: str, index: int) -> list:
    """The controllers tried on a drafter: the first drafter's `controllers`, the others' `kind_controllers`
    (each None: the kind's own, `kinds.toml`); a kind without controllers of its own gets none."""
    from specdiff.bench.settings import kind_settings

    own = kind_settings(kind).get("controllers", ())
    given = settings.kind_controllers if index and settings.kind_controllers is not None else settings.controllers
    return list(own if given is None or not own else given)  # a kind without controllers of its own takes none


def choose(candidates: list[dict]) -> dict:
    """The fastest candidate by tokens/s; candidates within TIE_TOLERANCE of it are tied, more tokens/round wins."""
    fastest = max(row["tokens_per_s"] for row in candidates)
    tied = [row for row in candidates if row["tokens_per_s"] >= (1 - TIE_TOLERANCE) * fastest]
    return max(tied, key=lambda row: (row["tokens_per_round"], row["tokens_per_s"]))


def write(tuning: dict, path) -> None:
    Path(path).write_text(json.dumps(tuning, indent=1) + "\n")


def read(path, verifier: str) -> dict:
    """A tuning file (`specdiff bench tune --out FILE`); refused when it was tuned for another verifier."""
    tuning = json.loads(Path(path).read_text())
    if tuning.get("verifier") != verifier:
        raise ValueError(f"--tuning {path} was tuned for the verifier {tuning.get('verifier')!r}, not {verifier!r}")
    return tuning


def _blocks(spec, reference: str, blocks: list[int]) -> list[int]:
    from specdiff.models import checkpoint_config

    cap = spec.trained_block(checkpoint_config(reference)) if spec.needs_model else None
    return sorted({min(int(b), cap) if cap else int(b) for b in blocks})


def _run(methods: dict, groups: dict, suite, settings, tuning: dict, say, phase: str) -> None:
    """Measures the candidates interleaved on validation, adds their rows to the grid and chooses per row."""
    prompts = suite.validation
    records = measure(methods, prompts, settings.tune_max_new_tokens or settings.max_new_tokens,
                      settings.tune_repeats, settings.seed, say, phase=phase)
    found = []
    for name, records_ in records.items():
        row = {"name": name, "row": groups[name], "exact": methods[name].exact, **figures(records_, prompts),
               "config": methods[name].config}
        row.pop("per_prompt")
        found.append(row)
    tuning["grid"] += found
    for group in dict.fromkeys(groups.values()):
        best = choose([row for row in found if row["row"] == group])
        tuning["chosen"][group] = {"config": best["config"], "exact": best["exact"],
                                   "validation_tokens_per_s": best["tokens_per_s"],
                                   "validation_tokens_per_round": best["tokens_per_round"]}
        say(f"tuned {group}: {best['name']}")
