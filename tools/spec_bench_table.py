"""Spec-Bench's own table (per category: mean accepted tokens, tau, speedup) from a committed
`specdiff bench speedup --json` file, written into a doc's marked block.

    specdiff bench speedup --verifier smollm2-135m-instruct --preset spec_bench --json > docs/results/spec_bench/X.json
    python tools/spec_bench_table.py docs/results/spec_bench/X.json                        # prints the markdown
    python tools/spec_bench_table.py docs/results/spec_bench/X.json --update docs/real_models.md
    python tools/spec_bench_table.py docs/results/spec_bench/X.json --check docs/real_models.md

Terms (`specdiff.bench.figures`): mean accepted, drafted tokens accepted per round (HF rows: new tokens per verifier
forward, minus one); tau, new tokens per round (the bonus or correction token counted, as Spec-Bench counts it);
speedup, a row's tokens/s over the plain row's (`ar_baseline`, the faster of specdiff's plain decoding and HF
`generate`; for a batched row, `ar_batch<N>`, plain decoding at its batch), per category on that category's
prompts. A sampled run's table has no greedy columns' figures. The block is named after the JSON file's stem, so one doc
can hold several runs.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import doc_blocks  # noqa: E402

from specdiff.bench.report import plain_row  # noqa: E402
from specdiff.bench.rows import HF, is_plain  # noqa: E402


def accepted_tau(figures: dict) -> str:
    """A row's (or one kind's) cell: `mean accepted / tau`."""
    return f"{figures['mean_accepted']:.2f} / {figures['tokens_per_round']:.2f}"


def table(result: dict, source: str) -> str:
    """The run's headline, its rows, and per category each row's mean accepted / tau / speedup."""
    rows, base = result["rows"], result["ar_baseline"]
    kinds = sorted(rows[base]["per_kind"])
    up_to_ties = result.get("greedy_identical_up_to_ties")
    lines = [f"`{source}`: {result['prompts']} prompts of `{Path(result['prompts_file']).name}`, "
             f"{'greedy' if result['greedy'] else 'sampled'}, {result['max_new_tokens']} new tokens, "
             f"{result['threads']} threads, {result['repeats']} repeat(s), dtype {result.get('dtype', 'float32')}, "
             f"seed {result['seed']}; tuned on {result['tuned_on']}. Headline: row `{result['row']}` "
             f"({result['config']['name']}), `speedup_vs_ar` **{result['speedup_vs_ar']:.2f}** (against `{base}`), "
             f"`speedup_vs_hf_best_speculative` **{result['speedup_vs_hf_best_speculative']:.2f}** (against "
             f"`{result['hf_best_speculative']}`)"
             + (f", `greedy_identical` {result['greedy_identical']:.2f}" if result["greedy"] else "")
             + (f", `greedy_identical_up_to_ties` {up_to_ties:.2f}" if up_to_ties is not None else "") + ".",
             "",
             "| row | tokens/s | speedup | mean accepted | tau | greedy = HF | up to ties |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for name, row in rows.items():
        same = row.get("greedy_identical")
        ties = row.get("greedy_identical_up_to_ties")
        plain = rows[plain_row(name, row, base)]["tokens_per_s"]
        lines.append(f"| `{name}` | {row['tokens_per_s']:.1f} | {row['tokens_per_s'] / plain:.2f}× | "
                     f"{row['mean_accepted']:.2f} | {row['tokens_per_round']:.2f} | "
                     f"{'–' if same is None else f'{same:.2f}'} | {'–' if ties is None else f'{ties:.2f}'} |")
    lines += ["", "Per category, mean accepted / tau / speedup:", "",
              "| row | " + " | ".join(kinds) + " | overall |",
              "| --- | " + " | ".join("---" for _ in kinds) + " | --- |"]
    for name, row in rows.items():
        if name in (base, HF) or is_plain(row):
            continue
        own = rows[plain_row(name, row, base)]
        cells = []
        for kind in kinds:
            mine, ref = row["per_kind"][kind], own["per_kind"][kind]
            speed = mine["tokens_per_s"] / ref["tokens_per_s"] if ref["tokens_per_s"] else 0.0
            cells.append(f"{accepted_tau(mine)} / {speed:.2f}×")
        cells.append(f"{accepted_tau(row)} / {row['tokens_per_s'] / own['tokens_per_s']:.2f}×")
        lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bench_json", type=Path)
    parser.add_argument("--update", type=Path, help="a markdown file whose block is replaced")
    parser.add_argument("--check", type=Path, help="a markdown file whose block is compared (exit 1 when it differs)")
    args = parser.parse_args(argv)
    text = table(json.loads(args.bench_json.read_text()), str(args.bench_json))
    block = "spec_bench_table.py " + args.bench_json.stem
    return doc_blocks.write_or_check(args.check or args.update, block, text, args.check is not None,
                                     args.update is not None)


if __name__ == "__main__":
    raise SystemExit(main())
