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
    import torch

    from specdiff.models import quiet_transformers
    from specdiff.runs.route_fit import fit_store_router

    quiet_transformers()
    torch.set_num_threads(args.threads)
    result = fit_store_router(args.store, args.budget, args.out, args.fit_problems, args.bins, args.min_cell,
                              args.block)
    print(json.dumps(result, indent=1) if args.json else _summary(result))
    return 0


def _summary(result: dict) -> str:
    held = result["heldout"]
    ratio = held["latency_ratio_hull_over_routed"]
    return (f"router -> {result['router']}: held out, accuracy {held['accuracy']:.3f} at {1000 * held['latency_s']:.1f} "
            f"ms per problem; the static hull reaches that accuracy at "
            + ("(out of reach)" if ratio is None else f"{1000 * held['hull_latency_s_at_accuracy']:.1f} ms "
               f"({ratio:.3f}x the router's latency)") + f"; cells: {result['cells']}, default {result['default']}")
