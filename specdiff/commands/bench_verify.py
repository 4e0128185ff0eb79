"""`specdiff bench verify`: our batched verify() beside transformers' _speculative_sampling and a read-once floor
(`specdiff.bench.verify`): parse, call, print."""
from __future__ import annotations

import json
import os

from specdiff.argtypes import positive_int


def register(which) -> None:
    verify = which.add_parser("verify", help="time verify() against transformers' speculative sampling and a read-once floor")
    verify.add_argument("--json", action="store_true", help="print only the JSON result")
    verify.add_argument("--threads", type=positive_int, default=min(2, os.cpu_count() or 1),
                        help="torch threads (default: min(2, cores))")
    verify.add_argument("--repeats", type=positive_int, default=7, help="timed repeats per case; the median is reported")
    verify.add_argument("--block", type=positive_int, default=16, help="draft length B (default 16)")
    verify.add_argument("--vocab", type=positive_int, nargs="+", default=[151_936, 32_000], help="vocabulary sizes")
    verify.add_argument("--batch", type=positive_int, nargs="+", default=[1, 8], help="batch sizes")
    verify.add_argument("--delta", type=float, default=0.5, help="Cactus KL budget for the Cactus timing")
    verify.add_argument("--seed", type=int, default=0)
    verify.set_defaults(handler=run_verify_bench)


def run_verify_bench(args) -> int:
    from specdiff.bench.verify import verify_bench

    result = verify_bench(args.threads, args.repeats, args.block, args.vocab, args.batch, args.delta, args.seed,
                          None if args.json else print)
    print(json.dumps(result, indent=None if args.json else 2))
    return 0
