"""The demo table of docs/engine.md, generated from a committed `specdiff demo --json` file.

    specdiff demo --json --plot docs/results/demo/demo_frontier.png > docs/results/demo/demo.json
    python tools/demo_table.py docs/results/demo/demo.json                      # prints the markdown table
    python tools/demo_table.py docs/results/demo/demo.json --update docs/engine.md
    python tools/demo_table.py docs/results/demo/demo.json --check docs/engine.md   # exit 1 if the doc differs

With --update the table replaces what stands between the lines `<!-- demo_table.py: begin -->` and
`<!-- demo_table.py: end -->` of that file, so that the doc's table is always the JSON's.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import doc_blocks  # noqa: E402

BLOCK = "demo_table.py"


def table(result: dict) -> str:
    """One markdown row per demo row, in the demo's order."""
    lines = [f"`specdiff demo` on {result['problems']} arith {result['split']} problems, {result['threads']} torch "
             f"thread(s), seed {result['seed']}, at most {result['max_new_tokens']} new tokens per problem "
             f"(from `{result.get('source', 'demo.json')}`):",
             "",
             "| configuration | accuracy | tokens/s | latency ms | speedup | accepted/round | exact |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for row in result["rows"]:
        accepted = f"{row['mean_accepted']:.2f}" if "mean_accepted" in row else "–"
        lines.append(f"| {row['config']} | {row['accuracy']:.2f} ± {row['accuracy_stderr']:.2f} | "
                     f"{row['tokens_per_s']:,.0f} | {1000 * row['latency_s']:.0f} | {row['speedup']:.2f}× | "
                     f"{accepted} | {'yes' if row['exact'] else 'no'} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("demo_json", type=Path)
    parser.add_argument("--update", type=Path, help="a markdown file whose demo_table.py block is replaced")
    parser.add_argument("--check", type=Path, help="a markdown file whose demo_table.py block is compared (exit 1 "
                        "when it differs)")
    args = parser.parse_args(argv)
    result = json.loads(args.demo_json.read_text())
    result.setdefault("source", str(args.demo_json))
    text = table(result)
    return doc_blocks.write_or_check(args.check or args.update, BLOCK, text, args.check is not None,
                                     args.update is not None)


if __name__ == "__main__":
    raise SystemExit(main())
