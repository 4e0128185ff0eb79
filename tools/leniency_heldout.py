"""The held-out half of issue 22's item 4: choose settings on a VALIDATION sweep store, and write the
sweep config that measures exactly those settings, once, on test problems.

Chosen on validation, on the priced-calls axis (`specdiff frontier --cost calls`: noise cannot move it):
  - the reference: the lossless configuration of highest priced throughput;
  - per rule family (Linear, Cactus, Typical, Gated Linear, Gated Cactus, and each untruncated), its
    configuration of highest priced throughput whose validation accuracy is at most --loss below the
    reference's: the family's "chosen" setting;
  - the joint frontier (every configuration) and the Linear-alone frontier (Linear and lossless,
    ungated, truncated): their Pareto points above the accuracy floor (best lossless - 5 points), so
    that the test store can compare their constrained hypervolumes.

The test config is the validation config with split = "test", --problems problems, the task seed and
run seed given, and one single-point [grid.NAME] per chosen configuration. A JSON of the choice (what
each configuration was chosen as, with its validation figures) is written beside it.

    PYTHONPATH=. python tools/leniency_heldout.py docs/results/leniency/masked_validation.sqlite \
        --costs docs/results/leniency/call_costs_masked.json --out docs/results/leniency/masked_test.toml
    PYTHONPATH=. python tools/leniency_heldout.py docs/results/leniency/masked_validation.sqlite \
        --costs docs/results/leniency/call_costs_masked.json --out docs/results/leniency/masked_test.toml --check
    specdiff sweep docs/results/leniency/masked_test.toml --store docs/results/leniency/masked_test.sqlite
    specdiff frontier docs/results/leniency/masked_test.sqlite --cost calls \
        --costs docs/results/leniency/call_costs_masked.json --honest --json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from specdiff.commands.frontier import call_costs, compute
from specdiff.commands.sweep import LENIENCY_KEYS
from specdiff.eval.frontier import pareto_mask
from specdiff.eval.frontier_honest import FLOOR_LOSS, is_linear_alone, is_lossless


def family(params: dict) -> str:
    """"lossless", "linear", "gated cactus untruncated", ..."""
    name = params["rule"]
    if "gate_top" in params or "gate_entropy" in params:
        name = "gated " + name
    if params.get("support", "truncated") == "untruncated":
        name += " untruncated"
    return name


def choose(summaries: list[dict], loss: float) -> dict[str, list[str]]:
    """config_id -> the reasons it was chosen."""
    chosen: dict[str, list[str]] = {}
    lossless = [s for s in summaries if is_lossless(s["params"])]
    reference = max(lossless, key=lambda s: s["throughput"])
    chosen.setdefault(reference["config_id"], []).append("reference lossless")
    for name in sorted({family(s["params"]) for s in summaries} - {"lossless"}):
        ok = [s for s in summaries if family(s["params"]) == name and s["accuracy"] >= reference["accuracy"] - loss - 1e-12]
        if ok:
            best = max(ok, key=lambda s: s["throughput"])
            chosen.setdefault(best["config_id"], []).append(f"chosen {name}")
    floor = max(s["accuracy"] for s in lossless) - FLOOR_LOSS
    for label, members in (("joint frontier", summaries),
                           ("linear-alone frontier", [s for s in summaries if is_linear_alone(s["params"])])):
        above = [s for s in members if s["accuracy"] > floor]
        for s, on in zip(above, pareto_mask(above, "throughput", keep_ties=True)):  # accuracy up, throughput up
            if on:
                chosen.setdefault(s["config_id"], []).append(label)
    return chosen


def test_config(source: str, chosen: list[dict], problems: int, task_seed: int, run_seed: int, origin: str) -> str:
    """The validation config's [models], [task] and [run], moved to the test split, and one single-point
    sub-grid per chosen configuration."""
    import tomllib

    settings = tomllib.loads(source)
    lines = [f"# Issue 22, item 4: settings chosen on {origin} (validation), measured once on test problems.",
             "# Written by tools/leniency_heldout.py; do not tune on this store.", "",
             "[models]", *(f'{k} = "{v}"' for k, v in settings["models"].items()), "",
             "[task]", f'name = "{settings["task"]["name"]}"', f"problems = {problems}",
             f'max_new_tokens = {settings["task"].get("max_new_tokens", 96)}', "",
             "[task.options]", 'split = "test"', f"seed = {task_seed}", "",
             "[run]", f"seed = {run_seed}", f'threads = {settings.get("run", {}).get("threads", 1)}', "",
             "[grid]"]
    for i, summary in enumerate(chosen):
        params = summary["params"]
        lines += ["", f"[grid.c{i:02d}]   # {summary['name']}: {', '.join(summary['reasons'])}"]
        if params.get("threshold") is not None:
            lines.append(f"threshold = [{params['threshold']!r}]")
        else:
            lines.append(f"steps = [{params['steps']}]")
        lines.append(f'rule = ["{params["rule"]}"]')
        if params["rule"] != "lossless":
            lines.append(f"{LENIENCY_KEYS[params['rule']]} = [{float(params['leniency'])!r}]")
        for key in ("typical_delta", "gate_top", "gate_entropy"):
            if key in params:
                lines.append(f"{key} = [{float(params[key])!r}]")
        for key in ("support", "method", "proposal"):
            if key in params:
                lines.append(f'{key} = ["{params[key]}"]')
        lines.append(f"block_size = [{params['block_size']}]")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store", help="the validation sweep store")
    parser.add_argument("--out", required=True, help="the test sweep config to write")
    parser.add_argument("--costs", default=None, help="per-call costs JSON (default: the store's own)")
    parser.add_argument("--problems", type=int, default=200)
    parser.add_argument("--task-seed", type=int, default=0, help="the test stream's seed (other problems)")
    parser.add_argument("--run-seed", type=int, default=0, help="the draws' seed")
    parser.add_argument("--loss", type=float, default=0.01, help="accuracy loss allowed on validation")
    parser.add_argument("--check", action="store_true",
                        help="write nothing: compare --out and its .selection.json with what would be written (exit 1 "
                             "if they differ)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import doc_blocks

    with doc_blocks.readable_store(args.store) as store:  # X.sqlite, or the committed X.sqlite.xz
        costs = call_costs(str(store), args.costs)
        _, sweep = compute(str(store), costs=costs)
    summaries = sweep["summaries"]
    if sweep["settings"]["task"]["options"].get("split") != "validation":
        raise SystemExit(f"{args.store} is not a validation sweep: refusing to tune on it")
    reasons = choose(summaries, args.loss)
    chosen = [dict(s, reasons=reasons[s["config_id"]]) for s in summaries if s["config_id"] in reasons]
    text = test_config(sweep["source"], chosen, args.problems,
                       args.task_seed, args.run_seed, Path(args.store).name)
    record = dict(validation_store=args.store, loss=args.loss, costs=args.costs or "the store's", chosen=[
        dict(name=s["name"], reasons=s["reasons"], validation_accuracy=s["accuracy"], n=s["n"],
             priced_throughput=s["throughput"], tokens_per_round=s.get("tokens_per_round"),
             tokens_per_call=_per_call(sweep["rows"], s["config_id"])) for s in chosen])
    selection = json.dumps(record, indent=1) + "\n"
    out, selection_path = Path(args.out), Path(args.out).with_suffix(".selection.json")
    if args.check:
        return max(doc_blocks.check_file(out, text), doc_blocks.check_file(selection_path, selection))
    out.write_text(text)
    selection_path.write_text(selection)
    print(text)
    return 0


def _per_call(rows: list[dict], config_id: str) -> float | None:
    mine = [r for r in rows if r["config_id"] == config_id and r.get("calls")]
    forwards = sum(r["calls"]["verifier_forwards"] for r in mine)
    return float(np.round(sum(r["new_tokens"] for r in mine) / forwards, 4)) if forwards else None


if __name__ == "__main__":
    sys.exit(main())
