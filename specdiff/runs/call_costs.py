"""Per-call costs of a drafter and a verifier, measured once, side by side (issue 22, item 2).

For each model, forwards over n = 1, 2, 4, ..., 128 tokens at batch 1 are timed round-robin
(`eval.timing.interleaved_median_ms`, so load from other processes falls on every size alike), and
the medians are fitted by least squares with ms(n) = per_forward_ms + per_token_ms * n
(`eval.calibration.fit_draft_cost`, each coefficient clipped at 0). These
costs price a sweep's `calls` (`specdiff.eval.pricing`). They are forwards without a KV cache over
the n tokens; at the testbed's contexts (about 100 tokens), attending to a cache costs little more.

`store_call_costs` gives a sweep store's costs (`specdiff frontier --cost calls`, `specdiff report`):
measured once with the store's models and kept in the store.
"""
from __future__ import annotations

import json
import platform
import time
from pathlib import Path

SIZES = (1, 2, 4, 8, 16, 32, 64, 128)


def store_call_costs(store: str | Path, costs_file: str | None = None, remeasure: bool = False) -> dict:
    """The store's per-call costs: from `costs_file`, or the store's `call_costs` artifact, or measured
    now with the store's models (`measure_call_costs`) and kept in the store as that artifact."""
    from specdiff.eval.sweepstore import SweepStore

    if costs_file is not None:
        path = Path(costs_file)
        if not path.is_file():
            raise ValueError(f"--costs {costs_file!r} does not exist")
        return json.loads(path.read_text())
    reader = SweepStore(store)
    try:
        stored, settings = reader.artifacts().get("call_costs"), reader.settings
        has_calls = any(row.get("calls") for row in reader.rows()[:1])
    finally:
        reader.close()
    if not has_calls:
        raise ValueError(f"{store} holds no call counts (its rows were written before schema 2): re-run its sweep "
                         "into a new store for --cost calls")
    if stored is not None and not remeasure:
        return stored
    models = settings["models"]
    costs = measure_call_costs(models["verifier"], models["drafter"], threads=settings["run"]["threads"])
    writer = SweepStore(store, settings)
    try:
        writer.put_artifact("call_costs", costs)
    finally:
        writer.close()
    return costs


def measure_call_costs(verifier: str, drafter: str | None, repeats: int = 15, threads: int = 1) -> dict:
    """{"verifier": {"per_forward_ms", "per_token_ms", "medians_ms"}, "drafter": {...} (when given),
    "sizes", "repeats", "threads", "machine", "measured"}."""
    import torch

    from specdiff.eval.calibration import fit_draft_cost
    from specdiff.eval.timing import interleaved_median_ms
    from specdiff.models import ModelCache

    torch.set_num_threads(threads)
    cache = ModelCache()
    models = {"verifier": cache.verifier(verifier).model}
    if drafter is not None:
        drafter_object = cache.drafter(drafter, verifier=cache.verifier(verifier))
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
