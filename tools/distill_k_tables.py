"""docs/distill.md's K-tradeoff and leniency tables (issue 32) from a real-verifier bench report, the file the bench
wrote (progress lines, then the JSON report); without --update or --check it prints them with the report's other
figures (plain decoding, HF baselines, the adaptive controller):

    python tools/distill_k_tables.py docs/results/distill/k/bench_sampled_test0-9_seed0.json
    python tools/distill_k_tables.py docs/results/distill/k/bench_sampled_test0-9_seed0.json --update docs/distill.md
    python tools/distill_k_tables.py docs/results/distill/k/bench_sampled_test0-9_seed0.json --check docs/distill.md

The doc's tables are the masked drafter's (`--kind`); they stand between `<!-- distill_k_tables.py K: begin -->`
and its end line, and the same for `leniency`; with `--named`, between `<!-- distill_k_tables.py K STEM: begin -->`
(STEM the report file's stem), so one doc holds several runs. A leniency table measured at several K gets a K column.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import doc_blocks  # noqa: E402
from specdiff.bench.rows import spec  # noqa: E402

RULE_NAMES = {"lossless": "Lossless", "linear": "Linear λ", "typical": "Typical ε", "cactus": "Cactus δ",
              "tv": "TVBudget ε"}


def report(path: Path) -> dict:
    """The JSON report at the end of a bench output file (the lines before it are progress)."""
    text = Path(path).read_text()
    return json.loads(text[text.index("\n{") + 1:] if not text.startswith("{") else text)


def rule_name(rule: str) -> str:
    """"linear 0.3" -> "Linear λ = 0.3"."""
    name, _, value = rule.partition(" ")
    return RULE_NAMES.get(name, name) + (f" = {value}" if value else "")


def k_table(entries: list[dict]) -> str:
    lines = ["| K | B | tokens/s | vs plain | accepted / round | tokens / round | drafter cost (verifier steps / round) |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {e['K']} | {e['block_size']} | {e['tokens_per_s']:.1f} | {e['speedup_vs_ar']:.2f} | "
              f"{e['mean_accepted']:.3f} | {e['tokens_per_round']:.3f} | {e['drafter_cost_vs_verifier_step']:.3f} |"
              for e in entries]
    return "\n".join(lines) + "\n"


def leniency_table(entries: list[dict]) -> str:
    """One row per rule; a K column first when the run measured leniency at more than one K."""
    several = len({e.get("K", 1) for e in entries}) > 1
    lines = [("| K " if several else "") + "| rule | tokens / verifier call | vs Lossless | throughput vs Lossless | "
             "emitted TV | greedy agreement |",
             ("| --- " if several else "") + "| --- | --- | --- | --- | --- | --- |"]
    lines += [(f"| {e.get('K', 1)} " if several else "")
              + f"| {rule_name(e['rule'])} | {e['tokens_per_call']:.3f} | {e['tokens_per_call_vs_lossless']:.2f} | "
              f"{e['throughput_vs_lossless']:.2f} | {e['emitted_tv']:.3f} | {e['greedy_agreement']:.3f} |"
              .replace("| 0.000 |", "| 0 |") for e in entries]
    return "\n".join(lines) + "\n"


def tables(out: dict, kind: str, suffix: str = "") -> dict[str, str]:
    return {"distill_k_tables.py K" + suffix: k_table(out["k_tradeoff"][kind]),
            "distill_k_tables.py leniency" + suffix: leniency_table(out["leniency"][kind])}


def summary(out: dict) -> str:
    rows = out["rows"]
    lines = [f"plain decoding (ar) {rows['ar']['tokens_per_s']:.1f} tokens/s, HF generate {rows['hf']['tokens_per_s']:.1f}"
             + (f", HF prompt lookup {rows['hf_lookup']['tokens_per_s']:.1f} (accepted "
                f"{rows['hf_lookup']['mean_accepted']:.2f})" if "hf_lookup" in rows else "")]
    for kind, ratio in out["speedup_adaptive_vs_fixed"].items():
        adaptive, fixed = rows[spec(kind, adaptive=True).name], rows[spec(kind).name]
        lines.append(f"adaptive ({adaptive['config']['controller']}, B<={adaptive['config']['block_size']}): "
                     f"{adaptive['tokens_per_s']:.1f} tokens/s, {adaptive['tokens_per_round']:.3f} tokens/round; fixed "
                     f"(K={fixed['config']['steps']} B={fixed['config']['block_size']}): {fixed['tokens_per_s']:.1f}, "
                     f"{fixed['tokens_per_round']:.3f}; speedup_adaptive_vs_fixed {ratio:.3f}")
        for name in (spec(kind).name, spec(kind, adaptive=True).name):
            per_kind = {k: round(v["tokens_per_s"], 1) for k, v in rows[name]["per_kind"].items()}
            lines.append(f"  {name} tokens/s by kind: {per_kind}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bench", type=Path)
    parser.add_argument("--kind", default="masked", help="the drafter kind whose tables are written (default masked)")
    parser.add_argument("--named", action="store_true",
                        help="blocks named after the report file too (`distill_k_tables.py K STEM`): a doc with several runs")
    parser.add_argument("--update", type=Path, help="write the tables into this markdown file's marked blocks")
    parser.add_argument("--check", type=Path, help="compare this markdown file's marked blocks (exit 1 if they differ)")
    args = parser.parse_args(argv)
    out = report(args.bench)
    blocks = tables(out, args.kind, f" {args.bench.stem}" if args.named else "")
    if not (args.check or args.update):
        print(summary(out))
        print("\n".join(f"{name}:\n\n{text}" for name, text in blocks.items()))
        return 0
    return max(doc_blocks.write_or_check(args.check or args.update, name, text, args.check is not None,
                                         args.update is not None) for name, text in blocks.items())


if __name__ == "__main__":
    sys.exit(main())
