"""`specdiff report STORE`: one self-contained HTML page of a sweep (settings, frontiers and their
hypervolumes, calibration, one row per configuration, accepted-length histograms); see
specdiff.eval.report.
"""
from __future__ import annotations

import json
from pathlib import Path

from specdiff.argtypes import output_file, positive_float


def register(subparsers) -> None:
    p = subparsers.add_parser("report", help="a self-contained HTML report of a sweep store",
                              description="Writes one HTML page (figures embedded, no network references).")
    p.add_argument("store", metavar="STORE", help="a store written by `specdiff sweep`")
    p.add_argument("--out", type=output_file(".html", ".htm"), default=None,
                   help="the page (default: STORE with suffix .report.html)")
    p.add_argument("--latency-ref", type=positive_float, default=None,
                   help="latency of the hypervolume reference point, s (default 1.1 x the slowest configuration)")
    p.add_argument("--cost", choices=("wall", "calls"), default="wall",
                   help="the speed axes: measured wall time (default), or the rows' model calls priced once "
                        "(as `specdiff frontier --cost calls`)")
    p.add_argument("--costs", metavar="JSON", default=None,
                   help="with --cost calls: per-call costs from this file instead of the store's own")
    p.add_argument("--json", action="store_true", help="print where the page went as JSON")
    p.set_defaults(handler=run)


def run(args) -> int:
    from specdiff.eval.report import build_report
    from specdiff.runs.call_costs import store_call_costs

    if args.costs is not None and args.cost != "calls":
        raise ValueError("--costs prices the calls axis: give it with --cost calls")
    path = Path(args.out) if args.out else Path(args.store).with_suffix(".report.html")
    costs = store_call_costs(args.store, args.costs) if args.cost == "calls" else None
    page = build_report(args.store, args.latency_ref, costs)
    path.write_text(page)
    if args.json:
        print(json.dumps({"report": str(path), "bytes": len(page.encode())}))
    else:
        print(f"report: {path}")
    return 0
