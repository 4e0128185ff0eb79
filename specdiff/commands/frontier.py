"""`specdiff frontier STORE`: the Pareto frontiers of a sweep (accuracy against latency and against
throughput), jointly over every (K, leniency) and for each fixed K, their hypervolumes (moocore, the
reference point stated), whether each frontier point's lead over the next faster one exceeds the
noise, and the Figure-4-like plot. See specdiff.eval.frontier_result, specdiff.eval.frontier and
docs/frontier.md.
"""
from __future__ import annotations

import json
from pathlib import Path

from specdiff.argtypes import output_file, positive_float
# `compute` and `call_costs` stay importable from here for scripts/leniency_heldout.py (its owner moves it)
from specdiff.eval.frontier_result import frontier_result as compute  # noqa: F401
from specdiff.runs.call_costs import store_call_costs as call_costs  # noqa: F401


def register(subparsers) -> None:
    p = subparsers.add_parser("frontier", help="Pareto frontiers and hypervolumes of a sweep store",
                              description="Accuracy against latency and throughput: the joint frontier over every "
                                          "(K, leniency) against each fixed-K frontier, with hypervolumes.")
    p.add_argument("store", metavar="STORE", help="a store written by `specdiff sweep`")
    p.add_argument("--plot", type=output_file(".png"), default=None,
                   help="the frontier figure (default: STORE with suffix .frontier.png)")
    p.add_argument("--no-plot", action="store_true", help="draw nothing")
    p.add_argument("--latency-ref", type=positive_float, default=None,
                   help="latency of the hypervolume reference point, s (default 1.1 x the slowest configuration)")
    p.add_argument("--include-incomplete", action="store_true",
                   help="also use configurations that do not have every problem yet")
    p.add_argument("--cost", choices=("wall", "calls"), default="wall",
                   help="the speed axes: measured wall time (default), or each row's model calls priced with "
                        "per-call costs measured once on this machine (noise-free; stored in the store)")
    p.add_argument("--costs", default=None, metavar="JSON",
                   help="with --cost calls: per-call costs from this file (specdiff.runs.call_costs' output) "
                        "instead of the store's own (measured and stored on first use)")
    p.add_argument("--remeasure-costs", action="store_true", help="with --cost calls: measure the costs again")
    p.add_argument("--honest", action="store_true",
                   help="also the constrained reference (best lossless accuracy - 5 points, plain decoding's speed), "
                        "the static configurations' convex hull, speedup at <= 0.5 / 1 point accuracy loss and "
                        "paired bootstrap intervals (specdiff.eval.frontier_honest)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=run)


def run(args) -> int:
    from specdiff.eval.frontier_result import frontier_result
    from specdiff.runs.call_costs import store_call_costs

    costs = store_call_costs(args.store, args.costs, args.remeasure_costs) if args.cost == "calls" else None
    out, sweep = frontier_result(args.store, args.latency_ref, args.include_incomplete, costs, args.honest)
    if not args.no_plot:
        from specdiff.eval.figures import frontier_png

        path = Path(args.plot) if args.plot else Path(args.store).with_suffix(".frontier.png")
        settings = sweep["settings"]
        title = (f"{settings['models']['drafter']} -> {settings['models']['verifier']} on {settings['task']['name']} "
                 f"({settings['task']['problems']} problems)")
        path.write_bytes(frontier_png(sweep["summaries"], out, title))
        out["plot"] = str(path)
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        _print(out)
    return 0


def _print(out: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(Console().width, 120))
    for axis in ("latency", "throughput"):
        result = out[axis]
        key = "latency_s" if axis == "latency" else "throughput"
        table = Table(title=f"{axis} frontier (fastest first)")
        for column in ("configuration", "accuracy", key, "lead over next faster", "exceeds noise"):
            table.add_column(column)
        for p in result["frontier"]:
            lead = "-" if p["lead"] is None else f"{p['lead']:+.3f} ± {p['lead_se']:.3f} (z {p['lead_z']:.2f})"
            table.add_row(p["name"], f"{p['accuracy']:.3f} ± {p['accuracy_se']:.3f}", f"{p[key]:.4g}", lead,
                          "-" if p["lead"] is None else ("yes" if p["lead_exceeds_noise"] else "no"))
        console.print(table)
        ratio = result["hypervolume_ratio"]
        console.print(f"hypervolume joint {result['hypervolume_joint']:.4g}, best single K "
                      f"({result['best_single_k']}) {result['hypervolume_best_single_k']:.4g}, ratio "
                      f"{'-' if ratio is None else f'{ratio:.3f}'}; reference point {result['reference_point']} "
                      f"({out['library']})")
    if out["incomplete"]:
        console.print(f"left out (not finished): {', '.join(c['name'] for c in out['incomplete'])}")
    if "plot" in out:
        console.print(f"plot: {out['plot']}")
