"""`specdiff sweep CONFIG.toml --store PATH`: every combination of the config's [grid] lists is one
generation configuration (diffusion effort K or tau, leniency rule and its lam / eps / delta, method,
proposal, block size), run on the task's problems one at a time (batch 1: latency is per problem).

The config is checked in full before anything runs (`specdiff.runs.sweep_config`); the run is
`specdiff.runs.sweep.run_sweep`: one resumable row of the SQLite store per (configuration, problem).
docs/frontier.md describes the keys.
"""
from __future__ import annotations

import json
import sys

# LENIENCY_KEYS and load_config stay importable from here for scripts/leniency_heldout.py (its owner moves it)
from specdiff.runs.sweep_config import LENIENCY_KEYS, load_config  # noqa: F401


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
    p.add_argument("--dtype", choices=("auto", "float32", "bfloat16"), default=None,
                   help="a real verifier's dtype (overrides [run] dtype; default auto: bfloat16 where the hardware "
                        "computes it natively, else float32; the testbed's models stay float32)")
    p.add_argument("--check", action="store_true", help="check the config and print the configurations; run nothing")
    p.add_argument("--json", action="store_true", help="print the summary as JSON (and no progress bars)")
    p.set_defaults(handler=run)


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
    from specdiff.runs.sweep import run_sweep

    summary = run_sweep(args.config, args.store, args.backend, args.workers, args.ray_address,
                        progress=not args.json, dtype=args.dtype)
    print(json.dumps(summary, indent=1))
    if not args.json:
        print(f"next: specdiff frontier {args.store}   |   specdiff report {args.store}", file=sys.stderr)
    return 0
