"""verify(k) over one step, eager and compiled, and plain decoding's fraction of the weight-streaming floor (issue 53,
item 4). Prints JSON.

    python tools/compiled_steps.py --verifier smollm2-135m-instruct --dtype bfloat16 --threads 1
    python tools/compiled_steps.py --random-like smollm2-135m-instruct --dtype bfloat16   # random weights, same shapes

What is measured and how: `specdiff.bench.steps` (its module docstring); `bench speedup` measures the same in its
own run with `--set verify_ks=[1,2,4,8,16]` (the report's `steps`). This tool adds --random-like: random weights
in a fetched verifier's shapes.
"""
from __future__ import annotations

import argparse
import json
import sys

import torch


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verifier", default="smollm2-135m-instruct", help="a name specdiff.models.load takes")
    parser.add_argument("--random-like", default=None, metavar="NAME",
                        help="random weights in the shapes of this fetched verifier's config (no weights read)")
    parser.add_argument("--dtype", default=None, choices=("float32", "bfloat16"))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--ks", default="1,2,4,8,16")
    parser.add_argument("--prefix", type=int, default=128, help="cached tokens before the verified ones")
    parser.add_argument("--repeats", type=int, default=12)
    parser.add_argument("--bandwidth-mb", type=int, default=512)
    parser.add_argument("--no-compile", action="store_true", help="eager only")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    from specdiff.bench.steps import steps

    model = _model(args)
    ks = [int(k) for k in args.ks.split(",")]
    result = {"model": args.random_like or args.verifier, "random_weights": args.random_like is not None,
              "threads": args.threads}
    result.update(steps(model, ks, compile=not args.no_compile, prefix=args.prefix, repeats=args.repeats,
                        bandwidth_mb=args.bandwidth_mb))
    print(json.dumps(result, indent=1))
    return 0


def _model(args):
    from specdiff.lm import precision

    dtype = precision.torch_dtype(precision.resolve(args.dtype))
    if args.random_like is None:
        from specdiff import models

        return models.load(args.verifier, role="verifier", dtype=str(dtype).removeprefix("torch.")).model
    from transformers import AutoConfig, AutoModelForCausalLM

    from specdiff.checkpoints import models_dir

    config = AutoConfig.from_pretrained(models_dir() / args.random_like)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config).to(dtype).eval()


if __name__ == "__main__":
    sys.exit(main())
