"""`specdiff bench vllm`: vLLM + specdiff beside specdiff's own engine, tokens/s at 1 and 32 requests.

This module parses and prints; the bench itself is `specdiff.integrations.vllm.bench`.
Run it in the vLLM environment (`scripts/vllm_env.sh VENV`; `VENV/bin/specdiff bench vllm --json`).
On the same models, prompts and settings it times:
- vLLM with the plugin: `draft_model` drafting, Linear(lam) (`additional_config`);
- vLLM with `DiffusionProposer`: a masked diffusion drafter, K steps, point-mass verification;
- specdiff's engine (`SpeculativeGenerator`): the same draft model (autoregressive drafter, greedy,
  point mass as vLLM's default greedy drafting), and the same masked drafter, with the same rule.
At each concurrency c, c requests arrive together and each generates `--tokens` tokens (EOS ignored);
tokens/s = c * tokens / wall time, the median of `--repeats` timed runs after one warm-up. vLLM runs in
this process (VLLM_ENABLE_V1_MULTIPROCESSING=0, one worker) with a fixed torch thread count, as the
engine does. Without --verifier, a tiny Qwen3 pair (head_dim 32, which vLLM's CPU attention needs) and a
masked drafter from the target's weights are built in a temporary directory: the zoo's testbed models
(head_dim 24 and 16) do not load in vLLM's CPU backend.

`--dtype float32|bfloat16` (default: bfloat16 where the hardware has it natively, CPU avx512_bf16 or AMX,
or CUDA; else float32; `specdiff.integrations.vllm.bench.default_dtype`): the dtype vLLM and specdiff's
engine run in, named in the JSON's settings.

`--verifier` names the target model on every bench subcommand. With `--draft` (and `--masked`) it is the pair
bench above on that checkpoint; alone, `--verifier NAME|FOLDER` (a real verifier: a fetched name such as
smollm2-135m-instruct, or its converted folder) times vLLM on it without speculation and with `DiffusionProposer` running `--drafter` (a masked
drafter specdiff distilled for it: its name, e.g. smollm2-135m-instruct-masked, the default where shipped,
or a folder), on the bench's held-out chat prompts (`specdiff.runs.prompts.TEST_FILE`, through the
verifier's chat template, cycled to the largest concurrency), Lossless unless `--lam` > 0 (Linear),
at `--temperature` / `--top-p`. Rows: "vllm no speculation" and "vllm DiffusionProposer <rule>"; ratios
`vllm_speculative_over_plain_c<c>`.

`--arrivals poisson` (staggered arrivals, where continuous batching differs from static batches):
`--requests` requests arrive at Poisson times at `--rate` per second, with output lengths uniform in
`--min-tokens`..`--tokens`, at most c in flight; the engines and concurrencies run interleaved, each
repeat in turn, and each reports tokens/s and per-request latency (mean, p50, p90).
"""
from __future__ import annotations

import json
import os
import sys

from specdiff.argtypes import positive_float, positive_int


def register(which) -> None:
    parser = which.add_parser("vllm", help="vLLM + specdiff (plugin, DiffusionProposer) against specdiff's engine")
    parser.add_argument("--json", action="store_true", help="print only the JSON result")
    parser.add_argument("--target", help="deprecated alias of --verifier (the target checkpoint, with --draft)")
    parser.add_argument("--draft", help="draft model for draft_model drafting (default: built with the target); "
                                        "with --verifier: the pair bench on those checkpoints")
    parser.add_argument("--masked", "--drafter", dest="masked",
                        help="masked diffusion drafter for DiffusionProposer (default: built; with --verifier, the "
                             "masked drafter distilled for it: a name or a folder)")
    parser.add_argument("--verifier", help="the target model (default: a tiny Qwen3 built here). With --draft and "
                                           "--masked: the pair bench on those checkpoints; alone, a real verifier (a "
                                           "fetched name or its converted folder): vLLM without speculation against "
                                           "vLLM + DiffusionProposer, on chat prompts")
    parser.add_argument("--concurrency", type=positive_int, nargs="+", default=[1, 32])
    parser.add_argument("--tokens", type=positive_int, default=64, help="tokens generated per request")
    parser.add_argument("--block", type=positive_int, default=4, help="drafted tokens per round (B)")
    parser.add_argument("--lam", type=float, default=None,
                        help="Linear's lam (default 0.5; with --verifier 0: Lossless)")
    parser.add_argument("--temperature", type=float, default=1.0, help="the requests' temperature (0: greedy)")
    parser.add_argument("--top-p", type=float, default=1.0, help="the requests' top-p")
    parser.add_argument("--steps", type=positive_int, default=2, help="the masked drafter's K")
    parser.add_argument("--repeats", type=positive_int, default=3)
    parser.add_argument("--threads", type=positive_int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default=None,
                        help="the dtype vLLM and specdiff's engine run in (default: bfloat16 where the CPU has "
                             "avx512_bf16 or AMX, or CUDA is available; else float32)")
    parser.add_argument("--arrivals", choices=("together", "poisson"), default="together",
                        help="together: c requests arrive at once, all of --tokens tokens; poisson: --requests "
                             "requests arrive over time at --rate per second with output lengths drawn uniformly "
                             "from --min-tokens..--tokens, at most c in flight (c = each --concurrency)")
    parser.add_argument("--rate", type=positive_float, default=8.0, help="poisson: requests per second")
    parser.add_argument("--requests", type=positive_int, default=48, help="poisson: requests per run")
    parser.add_argument("--min-tokens", type=positive_int, default=None,
                        help="poisson: shortest output length (default --tokens / 4)")
    parser.set_defaults(handler=run)


def run(args) -> int:
    if args.target is not None:  # the old spelling of the target model
        if args.verifier is not None and args.verifier != args.target:
            raise ValueError("--target is a deprecated alias of --verifier: give one of them")
        if args.draft is None:  # --target always named the pair bench's target; it never ran the real-verifier bench
            raise ValueError("--target names the pair bench's target checkpoint and needs --draft (and --masked); "
                             "for the real-verifier bench give --verifier alone")
        print("specdiff bench vllm: --target is deprecated, use --verifier", file=sys.stderr)
        args.verifier = args.target

    from specdiff.integrations.vllm import bench

    report = bench.run(args, log=None if args.json else _log)
    print(json.dumps(report, indent=None if args.json else 2))
    return 0


def _log(rows) -> None:
    for row in rows:
        latency = (f"  latency mean {row['latency_mean_s']:.3f} s p50 {row['latency_p50_s']:.3f} "
                   f"p90 {row['latency_p90_s']:.3f}" if "latency_mean_s" in row else "")
        print(f"{row['engine']:40s} c={row['concurrency']:3d}  {row['tokens_per_s']:9.1f} tok/s  "
              f"acceptance {row['acceptance']}{latency}", flush=True)
