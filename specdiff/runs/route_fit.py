"""A router fitted on a sweep store and measured held out (`fit_store_router`; `specdiff route fit`,
docs/adaptive.md, "Routing").

The store's problems are split in two: the first `fit_problems` (the validation part: the router
sees only these) and the rest (held out). Each problem's features (`specdiff.runs.routing`) are
computed with the store's verifier and drafter; the router (`specdiff.eval.routing.fit_router`) maps
their quantile cells to configurations of the sweep so that the fit problems' mean accuracy is at least
the budget at the least latency. It is then measured on the held-out problems from the store's own
per-problem results, against the static hull of the same held-out problems at the accuracy it reaches.
"""
from __future__ import annotations


def fit_store_router(store: str, budget: float, out: str, fit_problems: int | None = None, bins: int = 2,
                     min_cell: int = 8, block: int = 8) -> dict:
    """Fits a router on the store's first `fit_problems` problems (default half), writes it to `out` and
    returns the JSON of `specdiff route fit`: the router measured on the held-out problems beside the
    static hull and the best static configuration that meets the budget on the fit problems."""
    import numpy as np

    from specdiff.eval.frontier import load_sweep, summarize
    from specdiff.eval.routing import FEATURES, evaluate, fit_router, route
    from specdiff.eval.tasks import get_task
    from specdiff.models import ModelCache
    from specdiff.runs.routing import request_features, save_router

    if not 0 < budget <= 1:
        raise ValueError(f"--budget is an accuracy in (0, 1], got {budget}")
    sweep = load_sweep(store)
    settings, summaries = sweep["settings"], sweep["summaries"]
    if len(summaries) < 2:
        raise ValueError(f"{store} has {len(summaries)} complete configurations: routing needs at least two")
    problems = settings["task"]["problems"]
    fit_n = fit_problems or problems // 2
    if not 1 <= fit_n < problems:
        raise ValueError(f"--fit-problems must leave held-out problems: 1..{problems - 1}, got {fit_n}")
    index = {s["config_id"]: i for i, s in enumerate(summaries)}
    correct = np.zeros((len(summaries), problems))
    latency = np.zeros((len(summaries), problems))
    for row in sweep["rows"]:
        if row["config_id"] in index:
            correct[index[row["config_id"]], row["problem_index"]] = float(row["correct"])
            latency[index[row["config_id"]], row["problem_index"]] = row["wall_s"]
    task = get_task(settings["task"]["name"])
    cache = ModelCache()
    models = settings["models"]
    tokenizer = cache.tokenizer(models["verifier"])
    prompts = [task.build_prompt(p, tokenizer, boxed=settings["task"]["boxed"])
               for p in task.load(problems, **settings["task"]["options"])]
    features = request_features(prompts, cache, models["verifier"], models["drafter"], block)
    fit, held = slice(0, fit_n), slice(fit_n, problems)
    router = fit_router(features[fit], correct[:, fit], latency[:, fit], budget, bins, min_cell)
    choice = route(router, features[held])
    held_rows = [r for r in sweep["rows"] if r["problem_index"] >= fit_n]
    held_summaries = {s["config_id"]: s for s in summarize(sweep["configurations"], held_rows)}
    held_summaries = [held_summaries[s["config_id"]] for s in summaries]
    heldout = evaluate(choice, correct[:, held], latency[:, held], held_summaries)
    static = int(np.argmax(np.where(correct[:, fit].mean(1) >= budget, -latency[:, fit].mean(1), -np.inf))) \
        if (correct[:, fit].mean(1) >= budget).any() else None
    result = {
        "store": str(store), "budget": budget, "features": list(FEATURES),
        "fit_problems": [0, fit_n], "heldout_problems": [fit_n, problems], "split": settings["task"]["options"],
        "fit": {"accuracy": router["fit_accuracy"], "latency_s": router["fit_latency_s"]},
        "heldout": heldout,
        "best_static_meeting_budget_on_fit": None if static is None else {
            "name": summaries[static]["name"], "heldout_accuracy": float(correct[static, held].mean()),
            "heldout_latency_s": float(latency[static, held].mean())},
        "cells": {cell: summaries[i]["name"] for cell, i in router["cells"].items()},
        "default": summaries[router["default"]]["name"],
        "feature_spread": {name: [float(features[:, f].min()), float(np.median(features[:, f])),
                                  float(features[:, f].max())] for f, name in enumerate(FEATURES)},
    }
    used = sorted(set(router["cells"].values()) | {router["default"]})
    remap = {old: new for new, old in enumerate(used)}
    save_router(out, {
        "thresholds": router["thresholds"], "cells": {c: remap[i] for c, i in router["cells"].items()},
        "default": remap[router["default"]], "features": list(FEATURES),
        "configurations": [dict(name=summaries[i]["name"], params=summaries[i]["params"]) for i in used],
        "feature_models": dict(verifier=models["verifier"], drafter=models["drafter"], block=block),
        "budget": budget, "store": str(store), "heldout": {k: heldout[k] for k in (
            "accuracy", "latency_s", "hull_latency_s_at_accuracy", "latency_ratio_hull_over_routed")}})
    result["router"] = out
    return result
