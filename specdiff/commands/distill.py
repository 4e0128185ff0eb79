"""`specdiff distill`: drafters trained by specdiff for a user's verifier (issue 31).

`specdiff distill --verifier V --kind dflash|ar|masked --out DIR`: trains a drafter on the data below
(`specdiff.training.distill`), resumable from DIR/checkpoint.pt, with a progress bar and a `--json`
summary; `specdiff generate --verifier V --drafter DIR` then uses it.

`specdiff distill data --verifier V --out DIR --shards N`: the training data, conversations the verifier
writes and answers itself (`specdiff.zoo_tools.distill_data`): resumable shard by shard, with a progress bar
and a `--json` summary."""
from __future__ import annotations

import json

from specdiff.argtypes import positive_int


def register(subparsers) -> None:
    distill = subparsers.add_parser("distill", help="drafters trained for your verifier, and their data",
                                    description="Distillation for a user's verifier (docs/distill.md).")
    distill.add_argument("--verifier", help="a fetched name, local folder or .gguf file")
    distill.add_argument("--kind", metavar="KIND", help="a kind distilled for a real verifier. dflash: one-step block drafter on the "
                         "verifier's hidden states, reduced draft vocabulary; ar: small full-vocabulary causal LM; "
                         "masked: standalone Dream-style masked diffusion drafter over the draft vocabulary")
    distill.add_argument("--out", help="output folder (resumes from its checkpoint.pt)")
    distill.add_argument("--data", default=None, help="data folder (default data/distill/VERIFIER)")
    distill.add_argument("--steps", type=positive_int, default=None, help="optimiser steps (default per kind)")
    distill.add_argument("--shards", type=positive_int, default=None,
                         help="train on the first N data shards only (default all)")
    distill.add_argument("--draft-vocab", type=positive_int, default=None,
                         help="dflash, masked: draft vocabulary size (default 8192)")
    distill.add_argument("--threads", type=positive_int, default=None, help="torch threads (default: torch's)")
    distill.add_argument("--dtype", choices=("auto", "float32", "bfloat16"), default=None,
                         help="the frozen verifier's dtype while training (the drafter trains in float32 on its "
                              "states; default auto: bfloat16 on CUDA or a CPU with native bfloat16, else float32)")
    distill.add_argument("--target-loss", choices=("ce", "kl", "ce_tv"), default=None,
                         help="what the drafter learns: ce, cross-entropy on the verifier's sampled tokens; kl, "
                              "KL(p || q) against the verifier's own next-token distribution p; ce_tv, 0.1 CE + "
                              "0.9 TV(p, q) (DSpark's); p is read from the verifier's last hidden state and log-normaliser, "
                              "cached per data shard on first use (default ce; a resumed run keeps its own)")
    distill.add_argument("--seed", type=int, default=0)
    distill.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="settings",
                         help="a recipe setting (its value as JSON, else a string), e.g. anchors=64, lr=6e-4, "
                              "widths=[2,4,8]; repeatable. The kinds' settings: specdiff.training.distill.RECIPES")
    distill.add_argument("--json", action="store_true", help="print the training summary as JSON")
    sub = distill.add_subparsers(dest="distill_command", metavar="DISTILL_COMMAND")
    distill.set_defaults(handler=run_train)
    data = sub.add_parser("data", help="conversations the verifier writes (Magpie) and answers itself",
                          description="Writes shards of verifier-written user turns and verifier-regenerated "
                                      "responses (uint16 token ids) into --out; a rerun resumes at the first "
                                      "missing shard. Held-out prompts (HumanEval, the arith test split, the "
                                      "bench's prompt files, --held-out files) never enter.")
    data.add_argument("--verifier", required=True, help="a fetched name, local folder or .gguf file")
    data.add_argument("--out", default=None, help="data folder (default data/distill/VERIFIER)")
    data.add_argument("--shards", type=positive_int, required=True, help="total shards wanted (resumes)")
    data.add_argument("--samples", type=positive_int, default=64, help="user turns drafted per shard (default 64)")
    data.add_argument("--passages", type=int, default=None,
                      help="long-input conversations per shard: a passage the verifier writes, then a task on it "
                           "(default samples / 2; 0: Magpie turns alone, the first 36 shards' recipe)")
    data.add_argument("--dtype", choices=("auto", "float32", "bfloat16"), default=None,
                      help="the verifier's dtype while generating (default auto: bfloat16 on a CPU with native "
                           "bfloat16 or CUDA, else float32)")
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

    from specdiff.models import quiet_transformers
    from specdiff.zoo_tools.distill_data import generate

    quiet_transformers()
    if args.threads:
        torch.set_num_threads(args.threads)
    out = args.out or f"data/distill/{args.verifier}"
    index = generate(out, args.verifier, args.shards, samples=args.samples, seed=args.seed,
                     user_max_tokens=args.user_max_tokens, response_max_tokens=args.response_max_tokens,
                     held_out=args.held_out, show_progress=not args.json, passages=args.passages, dtype=args.dtype)
    summary = {key: index[key] for key in ("verifier", "conversations", "tokens", "prompt_set_sha256")}
    if index.get("raw_prompts"):
        summary["note"] = "the verifier's tokenizer has no chat template: the prompts were used raw"
    summary.update(shards=len(index["shards"]), seconds=sum(s["seconds"] for s in index["shards"]), out=out)
    print(json.dumps(summary) if args.json else "  ".join(f"{k}: {v}" for k, v in summary.items()))
    return 0


def run_train(args) -> int:
    import torch

    from specdiff.models import quiet_transformers
    from specdiff.training.distill import DRAFT_SIZE, train

    if not (args.verifier and args.kind and args.out):
        missing = [flag for flag, value in (("--verifier", args.verifier), ("--kind", args.kind),
                                            ("--out", args.out)) if not value]
        raise ValueError(f"specdiff distill needs {', '.join(missing)} (or the `data` subcommand)")
    from specdiff.models import distilled_kinds

    if args.kind not in distilled_kinds():  # the kinds with a distilled role (`KindSpec.distilled_role`)
        raise ValueError(f"--kind {args.kind!r}: expected one of {', '.join(distilled_kinds())}")
    quiet_transformers()
    if args.threads:
        torch.set_num_threads(args.threads)
    data = args.data or f"data/distill/{args.verifier}"
    settings = _recipe_settings(args.kind, args.settings)
    summary = train(args.kind, args.verifier, data, args.out, steps=args.steps,
                    draft_size=args.draft_vocab or DRAFT_SIZE, seed=args.seed, show_progress=not args.json,
                    shards=args.shards, dtype=args.dtype, target=args.target_loss, **settings)
    summary["out"] = args.out
    print(json.dumps(summary) if args.json else "  ".join(f"{k}: {v}" for k, v in summary.items()))
    return 0


def _recipe_settings(kind: str, pairs: list[str]) -> dict:
    """--set KEY=VALUE pairs -> recipe settings; a key the kind's recipe does not have is refused, naming them."""
    from specdiff.training.distill import recipe_of

    known, out = recipe_of(kind).defaults, {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or key not in known:
            raise ValueError(f"--set {pair!r}: expected KEY=VALUE with KEY one of the {kind} recipe's settings: "
                             f"{', '.join(sorted(known))}")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out
