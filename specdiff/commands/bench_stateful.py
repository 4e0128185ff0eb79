"""`specdiff bench stateful`: what rolling back recurrent and convolution state costs (issue 20, item 5).

A hybrid pair (a Qwen3.5-shaped verifier and its perturbed copy as the AR drafter, saved to disk with
`--save DIR` or read from `--verifier PATH --drafter PATH`) and an attention-only pair of the same size
(Qwen3), measured side by side in one run, greedy, on the same prompts: speculative decoding against the
same verifier's own cached AR loop (`engine/baselines.py`), the rollback's time per round and its share of
the round (`Summary.state_rollback`), and HF assisted generation, which refuses stateful models: its row
records the refusal. Times are medians of interleaved repeats with a fixed torch thread count.
"""
from __future__ import annotations

import json
import os

from specdiff.argtypes import positive_int


def register(which) -> None:
    bench = which.add_parser("stateful", help="rollback cost of a hybrid (Qwen3.5-shaped) verifier beside an attention one")
    bench.add_argument("--verifier", "--target", dest="verifier",
                       help="a hybrid verifier: any name `specdiff generate --verifier` takes (a saved folder, a fetched "
                            "name); default: build a tiny Qwen3.5-shaped one. --target: a deprecated alias")
    bench.add_argument("--drafter", help="its drafter, a causal LM (default: the verifier's perturbed copy)")
    bench.add_argument("--save", help="save the built hybrid pair to DIR/verifier and DIR/drafter, then measure it")
    bench.add_argument("--json", action="store_true", help="print only the JSON result")
    bench.add_argument("--threads", type=positive_int, default=1)
    bench.add_argument("--repeats", type=positive_int, default=3)
    bench.add_argument("--block", type=positive_int, default=4)
    bench.add_argument("--new-tokens", type=positive_int, default=64)
    bench.add_argument("--batch", type=positive_int, default=4)
    bench.set_defaults(handler=run)


def run(args) -> int:
    import torch

    from specdiff.bench.stateful import hf_assisted, measure, tiny_pair
    from specdiff.models import ModelCache

    torch.set_num_threads(args.threads)
    if args.verifier:
        hybrid = ModelCache(dtype="float32").model(args.verifier)  # resolved and loaded by `specdiff.models`
        drafter = ModelCache(dtype="float32").model(args.drafter or args.verifier)  # its own copy, even of one name
    else:
        hybrid, drafter = tiny_pair("hybrid")
        if args.save:
            hybrid.save_pretrained(os.path.join(args.save, "verifier"))
            drafter.save_pretrained(os.path.join(args.save, "drafter"))
    layers, hidden = hybrid.config.num_hidden_layers, hybrid.config.hidden_size
    attention, attention_drafter = tiny_pair("attention", layers=layers, hidden=hidden,
                                             vocab=hybrid.config.vocab_size)
    prompts = [[(7 * i + j) % 200 + 1 for j in range(5 + 3 * i)] for i in range(args.batch)]
    with torch.inference_mode():
        result = {
            "config": {"layers": layers, "hidden": hidden, "block": args.block, "new_tokens": args.new_tokens,
                       "batch": args.batch, "threads": args.threads, "repeats": args.repeats},
            "hybrid": measure(hybrid, drafter, prompts, args.block, args.new_tokens, args.repeats),
            "attention": measure(attention, attention_drafter, prompts, args.block, args.new_tokens, args.repeats),
        }
    result["hf_assisted_hybrid"] = hf_assisted(hybrid, drafter, prompts[0])
    print(json.dumps(result, indent=None if args.json else 2))
    return 0
