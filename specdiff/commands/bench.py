"""`specdiff bench`: registers its subcommands, one module each (verify, speedup and tune, stateful, leniency,
vllm); the benches themselves live in `specdiff.bench`."""
from __future__ import annotations


def register(subparsers) -> None:
    from specdiff.commands import bench_leniency, bench_speedup, bench_stateful, bench_verify, bench_vllm

    bench = subparsers.add_parser("bench", help="benchmarks that print JSON (ratios measured side by side)")
    which = bench.add_subparsers(dest="bench_target", metavar="TARGET")
    bench_verify.register(which)
    bench_speedup.register(which)
    bench_stateful.register(which)
    bench_leniency.register(which)
    bench_vllm.register(which)
    bench.set_defaults(handler=lambda args: (bench.print_help(), 0)[1])
