"""The Spec-Bench subset of issues 40 and 41: 48 first turns, 8 per Spec-Bench category, drawn with a stated seed.

Source: Spec-Bench (Xia et al. 2024, hemingkx/Spec-Bench, commit fd2c1cd, `data/spec_bench/question.jsonl`,
Apache-2.0), committed here as specdiff/eval/tasks/data/spec_bench/question.jsonl.xz. Its six categories are
Multi-turn conversation (MT-bench: the eight MT-bench categories, 80 questions), translation, summarization,
qa, math_reasoning and rag (80 each). From each, `random.Random(SEED).sample` draws 8 question ids (sorted
first, so the draw depends only on the file and the seed); the file keeps each one's first turn as a chat
message, `kind` its Spec-Bench category ("mt_bench" for the eight) and `id` "spec_bench/<question_id>".

    python tools/spec_bench_subset.py           # writes specdiff/eval/tasks/data/spec_bench/spec_bench48.jsonl
    python tools/spec_bench_subset.py --check   # fails when the committed file differs

These questions are never tuned on or trained on: `specdiff distill data` holds all 480 out.
"""
from __future__ import annotations

import argparse
import json
import lzma
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "specdiff/eval/tasks/data/spec_bench/question.jsonl.xz"
OUT = ROOT / "specdiff/eval/tasks/data/spec_bench/spec_bench48.jsonl"
SEED, PER_CATEGORY = 41, 8
CATEGORIES = ("mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag")
MT_BENCH = {"writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities"}


def subset() -> str:
    questions = [json.loads(line) for line in lzma.open(SOURCE, "rt")]
    lines = []
    for category in CATEGORIES:
        pool = sorted((q for q in questions if (q["category"] in MT_BENCH and category == "mt_bench")
                       or q["category"] == category), key=lambda q: q["question_id"])
        for question in sorted(random.Random(SEED).sample(pool, PER_CATEGORY), key=lambda q: q["question_id"]):
            lines.append(json.dumps({"messages": [{"role": "user", "content": question["turns"][0]}],
                                     "kind": category, "id": f"spec_bench/{question['question_id']}"},
                                    ensure_ascii=False))
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when the committed file differs")
    args = parser.parse_args(argv)
    text = subset()
    if args.check:
        if not OUT.is_file() or OUT.read_text() != text:
            print(f"{OUT.relative_to(ROOT)} differs from what tools/spec_bench_subset.py writes", file=sys.stderr)
            return 1
        print(f"{OUT.relative_to(ROOT)} up to date")
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT.relative_to(ROOT)}: {text.count(chr(10))} questions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
