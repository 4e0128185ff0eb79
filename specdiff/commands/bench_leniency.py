"""`specdiff bench leniency`: the leniency rule tuned on validation problems against the best lossless
configuration of the same drafter, re-measured in one run on test problems never tuned on (issue 22).

1. Per-call costs of the drafter and verifier are measured once (`specdiff.runs.call_costs`), so that
   tuning orders configurations by priced calls, which machine noise cannot move.
2. Tuning, on `--tune-problems` validation problems: every K of `--steps` losslessly, and every rule of
   the candidate grid (`specdiff.bench.leniency.CANDIDATES`: Typical, Gated Linear, Gated Cactus, the untruncated variants) at
   every K. The best lossless configuration is the one of highest priced throughput; the chosen rule
   is the lenient configuration of highest priced throughput whose validation accuracy is at most
   `--loss` below the best lossless one's (if none qualifies, the lossless one is "chosen").
3. Measurement, on test problems [first, first + problems): the two configurations alternate for
   `--repeats` rounds (interleaved), one problem at a time, with the same prompts and seeds.

JSON keys: `chosen` and `lossless` (the two configurations), `accuracy_lossless`, `accuracy_lenient`,
`tokens_per_call_ratio` (new tokens per verifier forward, lenient over lossless), `throughput_ratio`
(tokens per wall second of generation), `priced_throughput_ratio` (tokens per priced second) and
`accuracy_difference`, each over the test problems pooled across repeats and with a paired-bootstrap
95% interval over problems (`*_95`); `throughput_ratios_per_repeat` (each repeat's whole-run ratio);
and the tuning grid.
"""
from __future__ import annotations

import json

from specdiff.argtypes import nonnegative_int, positive_int

def register(which) -> None:
    from specdiff.bench.leniency import LeniencySettings
    from specdiff.bench.settings import leniency_kinds

    default = LeniencySettings(drafter=leniency_kinds()[0])  # the flags' defaults
    p = which.add_parser("leniency", help="the validation-tuned leniency rule against the best lossless "
                                          "configuration, on held-out test problems (JSON)",
                         description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print only the JSON result")
    p.add_argument("--drafter", choices=leniency_kinds(), default=default.drafter,
                   help="drafter kind (its zoo model; specdiff/bench/kinds.toml names the kinds this bench takes)")
    p.add_argument("--steps", type=positive_int, nargs="+", default=list(default.steps),
                   help=f"K grid (default {' '.join(map(str, default.steps))})")
    p.add_argument("--threshold", type=float, nargs="+", default=None,
                   help="a confidence-threshold grid tau in (0, 1] to tune over instead of K")
    p.add_argument("--block-size", type=positive_int, default=default.block_size,
                   help=f"B (default {default.block_size}; the block drafter caps it)")
    p.add_argument("--tune-problems", type=positive_int, default=default.tune_problems,
                   help=f"validation problems (default {default.tune_problems})")
    p.add_argument("--problems", type=positive_int, default=default.problems,
                   help=f"test problems measured (default {default.problems})")
    p.add_argument("--first-problem", type=nonnegative_int, default=default.first_problem,
                   help="the first test problem")
    p.add_argument("--repeats", type=positive_int, default=default.repeats,
                   help=f"interleaved measurement rounds (default {default.repeats})")
    p.add_argument("--loss", type=float, default=default.loss,
                   help=f"accuracy loss allowed on validation (default {default.loss})")
    p.add_argument("--max-new-tokens", type=positive_int, default=default.max_new_tokens)
    p.add_argument("--threads", type=positive_int, default=default.threads)
    p.add_argument("--seed", type=int, default=default.seed)
    p.set_defaults(handler=run)


def run(args) -> int:
    import torch

    from specdiff.bench.leniency import run_leniency
    from specdiff.models import quiet_transformers

    if not 0 <= args.loss < 1:
        raise ValueError(f"--loss must be in [0, 1), got {args.loss}")
    if args.threshold is not None and not all(0 < tau <= 1 for tau in args.threshold):
        raise ValueError(f"--threshold values must be in (0, 1], got {args.threshold}")
    quiet_transformers()
    torch.set_num_threads(args.threads)
    say = (lambda *a: None) if args.json else (lambda *a: print(*a, flush=True))
    print(json.dumps(run_leniency(settings_of(args), say), indent=1))
    return 0


def settings_of(args):
    """The command's flags -> `bench.leniency.LeniencySettings`."""
    from specdiff.bench.leniency import LeniencySettings

    return LeniencySettings(drafter=args.drafter, steps=tuple(args.steps),
                            threshold=None if args.threshold is None else tuple(args.threshold),
                            block_size=args.block_size, tune_problems=args.tune_problems, problems=args.problems,
                            first_problem=args.first_problem, repeats=args.repeats, loss=args.loss,
                            max_new_tokens=args.max_new_tokens, threads=args.threads, seed=args.seed)
