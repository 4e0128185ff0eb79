"""`specdiff distill`: drafters trained by specdiff for a user's verifier (issue 31).

`specdiff distill data --verifier V --out DIR --shards N`: the training data, conversations the verifier
writes and answers itself (`specdiff.zoo_tools.distill_data`): resumable shard by shard, with a progress bar
and a `--json` summary."""
from __future__ import annotations

import json

from specdiff.argtypes import positive_int


def register(subparsers) -> None:
    distill = subparsers.add_parser("distill", help="drafters trained for your verifier: their data",
                                    description="Distillation for a user's verifier (docs/distill.md).")
    sub = distill.add_subparsers(dest="distill_command", metavar="DISTILL_COMMAND")
    distill.set_defaults(handler=lambda args: (distill.print_help(), 0)[1])
    data = sub.add_parser("data", help="conversations the verifier writes (Magpie) and answers itself",
                          description="Writes shards of verifier-written user turns and verifier-regenerated "
                                      "responses (uint16 token ids) into --out; a rerun resumes at the first "
                                      "missing shard. Held-out prompts (HumanEval, the arith test split, the "
                                      "bench's prompt files, --held-out files) never enter.")
    data.add_argument("--verifier", required=True, help="a fetched name, local folder or .gguf file")
    data.add_argument("--out", default=None, help="data folder (default data/distill/VERIFIER)")
    data.add_argument("--shards", type=positive_int, required=True, help="total shards wanted (resumes)")
    data.add_argument("--samples", type=positive_int, default=64, help="user turns drafted per shard (default 64)")
    data.add_argument("--user-max-tokens", type=positive_int, default=64)
    data.add_argument("--response-max-tokens", type=positive_int, default=192)
    data.add_argument("--seed", type=int, default=0)
    data.add_argument("--held-out", action="append", default=[], metavar="JSONL",
                      help="a prompts file whose prompts must not enter the data (repeatable)")
    data.add_argument("--threads", type=positive_int, default=None, help="torch threads (default: torch's)")
    data.add_argument("--json", action="store_true", help="print the index summary as JSON")
    data.set_defaults(handler=run_data)


def run_data(args) -> int:
    import torch

    from specdiff.runs.model_cache import quiet_transformers
    from specdiff.zoo_tools.distill_data import generate

    quiet_transformers()
    if args.threads:
        torch.set_num_threads(args.threads)
    out = args.out or f"data/distill/{args.verifier}"
    index = generate(out, args.verifier, args.shards, samples=args.samples, seed=args.seed,
                     user_max_tokens=args.user_max_tokens, response_max_tokens=args.response_max_tokens,
                     held_out=args.held_out, show_progress=not args.json)
    summary = {key: index[key] for key in ("verifier", "conversations", "tokens", "prompt_set_sha256")}
    summary.update(shards=len(index["shards"]), seconds=sum(s["seconds"] for s in index["shards"]), out=out)
    print(json.dumps(summary) if args.json else "  ".join(f"{k}: {v}" for k, v in summary.items()))
    return 0
