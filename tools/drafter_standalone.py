"""Standalone accuracy of a diffusion drafter on arith test problems: the drafter alone, block after
block, every drafted token kept (no verifier), until EOS or the canvas limit
(`specdiff.drafters.standalone`; `specdiff zoo eval` reports it for shipped drafters). For a trained
zoo drafter before it ships:

    python tools/drafter_standalone.py runs/zoo/block-drafter/model --steps 4 --block 8 -n 200
"""
from __future__ import annotations

import argparse
import json
import sys

import torch


def main(argv=None) -> int:
    from specdiff import models, zoo
    from specdiff.drafters.standalone import standalone_texts
    from specdiff.eval import tasks

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("drafter", help="a local drafter checkpoint or a zoo name")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--threshold", type=float, default=None)
    parser.add_argument("--block", type=int, default=8)
    parser.add_argument("-n", type=int, default=200)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    tokenizer = zoo.tokenizer()
    effort = {"steps": args.steps} if args.threshold is None else {"threshold": args.threshold}
    drafter = models.load(args.drafter, role="drafter", **effort)
    problems = tasks.arith_problems("test", args.n)
    texts = standalone_texts(drafter, tokenizer, [p.prompt for p in problems], args.block, args.max_new_tokens)
    accuracy = sum(tasks.is_correct(t, p.target) for t, p in zip(texts, problems)) / len(problems)
    print(json.dumps({"drafter": args.drafter, "kind": type(drafter).__name__, "steps": args.steps,
                      "threshold": args.threshold, "block": args.block, "n": args.n, "accuracy": accuracy,
                      "stderr": (accuracy * (1 - accuracy) / args.n) ** 0.5, "example": texts[0]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
