"""`specdiff demo`: the main job on the shipped testbed.

On the first `--problems` arith test problems, one problem at a time, it runs plain autoregressive
decoding of the verifier, classic speculative decoding with the small autoregressive drafter, and
speculative diffusion with the masked diffusion drafter at a few (effort K, leniency) points
(`--drafter uniform|block|dflash|ar`, repeatable: that kind's zoo model at its own effort knob). It
prints accuracy, tokens/s, latency, speedup over plain decoding, mean accepted tokens per round
and whether the configuration is lossless, and writes a PNG of accuracy against throughput. The rows
are timed interleaved: the problems run in chunks of `INTERLEAVE`, every row on each chunk in turn, so
that a change of machine load moves every row alike (the masked kind also shows its adaptive row).

`specdiff demo --rules` is the synthetic one-position demo of every acceptance rule
(`specdiff.runs.rules_demo`). `specdiff demo --real` is the real pair (SmolLM2-135M-Instruct with plain decoding,
prompt lookup, its DFlash drafter, the hybrid and a draft tree: `specdiff.bench.demo_real`).
"""
from __future__ import annotations

import argparse
import json
import os

from specdiff.argtypes import positive_int
from specdiff.runs.rules_demo import MAX_VOCAB

INTERLEAVE = 10  # kept for old imports; the runs live in `specdiff.runs.demo`


def register(subparsers) -> None:
    demo = subparsers.add_parser(
        "demo", help="the main job: speculative diffusion on the shipped testbed, beside plain and AR-drafted decoding",
        description="Speculative diffusion on the shipped testbed (arith test problems): plain decoding of the "
                    "verifier, classic speculative decoding, and masked-diffusion drafting at several (K, leniency) "
                    "points. --rules: the synthetic one-position demo of every acceptance rule.")
    demo.add_argument("--json", action="store_true", help="print JSON instead of a table")
    demo.add_argument("--drafter", action="append", choices=_kind_choices(), default=None, metavar="KIND",
                      help="drafter kind whose rows run beside the baselines: masked (default), uniform, block, "
                           "dflash or ar (its zoo model, at its own effort knob; repeat to compare kinds)")
    demo.add_argument("--problems", type=positive_int, default=50, help="arith test problems (default 50)")
    demo.add_argument("--max-new-tokens", type=positive_int, default=96, help="per problem (default 96)")
    demo.add_argument("--threads", type=positive_int, default=None,
                      help="torch threads (default 1 for the main job: batch-1 decoding of the tiny testbed is bound "
                           "by per-op overhead, and a second thread only adds barrier waits; min(2, cores) for --rules)")
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--controller", default=None, metavar="NAME",
                      help=f"the run-time controller of the masked drafter's adaptive row (default "
                           f"{_default_controller()}; docs/adaptive.md)")
    demo.add_argument("--plot", metavar="PNG", default="demo_frontier.png",
                      help="accuracy against throughput (default demo_frontier.png; with --real demo_real_frontier.png: "
                           "speedup against tokens per round; '' for none)")
    demo.add_argument("--rules", action="store_true", help="the synthetic demo of every acceptance rule instead")
    demo.add_argument("--real", action="store_true",
                      help="the real pair instead: SmolLM2-135M-Instruct (fetched when missing) with plain decoding, "
                           "prompt lookup, its DFlash drafter, the hybrid and a draft tree side by side (about 3 min)")
    demo.add_argument("--dtype", choices=("float32", "bfloat16"), default=None,
                      help="--real: the real models' dtype (default: bfloat16 where the hardware has it, else float32)")
    rules = demo.add_argument_group("--rules options")
    rules.add_argument("--samples", type=positive_int, default=None,
                       help="rows verified per rule (default: 100,000, fewer for a large --vocab so that a rule "
                            "takes seconds: max(1,000, min(100,000, 2^24 / V)))")
    rules.add_argument("--vocab", type=vocab_size, default=64,
                       help=f"vocabulary size V of the synthetic pair, 2..{MAX_VOCAB:,} (default 64)")
    rules.add_argument("--block", type=positive_int, default=4, help="draft length B for the token/block comparison")
    demo.set_defaults(handler=run)


def vocab_size(text: str) -> int:
    """argparse `type=` for --vocab: an integer in 2..MAX_VOCAB, refused by name otherwise."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
    if not 2 <= value <= MAX_VOCAB:
        raise argparse.ArgumentTypeError(
            f"must lie in 2..{MAX_VOCAB:,}, got {text!r} (the demo verifies --samples rows of V tokens "
            "per rule; `specdiff bench verify --vocab` times verify() at real vocabulary sizes)"
        )
    return value


def default_threads(args) -> int:
    """--threads when not given: 1 for the main job (see its help), min(2, cores) for --rules."""
    if args.threads is not None:
        return args.threads
    return min(2, os.cpu_count() or 1) if args.rules else 1


def run(args) -> int:
    args.threads = default_threads(args)
    if args.plot:
        _check_writable(args.plot)
    if args.rules and args.real:
        raise ValueError("--rules and --real are two different demos: give one")
    if args.rules:
        args.plot = args.plot if args.plot != "demo_frontier.png" else None
        return _run_rules(args)
    if args.real:
        if args.drafter or args.controller:
            raise ValueError("--drafter and --controller are the testbed demo's; --real runs its own rows "
                             "(`specdiff bench speedup --verifier smollm2-135m-instruct` measures any drafter)")
        return _run_real(args)
    if args.dtype:
        raise ValueError("--dtype is for --real: the testbed models are float32")
    import torch

    from specdiff.runs.demo import default_kinds, run_demo, save_frontier_plot
    from specdiff.models import quiet_transformers

    quiet_transformers()
    torch.set_num_threads(args.threads)
    if args.controller is not None:
        from specdiff.engine.controllers import parse_controller

        try:
            if parse_controller(args.controller) is None:
                raise ValueError("the adaptive row needs a controller, not 'none'")
        except ValueError as error:
            raise ValueError(f"--controller: {error}") from None
    out = run_demo(args.drafter or default_kinds(), args.problems, args.max_new_tokens, args.seed, args.controller,
                   show_progress=not args.json)
    out["threads"] = args.threads
    if args.plot:
        out["plot"] = save_frontier_plot(out["rows"], args.plot)
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        _print_table(out)
    return 0


def _run_real(args) -> int:
    """`demo --real`: the real pair through the one bench (`specdiff.bench.demo_real`)."""
    import sys

    from specdiff.bench.demo_real import real_demo, table_rows

    plot = None if not args.plot else ("demo_real_frontier.png" if args.plot == "demo_frontier.png" else args.plot)
    say = (lambda *a: print(*a, file=sys.stderr)) if args.json else print
    report = real_demo(args.dtype, plot, say, show_progress=not args.json)
    if args.json:
        print(json.dumps({key: report[key] for key in report if key not in ("tuning", "settings")}, indent=1))
        return 0
    _print_real_table(report, table_rows(report))
    return 0


def _print_real_table(report: dict, lines: list[dict]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{report['verifier']}, {report['dtype']}, greedy, {report['prompts']} held-out prompts x "
                        f"{report['max_new_tokens']} new tokens, batch 1, {report['threads']} threads")
    for column in ("row", "tokens/s", "speedup", "accepted/round", "tokens/round", "drafter cost", "exact",
                   "= greedy"):
        table.add_column(column, justify="left" if column == "row" else "right")
    for line in lines:
        same = line["up_to_ties"] if line["up_to_ties"] is not None else line["greedy_identical"]
        table.add_row(line["row"], f"{line['tokens_per_s']:.1f}", f"{line['speedup_vs_ar']:.2f}x",
                      f"{line['mean_accepted']:.2f}", f"{line['tokens_per_round']:.2f}",
                      "-" if line["drafter_cost"] is None else f"{line['drafter_cost']:.2f} step",
                      "yes" if line["exact"] else "no", "-" if same is None else f"{same:.2f}")
    console = Console(width=max(Console().width, 110))
    console.print(table)
    if "plot" in report:
        console.print(f"plot: {report['plot']}")
    console.print("ar: specdiff's plain cached decoding (1.00x); hf: transformers' generate, the greedy reference. "
                  "Drafter cost: the drafter's seconds per round in plain-decoding steps. '= greedy': the share of "
                  "prompts whose output equals HF greedy (up to near-ties in bfloat16). The configurations were chosen "
                  "on validation prompts (docs/real_models.md).")


def _run_rules(args) -> int:
    """`demo --rules`: every acceptance rule on the synthetic pair (`specdiff.runs.rules_demo`)."""
    import torch

    from specdiff.runs.rules_demo import rules_demo, synthetic_pair

    torch.set_num_threads(args.threads)
    result = rules_demo(args.vocab, args.samples, args.block, args.seed, show_progress=not args.json)
    if args.plot:
        from specdiff.runs.rules_demo_plot import save_tradeoff_plot

        p, q = synthetic_pair(args.vocab, args.seed)
        result["plot"] = save_tradeoff_plot(p, q, result["rules"], args.plot, result["samples"])
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    _print_rules_table(result)
    if args.plot:
        print(f"plot: {result['plot']}")
    return 0


def _kind_choices() -> tuple[str, ...]:
    from specdiff.models import drafter_kinds

    return tuple(drafter_kinds())


def _default_controller() -> str:
    from specdiff.runs.demo import default_controller

    return default_controller()


def _print_table(out: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"arith test, {out['problems']} problems, batch 1, {out['threads']} threads")
    for column in ("configuration", "accuracy", "tokens/s", "latency ms", "speedup", "accepted/round", "exact"):
        table.add_column(column, justify="left" if column == "configuration" else "right")
    for row in out["rows"]:
        accepted = f"{row['mean_accepted']:.2f}" if "mean_accepted" in row else "-"
        table.add_row(row["config"], f"{row['accuracy']:.2f} ± {row['accuracy_stderr']:.2f}",
                      f"{row['tokens_per_s']:.0f}", f"{1000 * row['latency_s']:.0f}", f"{row['speedup']:.2f}x",
                      accepted, "yes" if row["exact"] else "no")
    console = Console(width=max(Console().width, 110))
    console.print(table)
    if "plot" in out:
        console.print(f"plot: {out['plot']}")
    console.print("Lossless rows keep the verifier's accuracy; Linear leniency buys acceptance and costs accuracy "
                  "unless effort K rises with it (docs/engine.md); Typical accepts only drafts the verifier finds "
                  "plausible and keeps it (docs/leniency.md).")


def _print_rules_table(result: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(Console().width, 112))
    table = Table(
        title=f"verifier p vs drafter q, V={result['vocab']}, TV(p,q)={result['tv_p_q']:.3f}, "
        f"{result['samples']:,} rows per rule",
    )
    table.add_column("rule", no_wrap=True)
    table.add_column("accept\ntheory", justify="right")
    table.add_column("accept\nmeasured", justify="right")
    table.add_column("TV to p\ntheory", justify="right")
    table.add_column("TV to p\nmeasured", justify="right")
    table.add_column("TV to\nrule target", justify="right")
    table.add_column(f"accepted\ntoken B={result['block']}", justify="right")
    table.add_column(f"accepted\nblock B={result['block']}", justify="right")
    for row in result["rules"]:
        table.add_row(
            row["rule"],
            f"{row['accept_theory']:.4f}",
            f"{row['accept_measured']:.4f}",
            f"{row['tv_to_verifier_theory']:.4f}",
            f"{row['tv_to_verifier_measured']:.4f}",
            f"{row['tv_to_rule_target']:.4f}",
            f"{row['mean_accepted_token']:.3f}",
            f"{row['mean_accepted_block']:.3f}",
        )
    console.print(table)
    console.print(
        "Lossless emits p exactly (TV to p is sampling noise); Linear/TVBudget move toward q by "
        "lam*TV(p,q) (Theorem 1) and Cactus by its KL budget, buying acceptance. Block verification "
        "accepts at least as many tokens as token verification (Sun et al. 2025)."
    )


def _check_writable(path: str) -> None:
    directory = os.path.dirname(os.path.abspath(path)) or "."
    if path.endswith(os.sep) or os.path.isdir(path):
        raise ValueError(f"--plot {path!r} is a directory; give a file name such as {os.path.join(path, 'plot.png')}")
    if not os.path.isdir(directory) or not os.access(directory, os.W_OK):
        raise ValueError(f"--plot: cannot write into {directory!r} (missing or not writable)")
