"""docs/vllm.md's measured tables from a record of the vLLM test suite.

    SPECDIFF_VLLM_RECORD=docs/results/vllm/tests_record.jsonl python -m pytest tests/vllm   # writes the record
    python tools/vllm_tables.py docs/results/vllm/tests_record.jsonl                     # prints the tables
    python tools/vllm_tables.py --update docs/vllm.md        # writes them into docs/vllm.md's marked blocks
    python tools/vllm_tables.py --check docs/vllm.md         # exit 1 if the doc differs

Table 1: per-position acceptance (position 1, position 2) of each rule in vLLM, the enumerated chain and
specdiff's engine, with the TV of vLLM's emitted sequences to the exact law (chi-square p). Table 2: the
speculators' per-position acceptance against the closed form (tests/vllm/test_speculators.py)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import doc_blocks  # noqa: E402

RECORD = "docs/results/vllm/tests_record.jsonl"

RULES = [("Lossless", "acceptance Lossless", "Lossless"), ("Linear(0.2)", "acceptance Linear(0.2)", "Linear(0.2)"),
         ("Linear(0.5)", "acceptance Linear(0.5)", "Linear(0.5)"), ("Linear(1)", "acceptance Linear(1.0)", "Linear(1.0)"),
         ("TVBudget(0.3)", "acceptance tv(0.3)", "tv(0.3)"), ("Cactus(0.5)", "acceptance cactus(0.5)", "cactus(0.5)"),
         ("Linear(0.5), probabilistic drafting (q = draft)", "acceptance probabilistic Linear(0.5)",
          "probabilistic Linear(0.5)"),
         ("Linear(1), probabilistic drafting", "acceptance probabilistic Linear(1.0)", "probabilistic Linear(1.0)")]
SPECULATORS = [("`eagle`, probabilistic", "eagle (probabilistic drafting) per-position acceptance"),
               ("`eagle3`, greedy", "eagle3 (greedy drafting) per-position acceptance"),
               ("`dflash`, greedy", "dflash (greedy drafting) per-position acceptance")]


def pair(values) -> str:
    return ", ".join(f"{v:.3f}" for v in values) if values else ""


def tables(path) -> dict[str, str]:
    """{block name: markdown table} of docs/vllm.md."""
    records = {r["label"]: r for r in map(json.loads, open(path))}
    acceptance = ["| rule (greedy drafting, point-mass q unless said) | vLLM | exact chain | specdiff engine | TV (p) |",
                  "| --- | --- | --- | --- | --- |"]
    for name, accepted, law in RULES:
        a, t = records[accepted], records[law]
        acceptance.append(f"| {name} | {pair(a['vllm'])} | {pair(a['chain'])} | {pair(a.get('specdiff_engine'))} | "
                          f"{t['tv']:.3f} ({t['chi2_pvalue']:.2f}) |")
    speculators = ["| method | Lossless: vLLM | closed form | Linear(0.5): vLLM | closed form | rounds (Lossless / Linear) |",
                   "| --- | --- | --- | --- | --- | --- |"]
    for name, label in SPECULATORS:
        r = records[label]
        lossless, linear = r["linear_0.0"], r["linear_0.5"]
        speculators.append(f"| {name} | {pair(lossless['measured'])} | {pair(lossless['closed_form'])} | "
                           f"{pair(linear['measured'])} | {pair(linear['closed_form'])} | "
                           f"{lossless['rounds']:,} / {linear['rounds']:,} |")
    return {"vllm_tables.py acceptance": "\n".join(acceptance) + "\n",
            "vllm_tables.py speculators": "\n".join(speculators) + "\n"}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("record", nargs="?", default=RECORD, help=f"the vLLM tests' record (default {RECORD})")
    parser.add_argument("--update", type=Path, help="write the tables into this markdown file's marked blocks")
    parser.add_argument("--check", type=Path, help="compare this markdown file's marked blocks (exit 1 if they differ)")
    args = parser.parse_args(argv)
    blocks = tables(args.record)
    if not (args.check or args.update):
        print("\n".join(blocks.values()), end="")
        return 0
    return max(doc_blocks.write_or_check(args.check or args.update, name, text, args.check is not None,
                                         args.update is not None) for name, text in blocks.items())


if __name__ == "__main__":
    sys.exit(main())
