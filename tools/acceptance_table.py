"""Decoded acceptance per drafter and per prompt kind, one line per dtype (issue 40, item 4), from committed
`specdiff bench speedup --json` files measured on the same prompts, written into a doc's marked block.

    python tools/acceptance_table.py NAME docs/results/X_bf16.json docs/results/X_fp32.json
    python tools/acceptance_table.py NAME A.json B.json --update docs/distill.md
    python tools/acceptance_table.py NAME A.json B.json --check docs/distill.md

Terms (`specdiff.bench.figures`): mean accepted, drafted tokens accepted per round (HF rows: new tokens per verifier
forward, minus one); tau, new tokens per round, the bonus or correction token counted (Spec-Bench's). Each cell is
`mean accepted / tau` on that kind's prompts. Acceptance is a count, not a time: it is the same on a busy machine,
so a file measured beside other work (its tokens/s noise) still gives this table. The block is named
`acceptance_table.py NAME`.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import doc_blocks  # noqa: E402
from spec_bench_table import accepted_tau  # noqa: E402

from specdiff.bench.rows import HF, PLAIN  # noqa: E402

PLAIN_ROWS = (PLAIN, HF)  # nothing is drafted


def table(results: list[tuple[str, dict]]) -> str:
    """Rows: every drafting row of the first file (in its order), one line per file that has it."""
    first = results[0][1]
    kinds = sorted(first["rows"][PLAIN]["per_kind"])
    for source, result in results:
        if sorted(result["rows"][PLAIN]["per_kind"]) != kinds or result["prompts"] != first["prompts"]:
            raise ValueError(f"{source}: not measured on the same prompts as {results[0][0]}")
    lines = ["| row | dtype | " + " | ".join(kinds) + " | overall |",
             "| --- | --- | " + " | ".join("---" for _ in kinds) + " | --- |"]
    for name in first["rows"]:
        if name in PLAIN_ROWS:
            continue
        for source, result in results:
            row = result["rows"].get(name)
            if row is None:
                continue
            cells = [accepted_tau(row["per_kind"][k]) for k in kinds] + [accepted_tau(row)]
            lines.append(f"| `{name}` | {result.get('dtype', 'float32')} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("name", help="the block's name")
    parser.add_argument("bench_json", type=Path, nargs="+")
    parser.add_argument("--update", type=Path, help="a markdown file whose block is replaced")
    parser.add_argument("--check", type=Path, help="a markdown file whose block is compared (exit 1 when it differs)")
    args = parser.parse_args(argv)
    text = table([(str(path), json.loads(path.read_text())) for path in args.bench_json])
    return doc_blocks.write_or_check(args.check or args.update, "acceptance_table.py " + args.name, text,
                                     args.check is not None, args.update is not None)


if __name__ == "__main__":
    raise SystemExit(main())
