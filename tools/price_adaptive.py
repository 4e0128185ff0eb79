"""The adaptive drafter's priced speedups (docs/adaptive.md): call counts priced at one machine's per-call costs.

A wall-clock ratio taken on a loaded machine moves with the load; a configuration's model calls do not.
This script takes every configuration from the committed `specdiff bench speedup` JSON files (so nothing
is chosen here), counts its calls on test problems (`specdiff.runs.run_config`, batch 1, drafter forwards,
rounds and tokens per round) and prices them with the per-round profile of the quiet machine's bench
(`docs/results/engine/bench_speedup.json`: drafter step = its `draft_ms` / K, the verifier's forward
`verify_ms`, everything else `overhead_ms`, plain decoding `ar_ms_per_token`):

    priced speedup = ar_ms_per_token * tokens_per_round
                     / (drafter_step_ms * drafter_forwards_per_round + verify_ms + overhead_ms)

With `--verify-ms-per-token S` the verifier's forward also costs S ms per token scored beyond the profile's
(B + 1 at its K, B): docs/engine.md's isolated timings give about (2.6 - 2.3) / 8 = 0.04 ms.

    nice -n 10 python tools/price_adaptive.py --out docs/results/adaptive/priced.json
    python tools/price_adaptive.py --table docs/results/adaptive/priced.json --check docs/adaptive.md   # or --update: its block of the doc
    python tools/price_adaptive.py --table docs/results/adaptive/priced.json     # its markdown table, no run

It counts on two problem sets by default: test problems 0-59 with seed 0 (the set of the first table) and
test problems 100-159 with seed 11 (the re-measure's set). The tuning saw neither: it ran on 20
validation problems.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
QUIET = RESULTS / "engine" / "bench_speedup.json"
RUN1 = RESULTS / "adaptive" / "bench_speedup_adaptive.json"
REMEASURE = RESULTS / "adaptive" / "bench_speedup_adaptive_remeasure.json"
DEMO_CONTROLLER = "masked adaptive K<=4 B<=16 confidence:floor=0,finish=0.9"  # the demo's adaptive row


def configurations() -> list[tuple[str, dict]]:
    """(role, RunConfig fields) of every priced configuration, read from the committed bench JSON."""
    quiet, run1, remeasure = (json.loads(p.read_text()) for p in (QUIET, RUN1, REMEASURE))
    demo = next(e["config"] for e in run1["adaptive_tuning_grid"] if e["config"]["name"] == DEMO_CONTROLLER)
    return [
        ("the quiet machine's best fixed (engine/bench_speedup.json)", quiet["best_config"]),
        ("run 1's tuned fixed (adaptive/bench_speedup_adaptive.json)", run1["best_config"]),
        ("run 1's tuned adaptive (adaptive/bench_speedup_adaptive.json)", run1["adaptive_config"]),
        ("the demo's adaptive row (in run 1's adaptive tuning grid)", demo),
        ("the re-measure's tuned fixed (adaptive/bench_speedup_adaptive_remeasure.json)", remeasure["best_config"]),
        ("the re-measure's tuned adaptive (adaptive/bench_speedup_adaptive_remeasure.json)", remeasure["adaptive_config"]),
    ]


def costs(verify_ms_per_token: float) -> dict:
    """Per-call costs from the quiet machine's profile (see the module)."""
    quiet = json.loads(QUIET.read_text())
    profile, best = quiet["profile"], quiet["best_config"]
    return {"source": str(QUIET.relative_to(ROOT)), "drafter_step_ms": profile["draft_ms"] / best["steps"],
            "verify_ms": profile["verify_ms"], "overhead_ms": profile["overhead_ms"],
            "ar_ms_per_token": profile["ar_ms_per_token"], "profile_scored_tokens": best["block_size"] + 1,
            "verify_ms_per_token": verify_ms_per_token}


def count(config: dict, first: int, problems: int, seed: int, max_new_tokens: int, cache) -> dict:
    """Calls per round of one configuration on test problems first..first+problems-1 (batch 1)."""
    from specdiff.eval import tasks
    from specdiff.runs import RunConfig, run_config

    fields = {k: v for k, v in config.items() if k in RunConfig.__dataclass_fields__}
    test = tasks.arith_problems("test", first + problems)[first:]
    result = run_config(RunConfig(**fields), [p.prompt for p in test], [p.target for p in test], cache,
                        max_new_tokens, seed=seed, is_correct=tasks.is_correct)
    records, rounds = result["records"], result["rounds"]
    drafter = sum(r["calls"]["drafter_forwards"] for r in records)
    drafted = sum(sum(r["drafted"]) for r in records)
    return {"rounds": rounds, "tokens_per_round": result["tokens_per_round"],
            "drafter_forwards_per_round": drafter / rounds, "draft_tokens_per_round": drafted / rounds,
            "accuracy": result["accuracy"], "exact": result["exact"]}


def price(counts: dict, c: dict) -> dict:
    round_ms = c["drafter_step_ms"] * counts["drafter_forwards_per_round"] + c["verify_ms"] + c["overhead_ms"]
    out = {"round_ms": round_ms, "priced_speedup": c["ar_ms_per_token"] * counts["tokens_per_round"] / round_ms}
    if c["verify_ms_per_token"]:
        extra = c["verify_ms_per_token"] * (counts["draft_tokens_per_round"] + 1 - c["profile_scored_tokens"])
        out["priced_speedup_with_token_cost"] = c["ar_ms_per_token"] * counts["tokens_per_round"] / (round_ms + extra)
    return out


def markdown(result: dict) -> str:
    """docs/adaptive.md's priced table: one row per configuration, one column pair per problem set."""
    sets = result["sets"]
    head = ["configuration"]
    for entry in sets:
        first, last = entry["test_problems"]
        head += [f"test {first}-{last}, seed {entry['seed']}: tokens / round, drafter forwards / round",
                 "priced speedup over plain decoding (with the verifier's per-token cost)", "over the quiet best fixed"]
    lines = ["| " + " | ".join(head) + " |", "| --- " * len(head) + "|"]
    for i, (first_row) in enumerate(sets[0]["configurations"]):
        cells = [f"{first_row['config']['name']} ({first_row['role'].split(' (')[0]})"]
        for entry in sets:
            row = entry["configurations"][i]
            with_tokens = row.get("priced_speedup_with_token_cost")
            cells += [f"{row['tokens_per_round']:.2f}, {row['drafter_forwards_per_round']:.2f}",
                      f"{row['priced_speedup']:.2f}" + (f" ({with_tokens:.2f})" if with_tokens else ""),
                      f"{row['over_quiet_best_fixed']:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", nargs="+", default=["0:60:0", "100:60:11"],
                        help="problem sets FIRST:COUNT:SEED (default 0:60:0 100:60:11)")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--verify-ms-per-token", type=float, default=0.04)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, help="write the JSON here")
    parser.add_argument("--table", type=Path, help="print the markdown table of this JSON (runs nothing)")
    parser.add_argument("--update", type=Path, help="with --table: write the table into this markdown file's block")
    parser.add_argument("--check", type=Path, help="with --table: compare this markdown file's block (exit 1 if it differs)")
    args = parser.parse_args(argv)
    if args.table:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import doc_blocks

        return doc_blocks.write_or_check(args.check or args.update, "price_adaptive.py", markdown(json.loads(args.table.read_text())),
                                         args.check is not None, args.update is not None)
    if args.out is None:
        parser.error("--out is required to run")
    import torch

    from specdiff.models import ModelCache, quiet_transformers

    quiet_transformers()
    torch.set_num_threads(args.threads)
    cache, c = ModelCache(), costs(args.verify_ms_per_token)
    result = {"command": "python tools/price_adaptive.py " + " ".join(sys.argv[1:] if argv is None else argv),
              "costs": c, "max_new_tokens": args.max_new_tokens, "sets": []}
    start = time.perf_counter()
    for spec in args.sets:
        first, problems, seed = (int(x) for x in spec.split(":"))
        entry = {"test_problems": [first, first + problems - 1], "seed": seed, "configurations": []}
        for role, config in configurations():
            counts = count(config, first, problems, seed, args.max_new_tokens, cache)
            row = {"role": role, "config": config, **counts, **price(counts, c)}
            entry["configurations"].append(row)
            print(f"test {first}-{first + problems - 1} seed {seed}: {config['name']}: {counts['tokens_per_round']:.2f} "
                  f"tokens/round, {counts['drafter_forwards_per_round']:.2f} drafter forwards/round, priced "
                  f"{row['priced_speedup']:.2f}x", file=sys.stderr, flush=True)
        quiet_fixed = entry["configurations"][0]["priced_speedup"]
        for row in entry["configurations"]:
            row["over_quiet_best_fixed"] = row["priced_speedup"] / quiet_fixed
        result["sets"].append(entry)
        result["wall_seconds"] = time.perf_counter() - start
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
