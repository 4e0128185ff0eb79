"""A real verifier's default drafter (issue 51, item 7): the lossless proposer fastest on its validation prompts.

`specdiff generate` (and `--chat`) without `--drafter` use, for a real verifier, the chain drafter (batch 1, no tree,
no controller) whose chosen configuration made the most tokens/s in a `specdiff bench tune` run on that verifier's
validation prompts, at its B. This tool reads the tuning file and records the choice in
`specdiff/zoo/distilled/default_drafters.json` (`specdiff.zoo.distilled.default_for`), with every candidate's
figure beside it:

    PYTHONPATH=. python tools/default_drafter.py specdiff/bench/presets/demo_real.tuning.json [--check]

The tuning file is the real demo's (`specdiff bench tune --preset demo_real --out ...`: 10 validation prompts,
32 new tokens, greedy).
"""
from __future__ import annotations

import argparse
import difflib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "specdiff" / "zoo" / "distilled" / "default_drafters.json"


def choose(tuning: dict, source: str) -> dict:
    """{verifier: the choice}: the exact chain row with the most validation tokens/s, and the candidates'."""
    candidates = {}
    for row, chosen in tuning["chosen"].items():
        config = chosen["config"]
        if not chosen.get("exact") or config.get("tree_budget") or config.get("controller") or config["batch_size"] != 1:
            continue
        candidates[row] = dict(drafter=config["drafter"], block_size=config["block_size"], steps=config["steps"],
                               proposal=config["proposal"], extra=config.get("extra", {}),
                               validation_tokens_per_s=round(chosen["validation_tokens_per_s"], 2),
                               validation_tokens_per_round=round(chosen["validation_tokens_per_round"], 3))
    if not candidates:
        raise ValueError(f"{source}: no exact chain row was tuned")
    best = max(candidates, key=lambda row: candidates[row]["validation_tokens_per_s"])
    return {tuning["verifier"]: dict(**candidates[best], row=best, tuned_on=tuning["on"], prompts=tuning["prompts"],
                                     max_new_tokens=tuning["max_new_tokens"], tuning=source,
                                     candidates=candidates)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tuning", help="a `specdiff bench tune` output (JSON)")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when the committed file differs")
    args = parser.parse_args(argv)
    path = Path(args.tuning)
    source = str(path.resolve().relative_to(ROOT)) if path.resolve().is_relative_to(ROOT) else str(path)
    recorded = json.loads(OUT.read_text()) if OUT.is_file() else {}
    text = json.dumps({**recorded, **choose(json.loads(path.read_text()), source)}, indent=1, sort_keys=True) + "\n"
    if args.check:
        old = OUT.read_text() if OUT.is_file() else ""
        if old != text:
            sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), text.splitlines(True), str(OUT), "new"))
            return 1
        print(f"{OUT.relative_to(ROOT)} up to date")
        return 0
    OUT.write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
