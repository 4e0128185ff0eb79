"""`specdiff route fit STORE --budget A`: a router from a sweep store (docs/adaptive.md, "Routing").

The store's problems are split in two: the first `--fit-problems` (the validation part: the router
sees only these) and the rest (held out). Each problem's features (`specdiff.runs.routing`) are
computed with the store's verifier and drafter; the router (`specdiff.eval.routing.fit_router`) maps
their quantile cells to configurations of the sweep so that the fit problems' mean accuracy is at least
the budget at the least latency. It is then measured on the held-out problems from the store's own
per-problem results, against the static hull of the same held-out problems at the accuracy it reaches.
`specdiff generate --router FILE` applies the file per request.
"""
from __future__ import annotations

import json

from specdiff.argtypes import positive_int


def register(subparsers) -> None:
    route = subparsers.add_parser("route", help="route requests to frontier configurations (fit a router)",
                                  description="Query routing along a sweep's frontier (docs/adaptive.md).")
    actions = route.add_subparsers(dest="route_command", metavar="ACTION")
    fit = actions.add_parser("fit", help="fit a router on a sweep store's validation problems, measure it held out",
                             description=__doc__.split("\n\n")[1] if __doc__ else None)
    fit.add_argument("store", help="a sweep store (specdiff sweep ... --store FILE)")
    fit.add_argument("--budget", type=float, required=True, help="the accuracy to keep, in (0, 1]")
    fit.add_argument("--fit-problems", type=positive_int, default=None,
                     help="the first N problems of the store fit the router; the rest are held out (default: half)")
    fit.add_argument("--bins", type=positive_int, default=2, help="quantile bins per feature (default 2: 8 cells)")
    fit.add_argument("--min-cell", type=positive_int, default=8,
                     help="cells with fewer fit problems take the default configuration (default 8)")
    fit.add_argument("--block", type=positive_int, default=8, help="the drafter's first block, in tokens (default 8)")
    fit.add_argument("--out", default="router.json", help="the router file (default router.json)")
    fit.add_argument("--threads", type=positive_int, default=1)
    fit.add_argument("--json", action="store_true", help="print only the JSON result")
    fit.set_defaults(handler=run_fit)
    route.set_defaults(handler=lambda args: _need_action(route))


def _need_action(parser) -> int:
    parser.print_help()
    return 2


def run_fit(args) -> int:
    import numpy as np
    import torch

    from specdiff.eval.frontier import load_sweep, summarize
    from specdiff.eval.routing import FEATURES, evaluate, fit_router, route
    from specdiff.eval.tasks import get_task
    from specdiff.runs import ModelCache
    from specdiff.runs.model_cache import quiet_transformers
    from specdiff.runs.routing import request_features, save_router

    if not 0 < args.budget <= 1:
        raise ValueError(f"--budget is an accuracy in (0, 1], got {args.budget}")
    sweep = load_sweep(args.store)
    settings, summaries = sweep["settings"], sweep["summaries"]
    if len(summaries) < 2:
        raise ValueError(f"{args.store} has {len(summaries)} complete configurations: routing needs at least two")
    problems = settings["task"]["problems"]
    fit_n = args.fit_problems or problems // 2
    if not 1 <= fit_n < problems:
        raise ValueError(f"--fit-problems must leave held-out problems: 1..{problems - 1}, got {fit_n}")
    quiet_transformers()
    torch.set_num_threads(args.threads)
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
    features = request_features(prompts, cache, models["verifier"], models["drafter"], args.block)
    fit, held = slice(0, fit_n), slice(fit_n, problems)
    router = fit_router(features[fit], correct[:, fit], latency[:, fit], args.budget, args.bins, args.min_cell)
    choice = route(router, features[held])
    held_rows = [r for r in sweep["rows"] if r["problem_index"] >= fit_n]
    held_summaries = {s["config_id"]: s for s in summarize(sweep["configurations"], held_rows)}
    held_summaries = [held_summaries[s["config_id"]] for s in summaries]
    heldout = evaluate(choice, correct[:, held], latency[:, held], held_summaries)
    static = int(np.argmax(np.where(correct[:, fit].mean(1) >= args.budget, -latency[:, fit].mean(1), -np.inf))) \
        if (correct[:, fit].mean(1) >= args.budget).any() else None
    result = {
        "store": str(args.store), "budget": args.budget, "features": list(FEATURES),
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
    save_router(args.out, {
        "thresholds": router["thresholds"], "cells": {c: remap[i] for c, i in router["cells"].items()},
        "default": remap[router["default"]], "features": list(FEATURES),
        "configurations": [dict(name=summaries[i]["name"], params=summaries[i]["params"]) for i in used],
        "feature_models": dict(verifier=models["verifier"], drafter=models["drafter"], block=args.block),
        "budget": args.budget, "store": str(args.store), "heldout": {k: heldout[k] for k in (
            "accuracy", "latency_s", "hull_latency_s_at_accuracy", "latency_ratio_hull_over_routed")}})
    result["router"] = args.out
    print(json.dumps(result, indent=1) if args.json else _summary(result))
    return 0


def _summary(result: dict) -> str:
    held = result["heldout"]
    ratio = held["latency_ratio_hull_over_routed"]
    return (f"router -> {result['router']}: held out, accuracy {held['accuracy']:.3f} at {1000 * held['latency_s']:.1f} "
            f"ms per problem; the static hull reaches that accuracy at "
            + ("(out of reach)" if ratio is None else f"{1000 * held['hull_latency_s_at_accuracy']:.1f} ms "
               f"({ratio:.3f}x the router's latency)") + f"; cells: {result['cells']}, default {result['default']}")
