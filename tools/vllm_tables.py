"""docs/vllm.md's measured tables from a record of the vLLM test suite.

    SPECDIFF_VLLM_RECORD=docs/results/vllm/tests_record.jsonl python -m pytest tests/vllm   # writes the record
    python tools/vllm_tables.py docs/results/vllm/tests_record.jsonl                     # prints the tables

Table 1: per-position acceptance (position 1, position 2) of each rule in vLLM, the enumerated chain and
specdiff's engine, with the TV of vLLM's emitted sequences to the exact law (chi-square p). Table 2: the
speculators' per-position acceptance against the closed form (tests/vllm/test_speculators.py)."""
from __future__ import annotations

import json
import sys

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


def main(path: str) -> None:
    records = {r["label"]: r for r in map(json.loads, open(path))}
    print("| rule (greedy drafting, point-mass q unless said) | vLLM | exact chain | specdiff engine | TV (p) |")
    print("| --- | --- | --- | --- | --- |")
    for name, acceptance, law in RULES:
        a, t = records[acceptance], records[law]
        print(f"| {name} | {pair(a['vllm'])} | {pair(a['chain'])} | {pair(a.get('specdiff_engine'))} | "
              f"{t['tv']:.3f} ({t['chi2_pvalue']:.2f}) |")
    print()
    print("| method | Lossless: vLLM | closed form | Linear(0.5): vLLM | closed form | rounds (Lossless / Linear) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, label in SPECULATORS:
        r = records[label]
        lossless, linear = r["linear_0.0"], r["linear_0.5"]
        print(f"| {name} | {pair(lossless['measured'])} | {pair(lossless['closed_form'])} | {pair(linear['measured'])} "
              f"| {pair(linear['closed_form'])} | {lossless['rounds']:,} / {linear['rounds']:,} |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "docs/results/vllm/tests_record.jsonl")
