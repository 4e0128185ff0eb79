"""`specdiff calibrate [CONFIG.toml] --store PATH`: the first paper's throughput model (Section 3.3,
Figure 3) fitted on the testbed and checked against a sweep's measurements.

With CONFIG.toml, the sweep runs first into PATH (`specdiff.runs.sweep.run_sweep`, resumable); without
it PATH must hold a finished sweep. The calibration is `specdiff.runs.calibrate.calibrate` (its
docstring has the steps); Figure 3's panels are `specdiff.eval.calibration_figure`, and the result is
stored in the store, which `specdiff report` shows.
"""
from __future__ import annotations

import base64
import json
from pathlib import Path

from specdiff.argtypes import output_file, positive_int
from specdiff.runs.calibrate import COSTS, MODELS, PREFIXES


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "calibrate", help="fit the throughput model (Eq. 6-7) and compare it with a sweep's measurements",
        description="Measures c_d(K) = a + bK, c_v and d_K on the testbed, predicts acceptance, tokens per round "
                    "and throughput of each Linear(lam) configuration of a sweep store, and reports the relative "
                    "errors. See docs/frontier.md.")
    p.add_argument("config", nargs="?", metavar="CONFIG.toml", help="run this sweep into --store first (resumable)")
    p.add_argument("--store", required=True, metavar="PATH", help="the sweep's SQLite store")
    p.add_argument("--prompts", type=positive_int, default=100, help="problems whose prompts start the prefixes")
    p.add_argument("--cuts", type=positive_int, default=2, help="prefixes per prompt (random cut points)")
    p.add_argument("--steps", type=positive_int, nargs="+", default=None,
                   help="efforts K to time and fit (default: the sweep's)")
    p.add_argument("--seed", type=int, default=0, help="seed of the prefixes and the timed rounds' draws")
    p.add_argument("--model", choices=MODELS, default="eq7",
                   help="the model whose errors are the headline (default eq7: the paper's Eq. 6-7, Prop. 1)")
    p.add_argument("--prefixes", choices=PREFIXES, default="rounds",
                   help="d_K on the round starts of a lossless run at each K (default: H_K), or on the verifier's "
                        "answers cut at random points (one H for every K)")
    p.add_argument("--costs", choices=COSTS, default="timed",
                   help="c_d(K) and c_v from the calibration's own timed rounds (default) or from the sweep's rounds")
    p.add_argument("--plot", type=output_file(".png"), default=None,
                   help="Figure 3's panels (default: STORE with suffix .calibration.png)")
    p.add_argument("--no-plot", action="store_true", help="draw nothing (the store keeps no figure either)")
    p.add_argument("--json", action="store_true", help="print JSON (and no progress bars)")
    p.set_defaults(handler=run)


def run(args) -> int:
    from specdiff.eval.sweepstore import SweepStore
    from specdiff.runs.calibrate import calibrate

    if args.config:
        from specdiff.runs.sweep import run_sweep

        run_sweep(args.config, args.store, progress=not args.json)
    result, summaries = calibrate(args.store, prompts=args.prompts, cuts=args.cuts, steps=args.steps, seed=args.seed,
                                  model=args.model, costs=args.costs, prefix_source=args.prefixes,
                                  progress=not args.json)
    artifact = dict(result)
    if not args.no_plot:
        from specdiff.eval.calibration_figure import figure3_png

        png = figure3_png(result, summaries)
        path = Path(args.plot) if args.plot else Path(args.store).with_suffix(".calibration.png")
        path.write_bytes(png)
        result["plot"] = str(path)
        artifact["figure3_png_base64"] = base64.b64encode(png).decode()
    store = SweepStore(args.store)
    try:
        store.put_artifact("calibration", artifact)
    finally:
        store.close()
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        _print(result)
    return 0


def _print(result: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(Console().width, 120))
    model = result["model"]
    for block, cost in result["costs"].items():
        fit = cost["fit"]
        console.print(f"{block}: c_d(K) = {fit['a_ms']:.3f} + {fit['b_ms']:.3f} K ms (R^2 {fit['r2']:.3f}; measured "
                      + ", ".join(f"{k} {v:.2f}" for k, v in cost["draft_ms"].items())
                      + f"); c_v = {cost['c_v_ms']:.2f} ms ("
                      + ", ".join(f"{k} {v:.2f}" for k, v in cost["c_v_parts_ms"].items())
                      + f"); prefill {cost['prefill_ms']:.2f} ms per problem; costs from {cost['source']}")
        drift = cost.get("sweep_over_timed") or result["costs_other"][block].get("sweep_over_timed", {})
        ratios = ", ".join(f"{k} {v:.2f}" for k, v in drift.items())
        console.print(f"  sweep / timed cost ratios (load drift): {ratios}")
        for mode, per_k in result["distance"][block].items():
            console.print(f"  d_K ({mode}): " + ", ".join(f"{k} {v['d_K']:.3f} ± {v['stderr']:.3f}"
                                                           for k, v in per_k.items()))
    table = Table(title=f"predicted ({model}) / measured")
    for column in ("configuration", "acceptance", "tokens/round", "round ms", "tokens/s", "rel. error tokens/s"):
        table.add_column(column)
    for c in result["configurations"]:
        p, m = c["predicted"][model], c["measured"]
        table.add_row(c["name"], f"{p['acceptance']:.3f} / {m['acceptance']:.3f}",
                      f"{p['tokens_per_round']:.2f} / {m['tokens_per_round']:.2f}",
                      f"{p['round_ms']:.2f} / {m['round_ms']:.2f}", f"{p['throughput']:.0f} / {m['throughput']:.0f}",
                      f"{c['rel_error'][model]['throughput']:+.3f}")
    console.print(table)
    for source, by_model in result["errors_by_costs"].items():
        for name, errors in by_model.items():
            console.print(f"costs {source}, model {name}: "
                          + ", ".join(f"{k} {v:.3f}" for k, v in errors.items() if v is not None))
    console.print(f"prefixes: {result['prefixes']['count']} from {result['prefixes']['source']}; "
                  f"{result['seconds']:.1f} s" + (f"; plot: {result['plot']}" if "plot" in result else ""))
