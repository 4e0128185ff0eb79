"""Drafter cost per round in verifier steps (issue 41, item 3), at B = 2, 4 and 8, batch 1, greedy.

For each drafter, the engine runs on the bench's validation prompts (never the test prompts) beside plain cached
decoding, interleaved by the bench's timer (`specdiff.bench.timer.measure`); a drafter's cost is its seconds per
round (`draft_ms`, the engine's draft timer) over plain decoding's seconds per token (one verifier step). The
masked drafter is also given per denoising step (its K = 1 and K = 2 rounds' difference).

    python tools/drafter_costs.py --dtype float32 --out docs/results/precision/drafter_costs_float32.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

DRAFTERS = ("smollm2-135m-instruct-dflash", "lookup", "datastore", "hybrid", "smollm2-135m-instruct-ar",
            "smollm2-135m-instruct-masked")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verifier", default="smollm2-135m-instruct")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    parser.add_argument("--blocks", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--drafters", nargs="+", default=list(DRAFTERS))
    parser.add_argument("--prompts", type=int, default=6, help="validation prompts")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    import torch

    from specdiff.bench import methods
    from specdiff.bench.figures import figures
    from specdiff.bench.rows import PLAIN
    from specdiff.bench.timer import measure
    from specdiff.models import ModelCache
    from specdiff.runs import RunConfig
    from specdiff.runs.prompts import validation_prompts

    torch.set_num_threads(args.threads)
    cache = ModelCache(dtype=args.dtype)
    verifier = cache.verifier(args.verifier, temperature=0.0)
    prompts = validation_prompts(cache.tokenizer(args.verifier), args.prompts)
    rows = {PLAIN: methods.plain(verifier)}
    for drafter in args.drafters:
        for block in args.blocks:
            config = RunConfig(name=f"{drafter} B={block}", drafter=drafter, verifier=args.verifier, block_size=block,
                               sampling={"temperature": 0.0})
            rows[config.name] = methods.speculative(config, cache)
        if "steps" in cache.ref(drafter).spec.effort:  # a diffusion drafter: its K at one short B too
            for steps in (1, 2):
                config = RunConfig(name=f"{drafter} B=4 K={steps}", drafter=drafter, verifier=args.verifier,
                                   block_size=4, steps=steps, sampling={"temperature": 0.0})
                rows[config.name] = methods.speculative(config, cache)
    records = measure(rows, prompts, args.max_new_tokens, args.repeats, 0,
                      lambda *a: print(*a, file=sys.stderr, flush=True), phase="validation")
    plain = figures(records[PLAIN], prompts)
    step_ms = 1000 * plain["wall_s"] / max(plain["new_tokens"], 1)
    out = {"verifier": args.verifier, "dtype": args.dtype, "threads": args.threads, "prompts": len(prompts),
           "max_new_tokens": args.max_new_tokens, "plain_ms_per_token": step_ms, "rows": {}}
    for name in rows:
        if name == PLAIN:
            continue
        row = figures(records[name], prompts)
        out["rows"][name] = {"draft_ms_per_round": row.get("draft_ms"), "cost_in_steps": row.get("draft_ms", 0) / step_ms,
                             "verify_ms_per_round": row.get("verify_ms"), "tokens_per_round": row["tokens_per_round"],
                             "speedup_vs_plain": row["tokens_per_s"] / plain["tokens_per_s"]}
    name = next((n for n in rows if n.endswith("masked B=4 K=2")), None)
    if name is not None:
        one, two = out["rows"][name.replace("K=2", "K=1")], out["rows"][name]
        out["masked_cost_per_step_in_steps"] = (two["draft_ms_per_round"] - one["draft_ms_per_round"]) / step_ms
    text = json.dumps(out, indent=1)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
