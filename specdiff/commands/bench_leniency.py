"""`specdiff bench leniency`: the leniency rule tuned on validation problems against the best lossless
configuration of the same drafter, re-measured in one run on test problems never tuned on (issue 22).

1. Per-call costs of the drafter and verifier are measured once (`specdiff.runs.call_costs`), so that
   tuning orders configurations by priced calls, which machine noise cannot move.
2. Tuning, on `--tune-problems` validation problems: every K of `--steps` losslessly, and every rule of
   the candidate grid (`CANDIDATES`: Typical, Gated Linear, Gated Cactus, the untruncated variants) at
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
import statistics

from specdiff.argtypes import nonnegative_int, positive_int

# (name, RunConfig keywords): the lenient candidates tuned at every K
CANDIDATES = (
    ("typical eps=0.05", dict(rule="typical", leniency=0.05)),
    ("typical eps=0.09", dict(rule="typical", leniency=0.09)),
    ("typical eps=0.2", dict(rule="typical", leniency=0.2)),
    ("gated linear lam=0.3 top<=0.7", dict(rule="linear", leniency=0.3, gate_top=0.7)),
    ("gated linear lam=1 top<=0.5", dict(rule="linear", leniency=1.0, gate_top=0.5)),
    ("gated cactus delta=2 H>=0.5", dict(rule="cactus", leniency=2.0, gate_entropy=0.5)),
    ("gated cactus delta=8 H>=0.5", dict(rule="cactus", leniency=8.0, gate_entropy=0.5)),
    ("typical eps=0.09 untruncated", dict(rule="typical", leniency=0.09, support="untruncated")),
    ("gated cactus delta=8 H>=0.5 untruncated", dict(rule="cactus", leniency=8.0, gate_entropy=0.5,
                                                     support="untruncated")),
)
BOOTSTRAP = 1000


def register(which) -> None:
    p = which.add_parser("leniency", help="the validation-tuned leniency rule against the best lossless "
                                          "configuration, on held-out test problems (JSON)",
                         description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print only the JSON result")
    p.add_argument("--drafter", choices=("masked", "block"), default="masked", help="drafter kind (its zoo model)")
    p.add_argument("--steps", type=positive_int, nargs="+", default=[2, 4], help="K grid (default 2 4)")
    p.add_argument("--threshold", type=float, nargs="+", default=None,
                   help="a confidence-threshold grid tau in (0, 1] to tune over instead of K")
    p.add_argument("--block-size", type=positive_int, default=16, help="B (default 16; the block drafter caps it)")
    p.add_argument("--tune-problems", type=positive_int, default=60, help="validation problems (default 60)")
    p.add_argument("--problems", type=positive_int, default=200, help="test problems measured (default 200)")
    p.add_argument("--first-problem", type=nonnegative_int, default=0, help="the first test problem")
    p.add_argument("--repeats", type=positive_int, default=3, help="interleaved measurement rounds (default 3)")
    p.add_argument("--loss", type=float, default=0.01, help="accuracy loss allowed on validation (default 0.01)")
    p.add_argument("--max-new-tokens", type=positive_int, default=96)
    p.add_argument("--threads", type=positive_int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(handler=run)


def run(args) -> int:
    import torch

    from specdiff.eval import tasks
    from specdiff.eval.pricing import price_ms
    from specdiff.drafters import registry
    from specdiff.models import DRAFTER_KINDS
    from specdiff.runs import ModelCache, RunConfig, run_config
    from specdiff.runs.call_costs import measure_call_costs
    from specdiff.runs.model_cache import quiet_transformers

    if not 0 <= args.loss < 1:
        raise ValueError(f"--loss must be in [0, 1), got {args.loss}")
    if args.threshold is not None and not all(0 < tau <= 1 for tau in args.threshold):
        raise ValueError(f"--threshold values must be in (0, 1], got {args.threshold}")
    quiet_transformers()
    torch.set_num_threads(args.threads)
    say = (lambda *a: None) if args.json else (lambda *a: print(*a, flush=True))
    drafter = DRAFTER_KINDS[args.drafter]
    cache = ModelCache()
    block = args.block_size
    length = getattr(cache.get(drafter, "drafter"), "block_length", None)  # a block drafter's trained length
    block = min(block, length) if length else block
    proposal = registry.get(args.drafter).leniency_proposal  # the block drafter: exact only in point mass
    costs = measure_call_costs("verifier", drafter, threads=args.threads)
    tune = tasks.arith_problems("validation", args.tune_problems)
    test = tasks.arith_problems("test", args.first_problem + args.problems)[args.first_problem:]

    # the effort grid: K denoising steps, or confidence thresholds tau when --threshold is given
    efforts = ([(f"tau={tau}", dict(threshold=tau)) for tau in args.threshold] if args.threshold
               else [(f"K={steps}", dict(steps=steps)) for steps in args.steps])

    def config(name, effort, **rule):
        label, knob = effort
        return RunConfig(f"{label} {name}", drafter=drafter, block_size=block, proposal=proposal, **knob, **rule)

    def measure(run, problems, seed):
        result = run_config(run, [p.prompt for p in problems], [p.target for p in problems], cache,
                            args.max_new_tokens, seed=seed, is_correct=tasks.is_correct)
        priced = sum(price_ms(r["calls"], costs) for r in result["records"]) / 1000
        forwards = sum(r["calls"]["verifier_forwards"] for r in result["records"])
        result.update(priced_throughput=result["new_tokens"] / priced, tokens_per_call=result["new_tokens"] / forwards)
        return result

    run_config(config("lossless", efforts[0]), [tune[0].prompt], None, cache, 16)  # warm-up: load both models
    grid = []
    for effort in efforts:
        for name, rule in (("lossless", {}),) + CANDIDATES:
            result = measure(config(name, effort, **rule), tune, args.seed)
            grid.append(dict(config=config(name, effort, **rule).as_dict(), lossless=name == "lossless",
                             **{k: result[k] for k in ("accuracy", "tokens_per_round", "tokens_per_call",
                                                       "priced_throughput", "tokens_per_s")}))
            say(f"tune {grid[-1]['config']['name']}: accuracy {result['accuracy']:.3f}, "
                f"{result['tokens_per_call']:.2f} tokens/call, {result['priced_throughput']:.0f} priced tokens/s")
    lossless = max((row for row in grid if row["lossless"]), key=lambda row: row["priced_throughput"])
    allowed = [row for row in grid if not row["lossless"] and row["accuracy"] >= lossless["accuracy"] - args.loss
               and row["priced_throughput"] > lossless["priced_throughput"]]
    chosen = max(allowed, key=lambda row: row["priced_throughput"]) if allowed else lossless
    say(f"lossless: {lossless['config']['name']}; chosen: {chosen['config']['name']}")

    runs = {"lossless": [], "lenient": []}
    for repeat in range(args.repeats):
        for key, row in (("lossless", lossless), ("lenient", chosen)):
            runs[key].append(measure(RunConfig(**row["config"]), test, args.seed + repeat))
            say(f"repeat {repeat + 1}/{args.repeats} {key}: {runs[key][-1]['tokens_per_s']:.0f} tokens/s")
    result = _report(runs, costs, args)
    result.update(chosen=chosen["config"]["name"], lossless=lossless["config"]["name"],
                  chosen_config=chosen["config"], lossless_config=lossless["config"],
                  no_lenient_rule_qualified=not allowed, tuning=grid, call_costs=costs,
                  drafter=args.drafter, test_problems=[args.first_problem, args.first_problem + args.problems],
                  tune_problems=args.tune_problems, seed=args.seed, repeats=args.repeats, loss=args.loss)
    print(json.dumps(result, indent=1))
    return 0


def _report(runs: dict, costs: dict, args) -> dict:
    """The held-out figures and their paired-bootstrap intervals over test problems.

    Each problem's tokens, wall and priced seconds and verifier forwards are summed over the repeats (and
    its correctness averaged), so that every point estimate is the statistic of the same pooled records
    that the bootstrap resamples, problem by problem, for both configurations at once (paired).
    """
    import numpy as np

    from specdiff.eval.pricing import price_ms

    def per_problem(key):  # [repeats, problems] -> [problems]
        rows = [run["records"] for run in runs[key]]
        table = {"tokens": [[r["new_tokens"] for r in rs] for rs in rows],
                 "wall": [[r["wall_s"] for r in rs] for rs in rows],
                 "priced": [[price_ms(r["calls"], costs) for r in rs] for rs in rows],
                 "forwards": [[r["calls"]["verifier_forwards"] for r in rs] for rs in rows],
                 "correct": [[float(r["correct"]) for r in rs] for rs in rows]}
        out = {name: np.array(values, dtype=float).sum(axis=0) for name, values in table.items()}
        out["correct"] /= len(rows)
        return out

    arrays = {key: per_problem(key) for key in runs}

    def figures(pick):
        a, b = ({k: v[pick] for k, v in arrays[key].items()} for key in ("lossless", "lenient"))
        return {"tokens_per_call_ratio": (b["tokens"].sum() / b["forwards"].sum()) / (a["tokens"].sum() / a["forwards"].sum()),
                "throughput_ratio": (b["tokens"].sum() / b["wall"].sum()) / (a["tokens"].sum() / a["wall"].sum()),
                "priced_throughput_ratio": (b["tokens"].sum() / b["priced"].sum()) / (a["tokens"].sum() / a["priced"].sum()),
                "accuracy_difference": b["correct"].mean() - a["correct"].mean()}

    n = len(arrays["lossless"]["tokens"])
    point = figures(np.arange(n))
    rng = np.random.default_rng(args.seed)
    samples = [figures(rng.integers(0, n, n)) for _ in range(BOOTSTRAP)]
    out = {"accuracy_lossless": float(arrays["lossless"]["correct"].mean()),
           "accuracy_lenient": float(arrays["lenient"]["correct"].mean()),
           **{key: float(value) for key, value in point.items()},
           # the whole-run ratio of each repeat (tokens over the run's wall time), for the spread between repeats
           "throughput_ratios_per_repeat": [b["tokens_per_s"] / a["tokens_per_s"]
                                            for a, b in zip(runs["lossless"], runs["lenient"])],
           "tokens_per_round_lossless": statistics.fmean(r["tokens_per_round"] for r in runs["lossless"]),
           "tokens_per_round_lenient": statistics.fmean(r["tokens_per_round"] for r in runs["lenient"]),
           "bootstrap": {"resamples": BOOTSTRAP, "paired": True,
                         "over": f"{n} test problems, each pooled over {len(runs['lossless'])} repeats"}}
    for key in ("tokens_per_call_ratio", "throughput_ratio", "priced_throughput_ratio", "accuracy_difference"):
        values = [s[key] for s in samples]
        out[f"{key}_95"] = [float(np.percentile(values, 2.5)), float(np.percentile(values, 97.5))]
    return out
