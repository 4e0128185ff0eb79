"""Per-call costs of a drafter and a verifier, measured once, side by side (issue 22, item 2).

For each model, forwards over n = 1, 2, 4, ..., 128 tokens at batch 1 are timed round-robin
(`eval.timing.interleaved_median_ms`, so load from other processes falls on every size alike), and
the medians are fitted by least squares with ms(n) = per_forward_ms + per_token_ms * n
(`eval.calibration.fit_draft_cost`, each coefficient clipped at 0). These
costs price a sweep's `calls` (`specdiff.eval.pricing`). They are forwards without a KV cache over
the n tokens; at the testbed's contexts (about 100 tokens), attending to a cache costs little more.
"""
from __future__ import annotations

import platform
import time

SIZES = (1, 2, 4, 8, 16, 32, 64, 128)


def measure_call_costs(verifier: str, drafter: str | None, repeats: int = 15, threads: int = 1) -> dict:
    """{"verifier": {"per_forward_ms", "per_token_ms", "medians_ms"}, "drafter": {...} (when given),
    "sizes", "repeats", "threads", "machine", "measured"}."""
    import torch

    from specdiff.eval.calibration import fit_draft_cost
    from specdiff.eval.timing import interleaved_median_ms
    from specdiff.runs.model_cache import ModelCache

    torch.set_num_threads(threads)
    cache = ModelCache()
    models = {"verifier": cache.get(verifier, "verifier").model}
    if drafter is not None:
        drafter_object = cache.get(drafter, "drafter", verifier=cache.get(verifier, "verifier"))
        models["drafter"] = drafter_object.model
    functions = {}
    for name, model in models.items():
        vocab = int(model.config.vocab_size)
        for n in SIZES:
            ids = torch.randint(0, vocab, (1, n), generator=torch.Generator().manual_seed(n))
            functions[f"{name}/{n}"] = _forward(model, ids)
    medians = interleaved_median_ms(functions, repeats=repeats, warmup=2)
    out = {"sizes": list(SIZES), "repeats": repeats, "threads": threads, "machine": platform.node(),
           "measured": time.strftime("%Y-%m-%d %H:%M:%S")}
    for name in models:
        ms = [medians[f"{name}/{n}"] for n in SIZES]
        fit = fit_draft_cost(SIZES, ms)  # the same affine least squares as c_d(K) = a + b K
        out[name] = {"per_forward_ms": max(0.0, fit["a"]), "per_token_ms": max(0.0, fit["b"]), "r2": fit["r2"],
                     "medians_ms": ms}
    return out


def _forward(model, ids):
    import torch

    def call():
        with torch.inference_mode():
            model(input_ids=ids, use_cache=False)
    return call
