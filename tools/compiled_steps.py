"""verify(k) over one step, eager and compiled, and plain decoding's fraction of the weight-streaming floor (issue 53,
item 4). Prints JSON.

    python tools/compiled_steps.py --verifier smollm2-135m-instruct --dtype bfloat16 --threads 1
    python tools/compiled_steps.py --random-like smollm2-135m-instruct --dtype bfloat16   # random weights, same shapes

For each k in --ks: the median milliseconds of one verifier forward over k new tokens on a cached prefix of --prefix
tokens (the prefix restored after each: a crop for the eager verifier, the length for the compiled one), eager
(`sd.Verifier`) and compiled (`engine.compiled.CompiledVerifier`); verify(k) in one-token steps of the same path.
The floor: the verifier's weight bytes over the memory bandwidth measured here (one read of a buffer of
--bandwidth-mb), the time a decode step cannot beat when every weight is read once per token; `floor_fraction` is
floor / step. The first compiled call of each k compiles (minutes cold, seconds from the inductor cache): its
seconds are in `compile_s`, never in the timings.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

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
    model = _model(args)
    ks = [int(k) for k in args.ks.split(",")]
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    bandwidth = _bandwidth(args.bandwidth_mb)
    floor_ms = 1000 * weight_bytes / bandwidth
    result = {"model": args.random_like or args.verifier, "random_weights": args.random_like is not None,
              "dtype": str(next(model.parameters()).dtype).removeprefix("torch."), "threads": args.threads,
              "prefix": args.prefix, "repeats": args.repeats, "weight_bytes": weight_bytes,
              "bandwidth_gb_s": round(bandwidth / 1e9, 2), "floor_ms": round(floor_ms, 2)}
    from specdiff.engine.compiled import CompiledVerifier
    from specdiff.engine.verifier import Verifier

    paths = {"eager": Verifier(model, temperature=0.0)}
    if not args.no_compile:
        paths["compiled"] = CompiledVerifier(model, temperature=0.0)
    for name, verifier in paths.items():
        times = _verify_k(verifier, model, ks, args.prefix, args.repeats)
        step = times[1] if 1 in times else None
        result[name] = {"verify_ms": {str(k): round(t, 2) for k, t in times.items()},
                        "verify_in_steps": {str(k): round(t / step, 3) for k, t in times.items()} if step else None,
                        "floor_fraction": round(floor_ms / step, 3) if step else None}
        if name == "compiled":
            result[name]["compile_s"] = verifier.compile_s
            result[name]["fallback"] = verifier.fallback
    if "compiled" in result and 1 in ks:
        result["compiled_step_speedup"] = round(result["eager"]["verify_ms"]["1"] / result["compiled"]["verify_ms"]["1"], 3)
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


@torch.inference_mode()
def _verify_k(verifier, model, ks, prefix, repeats) -> dict[int, float]:
    """{k: median ms of one forward over k tokens after `prefix` cached ones}."""
    vocab = int(model.config.vocab_size)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(100, vocab, (1, prefix + 1), generator=generator)
    if hasattr(verifier, "reserve"):
        verifier.reserve(prefix + 1 + max(ks))
    out = {}
    for k in ks:
        verifier.start(ids, torch.ones_like(ids, dtype=torch.bool))
        chunk = torch.randint(100, vocab, (1, k), generator=generator)
        verifier.score(chunk)  # warm-up (the compiled path compiles or loads its graph here)
        verifier.commit(torch.zeros(1, dtype=torch.long))
        samples = []
        for _ in range(repeats):
            begin = time.perf_counter()
            verifier.score(chunk)
            samples.append(1000 * (time.perf_counter() - begin))
            verifier.commit(torch.zeros(1, dtype=torch.long))  # back to the prefix: every repeat sees the same cache
        out[k] = statistics.median(samples)
        print(f"{type(verifier).__name__} verify({k}): {out[k]:.2f} ms", file=sys.stderr)
    return out


def _bandwidth(megabytes: int) -> float:
    """Bytes per second of one read of a buffer much larger than the caches (median of 5)."""
    buffer = torch.ones(megabytes * 2**20 // 4, dtype=torch.float32)
    buffer.sum()
    samples = []
    for _ in range(5):
        begin = time.perf_counter()
        buffer.sum()
        samples.append(time.perf_counter() - begin)
    return buffer.numel() * 4 / statistics.median(samples)


if __name__ == "__main__":
    sys.exit(main())
