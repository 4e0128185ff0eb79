"""verify(k) over one step, eager and compiled, and plain decoding's fraction of the weight-streaming floor (issue 53,
item 4): the report's `steps`, measured by `bench speedup` after its rows (`settings.verify_ks`), in the same
process, and by `tools/compiled_steps.py` alone.

Terms:
- verify(k): the median milliseconds of one verifier forward over k new tokens on a cached prefix of `prefix`
  random tokens (the prefix restored after each: a crop for the eager verifier, the length for the compiled one),
  after one warm-up forward of the same k; eager is `engine.verifier.Verifier`, compiled
  `engine.compiled.CompiledVerifier` (its first call of each k compiles or loads the graph: its seconds are in
  `compile_s`, never in the timings);
- the step: verify(1), one token's forward (always measured, whether or not 1 is among the ks); verify(k) in
  steps is verify(k) / step (1.0 at k = 1 by construction);
- the floor: the verifier's weight bytes over the memory bandwidth measured here (one read of a buffer of
  `bandwidth_mb`, much larger than the caches; median of 5), the time a decode step cannot beat when every weight
  is read once per token; at the verifier's dtype (`floor_ms`) and at bfloat16 and float32 (`floor_ms_by_dtype`);
  `floor_fraction` is floor / step.
"""
from __future__ import annotations

import statistics
import sys
import time

PREFIX = 128  # cached tokens before the verified ones
REPEATS = 12
BANDWIDTH_MB = 512
BYTES = {"bfloat16": 2, "float32": 4}


def steps(model, ks: list[int], compile: bool = False, prefix: int = PREFIX, repeats: int = REPEATS,
          bandwidth_mb: int = BANDWIDTH_MB, say=None) -> dict:
    """The `steps` block (module docstring) of a causal LM `model` (a verifier's), eager and, with `compile`,
    compiled."""
    from specdiff.engine.verifier import Verifier

    say = say or (lambda line: print(line, file=sys.stderr))
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit is not None:  # the prefix and the longest chunk fit the model's positions
        prefix = max(1, min(prefix, int(limit) - 2 - max(ks, default=1)))
    parameters = sum(p.numel() for p in model.parameters())
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    bandwidth = bandwidth_bytes_per_s(bandwidth_mb)
    floor_ms = 1000 * weight_bytes / bandwidth
    out = {"ks": list(ks), "prefix": prefix, "repeats": repeats,
           "dtype": str(next(model.parameters()).dtype).removeprefix("torch."), "weight_bytes": weight_bytes,
           "bandwidth_gb_s": round(bandwidth / 1e9, 2), "floor_ms": round(floor_ms, 4),
           "floor_ms_by_dtype": {dtype: round(1000 * parameters * size / bandwidth, 4) for dtype, size in BYTES.items()}}
    paths = {"eager": lambda: Verifier(model, temperature=0.0)}
    if compile:
        from specdiff.engine.compiled import CompiledVerifier

        paths["compiled"] = lambda: CompiledVerifier(model, temperature=0.0)
    measured = sorted({1, *ks})
    for name, make in paths.items():
        verifier = make()
        times = verify_ms(verifier, model, measured, prefix, repeats, say)
        step = times[1]
        out[name] = {"verify_ms": {str(k): round(t, 4) for k, t in times.items()},
                     "verify_in_steps": {str(k): round(t / step, 4) for k, t in times.items()},
                     "step_ms": round(step, 4), "floor_fraction": round(floor_ms / step, 4)}
        if name == "compiled":
            out[name].update(compile_s=verifier.compile_s, fallback=verifier.fallback)
    if compile:
        out["compiled_step_speedup"] = round(out["eager"]["step_ms"] / out["compiled"]["step_ms"], 4)
    return out


def verify_ms(verifier, model, ks: list[int], prefix: int, repeats: int, say=None) -> dict[int, float]:
    """{k: median ms of one forward over k tokens after `prefix` cached ones} (module docstring)."""
    import torch

    say = say or (lambda line: None)
    vocab = int(model.config.vocab_size)
    low = min(100, vocab // 2)  # ids past the special tokens where the vocabulary has room
    generator = torch.Generator().manual_seed(0)
    device = next(model.parameters()).device
    ids = torch.randint(low, vocab, (1, prefix + 1), generator=generator).to(device)  # [1, prefix + 1]
    if hasattr(verifier, "reserve"):
        verifier.reserve(prefix + 1 + max(ks))
    out = {}
    with torch.inference_mode():
        for k in ks:
            verifier.start(ids, torch.ones_like(ids, dtype=torch.bool))
            chunk = torch.randint(low, vocab, (1, k), generator=generator).to(device)  # [1, k]
            verifier.score(chunk)  # warm-up (the compiled path compiles or loads its graph here)
            verifier.commit(torch.zeros(1, dtype=torch.long, device=device))
            samples = []
            for _ in range(repeats):
                begin = time.perf_counter()
                verifier.score(chunk)
                samples.append(1000 * (time.perf_counter() - begin))
                # back to the prefix: every repeat sees the same cache
                verifier.commit(torch.zeros(1, dtype=torch.long, device=device))
            out[k] = statistics.median(samples)
            say(f"{type(verifier).__name__} verify({k}): {out[k]:.2f} ms")
    return out


def bandwidth_bytes_per_s(megabytes: int = BANDWIDTH_MB) -> float:
    """Bytes per second of one read of a buffer of `megabytes` (median of 5, after one read)."""
    import torch

    buffer = torch.ones(megabytes * 2**20 // 4, dtype=torch.float32)
    buffer.sum()
    samples = []
    for _ in range(5):
        begin = time.perf_counter()
        buffer.sum()
        samples.append(time.perf_counter() - begin)
    return buffer.numel() * 4 / statistics.median(samples)
