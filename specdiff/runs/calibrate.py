"""The first paper's throughput model (Section 3.3, Figure 3) fitted on the testbed and checked against a
sweep's measurements (`calibrate`; `specdiff calibrate [CONFIG.toml] --store PATH`).

1. With CONFIG.toml, the sweep runs first into PATH (`specdiff sweep`, resumable); without it PATH
   must hold a finished sweep. Its Linear(lam), token-verification, fixed-K configurations are the
   measurements.
2. Costs and distances, side by side in one run (`specdiff.engine.profile`): prefixes are sampled
   on problems the sweep did not use (the verifier's answers cut at random points); on each, one
   timed engine round per effort K gives c_d(K) (fit a + bK), c_v (the verifier's forward, the rule and the bookkeeping; plus the verifier's prefill
   amortised over a problem's rounds, whose length is that of the verifier's own sampled answers)
   and TV(p_i, q_i) per drafted position, whose mean is d_K (by default on H_K: the prefixes at
   which a lossless run at effort K starts its rounds, on the same prompts; `--prefixes cuts`: on
   the cut answers, one H for every K).
3. Predictions (`specdiff.eval.calibration`): Eq. 6 and Proposition 1 / Eq. 7 per configuration, and
   two variants that drop Prop. 1's assumptions (one d_K per position; the sampled drafts).
4. The median relative errors (`median_rel_error_throughput`, ...), Figure 3's four panels
   (`specdiff.eval.calibration_figure`) and the calibration stored in the store, which
   `specdiff report` shows.
"""
from __future__ import annotations

import json
import statistics
import time

MODELS = ("eq7", "positional", "per_draft")
COSTS = ("timed", "sweep")
PREFIXES = ("rounds", "cuts")


def calibrate(store_path, prompts: int = 100, cuts: int = 2, steps: list[int] | None = None, seed: int = 0,
              model: str = "eq7", costs: str = "timed", prefix_source: str = "rounds",
              progress: bool = False) -> tuple[dict, list[dict]]:
    """(the calibration, the store's configuration summaries); see the module docstring."""
    import torch

    from specdiff.engine.profile import prefill_seconds, profile_rounds, round_start_prefixes, sample_prefixes
    from specdiff.models import ModelCache
    from specdiff.runs import RunConfig, build_generator
    from specdiff.eval.frontier import load_sweep

    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}: expected one of {MODELS}")
    if prefix_source not in PREFIXES:
        raise ValueError(f"unknown prefixes {prefix_source!r}: expected one of {PREFIXES}")
    if costs not in COSTS:
        raise ValueError(f"unknown costs {costs!r}: expected one of {COSTS}")
    begin = time.perf_counter()
    sweep = load_sweep(store_path)
    linear = _linear_configurations(sweep, store_path)
    efforts = sorted(set(steps or [s["params"]["steps"] for s in linear]))
    missing = {s["params"]["steps"] for s in linear} - set(efforts)
    if missing:
        raise ValueError(f"--steps {efforts} leaves out the sweep's K = {sorted(missing)}: give every K it measured")
    settings = sweep["settings"]
    torch.set_num_threads(settings["run"]["threads"])
    from transformers.utils import logging

    logging.disable_progress_bar()
    cache = ModelCache()
    base = dict(linear[0]["params"])
    prompt_rows, source = _calibration_prompts(settings, prompts, cache.tokenizer(base["verifier"]))
    verifier = build_generator(RunConfig(name="calibrate", **base), cache).verifier
    prefixes, lengths = sample_prefixes(verifier, prompt_rows, cuts, settings["task"]["max_new_tokens"], seed,
                                        progress)
    tokens_per_problem = statistics.fmean(lengths)
    prefill = statistics.median(prefill_seconds(verifier, prompt_rows))
    timed, from_sweep, distances, profiles, round_starts = {}, {}, {}, {}, {}
    for block in sorted({s["params"]["block_size"] for s in linear}):
        drafters = {k: build_generator(RunConfig(name="calibrate", **dict(base, steps=k, block_size=block)),
                                       cache).drafter for k in efforts}
        proposal = base["proposal"]
        profile = profile_rounds(drafters, verifier, prefixes, block, proposal, seed, progress=progress)
        timed[f"B={block}"] = _timed_costs(profile, efforts, prefill)
        if prefix_source == "rounds":  # the distances on each K's own round starts (the timing stays as measured)
            for k in efforts:
                lossless = build_generator(RunConfig(name="calibrate", **dict(base, steps=k, block_size=block,
                                                                               rule="linear", leniency=0.0)), cache)
                starts = round_start_prefixes(lossless, prompt_rows, len(prefixes), settings["task"]["max_new_tokens"],
                                              seed, progress)
                own = profile_rounds({k: lossless.drafter}, verifier, starts, block, proposal, seed, progress=progress)
                for name in ("tv_marginal", "target_prob", "draft_prob"):
                    getattr(profile, name)[k] = getattr(own, name)[k]
                round_starts[f"B={block} K={k}"] = len(starts)
        profiles[block] = profile
        from_sweep[f"B={block}"] = _sweep_costs([s for s in linear if s["params"]["block_size"] == block],
                                                timed[f"B={block}"])
        distances[f"B={block}"] = {mode: _distances(profile, efforts, mode)
                                   for mode in sorted({s["params"]["proposal"] for s in linear})}
    by_source = {"timed": timed, "sweep": from_sweep}
    compared = {source: [_compare(s, sweep["rows"], profiles, c, tokens_per_problem) for s in linear]
                for source, c in by_source.items()}
    configurations = compared[costs]
    result = _headline(configurations, model)
    result.update(
        model=model, costs_source=costs, store=str(store_path), models=settings["models"], costs=by_source[costs],
        costs_other=by_source["sweep" if costs == "timed" else "timed"],
        errors_by_costs={source: _headline(c, model)["errors_by_model"] for source, c in compared.items()},
        distance=distances,
        prefixes={"count": len(prefixes), "prompts": len(prompt_rows), "cuts_per_prompt": cuts, "seed": seed,
                  "source": source, "mean_tokens": statistics.fmean(len(p) for p in prefixes),
                  "verifier_tokens_per_problem": tokens_per_problem, "distances_on": prefix_source,
                  "round_starts": round_starts},
        configurations=configurations, threads=settings["run"]["threads"],
        seconds=time.perf_counter() - begin)
    return result, linear


def _linear_configurations(sweep: dict, store_path) -> list[dict]:
    if not sweep["summaries"]:
        raise ValueError(f"{store_path}: no configuration of the sweep has finished every problem yet; "
                         "run (or resume) `specdiff sweep` first")
    linear = [s for s in sweep["summaries"] if s["params"]["rule"] == "linear" and s["params"]["method"] == "token"
              and s["params"].get("threshold") is None and s.get("rounds")]
    if not linear:
        raise ValueError(f"{store_path}: the sweep has no finished Linear(lam) configuration with a fixed K and token "
                         "verification; the throughput model (Eq. 6-7) is about those (grid: rule = [\"linear\"], "
                         "lam = [...], steps = [...])")
    return linear


def _calibration_prompts(settings: dict, count: int, tokenizer) -> tuple[list[list[int]], str]:
    """Prompts on problems the sweep did not use: arith's validation split (unless the sweep ran on
    it), else the task's problems after the sweep's."""
    from specdiff.eval.tasks import get_task

    task_settings = settings["task"]
    task, options = get_task(task_settings["name"]), dict(task_settings["options"])
    used = task_settings["problems"]
    if task.name == "arith" and options.get("split", "test") != "validation":
        problems = task.load(count, **dict(options, split="validation"))
        source = f"arith validation split, its first {count} problems (seed {options.get('seed', 0)})"
    else:
        problems = task.load(used + count, **options)[used:]
        source = f"{task.name} {json.dumps(options)}, problems {used}..{used + len(problems) - 1} (after the sweep's)"
    if not problems:
        raise ValueError(f"no {task.name} problems left beyond the sweep's {used} to sample prefixes from")
    rows = [tokenizer(task.build_prompt(p, tokenizer, boxed=task_settings["boxed"])).input_ids for p in problems]
    return rows, source


def _timed_costs(profile, efforts: list[int], prefill: float) -> dict:
    """c_d(K) fitted on the timed rounds' drafting, c_v = their verifier forward + rule + bookkeeping."""
    from specdiff.eval.calibration import fit_draft_cost

    draft = {k: statistics.median(profile.draft_s[k]) for k in efforts}
    fit = fit_draft_cost(efforts, [draft[k] for k in efforts])
    parts = {name: 1000 * statistics.median(getattr(profile, f"{name}_s")) for name in ("forward", "rule",
                                                                                       "bookkeeping")}
    return {"source": "timed rounds", "draft_ms": {f"K={k}": 1000 * v for k, v in draft.items()},
            "fit": _fit_ms(fit, efforts), "c_v_ms": sum(parts.values()), "c_v_parts_ms": parts,
            "prefill_ms": 1000 * prefill, "timed_rounds_per_k": len(profile.forward_s) // max(len(efforts), 1)}


def _sweep_costs(linear: list[dict], timed: dict) -> dict:
    """c_d(K) fitted on the sweep's own rounds (drafting seconds per round of each K, over its lam),
    c_v = their verifier forward and rule + the timed bookkeeping; the prefill as timed. For a
    machine whose load drifts between the sweep and the calibration (`sweep_over_timed` shows it)."""
    from specdiff.eval.calibration import fit_draft_cost

    def per_round(group, key):
        return sum(s[key] * s["rounds"] for s in group) / sum(s["rounds"] for s in group)

    efforts = sorted({s["params"]["steps"] for s in linear})
    draft = {k: per_round([s for s in linear if s["params"]["steps"] == k], "draft_ms_per_round") for k in efforts}
    fit = fit_draft_cost(efforts, [draft[k] for k in efforts])
    parts = {"forward_and_rule": per_round(linear, "verify_ms_per_round"),
             "bookkeeping": timed["c_v_parts_ms"]["bookkeeping"]}
    timed_verify = timed["c_v_parts_ms"]["forward"] + timed["c_v_parts_ms"]["rule"]
    drift = {f"draft K={k}": draft[k] / timed["draft_ms"][f"K={k}"] for k in efforts}
    drift["verifier forward and rule"] = parts["forward_and_rule"] / timed_verify
    return {"source": "the sweep's rounds", "draft_ms": {f"K={k}": v for k, v in draft.items()},
            "fit": _fit_ms(fit, efforts, scale=1.0), "c_v_ms": sum(parts.values()), "c_v_parts_ms": parts,
            "prefill_ms": timed["prefill_ms"], "sweep_over_timed": drift}


def _fit_ms(fit: dict, efforts: list[int], scale: float = 1000.0) -> dict:
    return {"a_ms": scale * fit["a"], "b_ms": scale * fit["b"], "r2": fit["r2"],
            "residuals_ms": {f"K={k}": scale * r for k, r in zip(efforts, fit["residuals"])}}


def _distances(profile, efforts: list[int], proposal: str) -> dict:
    from specdiff.eval.statistics import mean_stderr

    out = {}
    for k in efforts:
        tv = profile.distance(k, proposal)  # [prefixes, B]
        per_prefix = tv.mean(dim=1).tolist()
        out[f"K={k}"] = {"d_K": statistics.fmean(per_prefix), "stderr": mean_stderr(per_prefix),
                         "per_position": [float(v) for v in tv.mean(dim=0)]}
    return out


def _compare(summary: dict, rows: list[dict], profiles: dict, costs: dict, tokens_per_problem: float) -> dict:
    from specdiff.eval import calibration as model

    params = summary["params"]
    steps, lam, block, proposal = params["steps"], params["leniency"], params["block_size"], params["proposal"]
    profile, cost = profiles[block], costs[f"B={block}"]
    fit = {"a": cost["fit"]["a_ms"] / 1000, "b": cost["fit"]["b_ms"] / 1000}
    verify_seconds = cost["c_v_ms"] / 1000
    tv = profile.distance(steps, proposal)
    d_k = float(tv.mean())
    survivals = {"eq7": model.iid_survival(model.expected_acceptance(d_k, lam), block),
                 "positional": model.positional_survival(tv.mean(dim=0).tolist(), lam),
                 "per_draft": model.per_draft_survival(profile.target_prob[steps].numpy(),
                                                       profile.drafted_prob(steps, proposal).numpy(), lam)}
    prefill = cost["prefill_ms"] / 1000
    predicted = {name: model.predict(s, steps, fit, verify_seconds, prefill, tokens_per_problem)
                 for name, s in survivals.items()}
    mine = [r for r in rows if r["config_id"] == summary["config_id"]]
    accepted = [a for r in mine for a in (r["accepted"] or [])]
    measured = {"acceptance": model.per_position_acceptance(accepted, block),
                "tokens_per_round": summary["tokens_per_round"],
                "round_ms": 1000 * sum(r["wall_s"] for r in mine) / summary["rounds"],
                "throughput": summary["throughput"],
                "draft_ms": summary["draft_ms_per_round"], "verify_ms": summary["verify_ms_per_round"]}
    return {"name": summary["name"], "steps": steps, "lam": lam, "block_size": block, "proposal": proposal,
            "accuracy": summary["accuracy"], "d_K": d_k, "agreement": model.verifier_agreement(d_k, lam),
            "measured": measured, "predicted": predicted,
            "rel_error": {name: model.compare(p, measured) for name, p in predicted.items()}}


def _headline(configurations: list[dict], model: str) -> dict:
    from specdiff.eval.calibration import summarize_errors

    by_model = {name: summarize_errors([c["rel_error"][name] for c in configurations]) for name in MODELS}
    return dict(by_model[model], errors_by_model=by_model)
