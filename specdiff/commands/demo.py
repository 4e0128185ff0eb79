"""`specdiff demo`: the main job on the shipped testbed.

On the first `--problems` arith test problems, one problem at a time, it runs plain autoregressive
decoding of the verifier, classic speculative decoding with the small autoregressive drafter, and
speculative diffusion with the masked diffusion drafter at a few (effort K, leniency) points
(`--drafter uniform|block|dflash|ar`, repeatable: that kind's zoo model at its own effort knob). It
prints accuracy, tokens/s, latency, speedup over plain decoding, mean accepted tokens per round
and whether the configuration is lossless, and writes a PNG of accuracy against throughput. The rows
are timed interleaved: the problems run in chunks of `INTERLEAVE`, every row on each chunk in turn, so
that a change of machine load moves every row alike (the masked kind also shows its adaptive row).

`specdiff demo --rules` is the synthetic one-position demo of every acceptance rule.
"""
from __future__ import annotations

import json
import os

from specdiff.argtypes import positive_int
from specdiff.commands import rules_demo

DRAFTER_CHOICES = ("masked", "uniform", "block", "dflash", "ar")  # specdiff.models.DRAFTER_KINDS
INTERLEAVE = 10  # problems per interleaved chunk: every row runs on each chunk in turn
# The masked drafter's adaptive row (docs/adaptive.md): at most K = 4 steps over B = 16, every position the
# drafter is at least 0.9 sure of unmasked at once; point mass, so exact whatever the unmasking order.
ADAPTIVE = dict(steps=4, block_size=16, proposal="point_mass", controller="confidence:floor=0,finish=0.9")


def demo_configs(kinds=("masked",), controller: str | None = None):
    """The demo's configurations: the baselines, then each kind's rows (`kind_configs`); with the masked
    kind, its adaptive row (`ADAPTIVE`, or `controller` in its place)."""
    from specdiff.runs import RunConfig

    rows = [RunConfig("autoregressive (verifier)", drafter=None),
            RunConfig("AR drafter, B=8", drafter="ar-drafter", block_size=8)]
    for kind in dict.fromkeys(kinds):
        rows += kind_configs(kind)
        if kind == "masked":
            adaptive = dict(ADAPTIVE, controller=controller or ADAPTIVE["controller"])
            rows.append(RunConfig(f"masked K<=4 B<=16 point mass, {adaptive['controller']}",
                                  drafter="masked-drafter", prefix_cache="persistent", **adaptive))
    return rows


# Each new kind's demo rows (RunConfig fields; B = 8 unless given) at its own effort knob: K, and tau for
# the block drafter; none for dflash and ar. Effort first, then leniency, and a point-mass row where
# marginal mode is approximate (block drafter with tau).
KIND_ROWS = {
    "block": [dict(steps=2), dict(steps=4), dict(steps=8), dict(threshold=0.9),
              dict(threshold=0.9, proposal="point_mass"), dict(steps=4, rule="linear", leniency=0.2)],
    "uniform": [dict(steps=1), dict(steps=2), dict(steps=4), dict(steps=2, rule="linear", leniency=0.2)],
    "dflash": [dict(), dict(block_size=16), dict(rule="linear", leniency=0.2)],
    "ar": [dict(block_size=4), dict(block_size=12), dict(rule="linear", leniency=0.2)],
}


def kind_configs(kind: str):
    """One kind's demo rows: the masked drafter's (K, leniency) points, else `KIND_ROWS[kind]`."""
    from specdiff.runs import RunConfig
    from specdiff.models import DRAFTER_KINDS

    if kind == "masked":
        return _masked_configs()
    rows = [{"block_size": 8, **row} for row in KIND_ROWS[kind]]
    return [RunConfig(_label(kind, row), drafter=DRAFTER_KINDS[kind], **row) for row in rows]


def _label(kind: str, row: dict) -> str:
    from specdiff.runs.kinds import describe

    label = describe(kind, row.get("steps", 1), row.get("threshold"), row["block_size"])
    if row.get("proposal") == "point_mass":
        label += " point mass"
    if row.get("rule") == "linear":
        label += f" Linear({row['leniency']})"
    return label


def _masked_configs():
    from specdiff.runs import RunConfig

    masked = dict(drafter="masked-drafter", prefix_cache="persistent")
    return [
        RunConfig("masked K=1 B=8", steps=1, block_size=8, **masked),
        RunConfig("masked K=4 B=16", steps=4, block_size=16, **masked),
        RunConfig("masked K=4 B=16 point mass", steps=4, block_size=16, proposal="point_mass", **masked),
        RunConfig("masked K=4 B=16 Linear(0.1)", steps=4, block_size=16, rule="linear", leniency=0.1, **masked),
        # Medusa's typical acceptance: lenient only where the verifier finds the draft plausible (docs/leniency.md)
        RunConfig("masked K=4 B=16 Typical(0.09)", steps=4, block_size=16, rule="typical", leniency=0.09, **masked),
        RunConfig("masked K=2 B=8 Linear(0.2)", steps=2, block_size=8, rule="linear", leniency=0.2, **masked),
        RunConfig("masked K=1 B=8 Linear(0.3)", steps=1, block_size=8, rule="linear", leniency=0.3, **masked),
    ]


def register(subparsers) -> None:
    demo = subparsers.add_parser(
        "demo", help="the main job: speculative diffusion on the shipped testbed, beside plain and AR-drafted decoding",
        description="Speculative diffusion on the shipped testbed (arith test problems): plain decoding of the "
                    "verifier, classic speculative decoding, and masked-diffusion drafting at several (K, leniency) "
                    "points. --rules: the synthetic one-position demo of every acceptance rule.")
    demo.add_argument("--json", action="store_true", help="print JSON instead of a table")
    demo.add_argument("--drafter", action="append", choices=DRAFTER_CHOICES, default=None, metavar="KIND",
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
                           f"{ADAPTIVE['controller']}; docs/adaptive.md)")
    demo.add_argument("--plot", metavar="PNG", default="demo_frontier.png",
                      help="accuracy against throughput (default demo_frontier.png; '' for none)")
    demo.add_argument("--rules", action="store_true", help="the synthetic demo of every acceptance rule instead")
    rules = demo.add_argument_group("--rules options")
    rules.add_argument("--samples", type=positive_int, default=None,
                       help="rows verified per rule (default: 100,000, fewer for a large --vocab so that a rule "
                            "takes seconds: max(1,000, min(100,000, 2^24 / V)))")
    rules.add_argument("--vocab", type=rules_demo.vocab_size, default=64,
                       help=f"vocabulary size V of the synthetic pair, 2..{rules_demo.MAX_VOCAB:,} (default 64)")
    rules.add_argument("--block", type=positive_int, default=4, help="draft length B for the token/block comparison")
    demo.set_defaults(handler=run)


def default_threads(args) -> int:
    """--threads when not given: 1 for the main job (see its help), min(2, cores) for --rules."""
    if args.threads is not None:
        return args.threads
    return min(2, os.cpu_count() or 1) if args.rules else 1


def run(args) -> int:
    args.threads = default_threads(args)
    if args.plot:
        _check_writable(args.plot)
    if args.rules:
        args.plot = args.plot if args.plot != "demo_frontier.png" else None
        return rules_demo.run_demo(args)
    import torch

    from specdiff.eval import tasks
    from specdiff.runs import ModelCache, merge_results, run_config
    from specdiff.runs.model_cache import quiet_transformers

    quiet_transformers()
    torch.set_num_threads(args.threads)
    problems = tasks.arith_problems("test", args.problems)
    prompts, targets = [p.prompt for p in problems], [p.target for p in problems]
    from specdiff.runs.kinds import require_weights
    from specdiff.models import DRAFTER_KINDS

    kinds = args.drafter or ["masked"]
    if args.controller is not None:
        from specdiff.engine.controllers import parse_controller

        try:
            if parse_controller(args.controller) is None:
                raise ValueError("the adaptive row needs a controller, not 'none'")
        except ValueError as error:
            raise ValueError(f"--controller: {error}") from None
    for kind in kinds:
        require_weights(DRAFTER_KINDS[kind])  # before anything runs: `specdiff zoo train NAME`
    cache = ModelCache()
    configs = demo_configs(kinds, args.controller)
    _warm_up(configs, cache, prompts[0])
    from specdiff.progress import progress

    # interleaved (issue 23, item 5): the problems in chunks, every configuration on each chunk in turn, so
    # that a change of machine load falls on all rows alike instead of on whichever row ran at the time
    chunks = [range(start, min(start + INTERLEAVE, len(prompts))) for start in range(0, len(prompts), INTERLEAVE)]
    parts = {config.name: [] for config in configs}
    for number, chunk in enumerate(progress(chunks, desc="interleaved chunks", enabled=not args.json)):
        for config in configs:
            parts[config.name].append(run_config(config, [prompts[i] for i in chunk], [targets[i] for i in chunk],
                                                 cache, args.max_new_tokens, seed=args.seed + 1000 * number,
                                                 is_correct=tasks.is_correct))
    rows = [merge_results(parts[config.name]) for config in configs]
    base = rows[0]["tokens_per_s"]
    for row in rows:
        row["speedup"] = row["tokens_per_s"] / base
    out = {"task": "arith", "split": "test", "drafters": kinds, "problems": args.problems, "max_new_tokens": args.max_new_tokens,
           "threads": args.threads, "seed": args.seed, "rows": rows}
    if args.plot:
        out["plot"] = save_frontier_plot(rows, args.plot)
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        _print_table(out)
    return 0


def _warm_up(configs, cache, prompt) -> None:
    """One short generation per distinct model, so that the first configuration is not timed cold."""
    from specdiff.runs import run_config

    for config in configs:
        run_config(config, [prompt], None, cache, 24)


def save_frontier_plot(rows: list[dict], path: str) -> str:
    """Accuracy (with its standard error) against tokens/s, one point per configuration: filled when
    lossless, hollow when approximate, each named in the legend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(10, 4.8))
    colors = plt.get_cmap("tab10").colors
    markers = "osD^v<>ph*"
    for i, row in enumerate(rows):
        color = "black" if row["config"].startswith("autoregressive") else colors[i % len(colors)]
        axis.errorbar(row["tokens_per_s"], row["accuracy"], yerr=row["accuracy_stderr"], capsize=3, color=color,
                      marker=markers[i % len(markers)], markersize=8, linestyle="none",
                      markerfacecolor=color if row["exact"] else "white", markeredgewidth=1.5,
                      label=f"{row['config']} ({row['speedup']:.2f}x){'' if row['exact'] else ', approximate'}")
    axis.set_xlabel("throughput (generated tokens / s, batch 1)")
    axis.set_ylabel("accuracy (arith test, ± 1 s.e.)")
    axis.set_title("Speculative diffusion on the testbed: effort K and leniency\n"
                   "filled: lossless (exact); hollow: approximate (out-of-order marginal, or lenient)")
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.02, 0.5), frameon=False)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


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


def _check_writable(path: str) -> None:
    directory = os.path.dirname(os.path.abspath(path)) or "."
    if path.endswith(os.sep) or os.path.isdir(path):
        raise ValueError(f"--plot {path!r} is a directory; give a file name such as {os.path.join(path, 'plot.png')}")
    if not os.path.isdir(directory) or not os.access(directory, os.W_OK):
        raise ValueError(f"--plot: cannot write into {directory!r} (missing or not writable)")
