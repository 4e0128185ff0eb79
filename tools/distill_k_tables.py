"""Markdown tables of a real-verifier bench report's tradeoff keys (issue 32; docs/distill.md), from the file the
bench wrote (progress lines, then the JSON report):

    python tools/distill_k_tables.py docs/results/distill/k/bench_sampled_test0-9_seed0.json
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path


def report(path: Path) -> dict:
    """The JSON report at the end of a bench output file (the lines before it are progress)."""
    text = path.read_text()
    return json.loads(text[text.index("\n{") + 1:] if not text.startswith("{") else text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("bench")
    out = report(Path(parser.parse_args().bench))
    rows = out["rows"]
    print(f"plain decoding (ar) {rows['ar']['tokens_per_s']:.1f} tokens/s, HF generate {rows['hf']['tokens_per_s']:.1f}, "
          f"HF prompt lookup {rows['hf_lookup']['tokens_per_s']:.1f} (accepted {rows['hf_lookup']['mean_accepted']:.2f})\n")
    for kind, entries in out["k_tradeoff"].items():
        print(f"K tradeoff ({kind}):\n\n| K | B | cache | tokens/s | vs plain | accepted / round | tokens / round | "
              "drafter cost (verifier steps / round) |\n| --- | --- | --- | --- | --- | --- | --- | --- |")
        for e in entries:
            print(f"| {e['K']} | {e['block_size']} | {e['prefix_cache'] or 'off'} | {e['tokens_per_s']:.1f} | "
                  f"{e['speedup_vs_ar']:.2f} | {e['mean_accepted']:.3f} | {e['tokens_per_round']:.3f} | "
                  f"{e['drafter_cost_vs_verifier_step']:.3f} |")
        print()
    for kind, entries in out["leniency"].items():
        print(f"Leniency ({kind}, K = 1):\n\n| rule | tokens / call | vs Lossless | throughput vs Lossless | "
              "emitted TV | greedy agreement |\n| --- | --- | --- | --- | --- | --- |")
        for e in entries:
            print(f"| {e['rule']} | {e['tokens_per_call']:.3f} | {e['tokens_per_call_vs_lossless']:.3f} | "
                  f"{e['throughput_vs_lossless']:.3f} | {e['emitted_tv']:.4f} | {e['greedy_agreement']:.3f} |")
        print()
    for kind, ratio in out["speedup_adaptive_vs_fixed"].items():
        adaptive, fixed = rows[f"spec_{kind}_adaptive"], rows[f"spec_{kind}"]
        print(f"adaptive ({adaptive['config']['controller']}, B<={adaptive['config']['block_size']}): "
              f"{adaptive['tokens_per_s']:.1f} tokens/s, {adaptive['tokens_per_round']:.3f} tokens/round; fixed "
              f"(K={fixed['config']['steps']} B={fixed['config']['block_size']}): {fixed['tokens_per_s']:.1f}, "
              f"{fixed['tokens_per_round']:.3f}; speedup_adaptive_vs_fixed {ratio:.3f}")
        for name in (f"spec_{kind}", f"spec_{kind}_adaptive"):
            per_kind = {k: round(v["tokens_per_s"], 1) for k, v in rows[name]["per_kind"].items()}
            print(f"  {name} tokens/s by kind: {per_kind}")


if __name__ == "__main__":
    main()
