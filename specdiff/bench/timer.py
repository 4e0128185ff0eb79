"""The bench's one timer: every method on the same prompts, interleaved, medians (`eval.timing.interleaved_runs`).

Terms:
- a chunk: as many prompts as the widest method's batch (one prompt when every method runs batch 1); after a
  warm-up of every method, each chunk is timed before the next: every method `repeats` times round-robin, the
  order rotated from chunk to chunk; batch-1 methods are timed prompt by prompt;
- a record: one per prompt and method, the method's record (`methods.Method`) of the first repeat, with
  `seconds` and `cpu_s` (process CPU seconds) the medians over the repeats; a batched call's seconds are shared
  among its prompts by their generated tokens.
"""
from __future__ import annotations

import statistics
import time
from functools import partial

from specdiff.eval.timing import interleaved_runs

TIMED = ("seconds", "cpu_s", "draft_s", "forward_s", "verify_s")


def measure(methods: dict, prompts: list, max_new_tokens: int, repeats: int, seed: int, say=None,
            phase: str = "test") -> dict:
    """{method name: [record per prompt]} (module docstring); `say` gets one progress line per chunk."""
    say = say or (lambda *a: None)
    width = max(method.batch for method in methods.values())
    for method in methods.values():  # warm-up: first calls allocate caches and pick kernels
        method.call(prompts[:method.batch], min(max_new_tokens, 8), seed)
    records = {name: [] for name in methods}
    chunks = [prompts[i:i + width] for i in range(0, len(prompts), width)]
    begin = time.perf_counter()
    for c, chunk in enumerate(chunks):
        functions = {}
        for j, prompt in enumerate(chunk):
            functions.update({(name, j): partial(m.call, [prompt], max_new_tokens, seed)
                              for name, m in methods.items() if m.batch == 1})
        functions.update({(name, None): partial(m.call, chunk, max_new_tokens, seed)
                          for name, m in methods.items() if m.batch > 1})
        runs = interleaved_runs(functions, repeats, warmup=0, rotate=c)
        for (name, j), timed in runs.items():
            if j is not None:
                records[name].append(_record([run.value[0] | {"seconds": run.seconds, "cpu_s": run.cpu_s}
                                              for run in timed]))
                continue
            for i in range(len(chunk)):
                share = [(len(run.value[i]["ids"]) + 1) / sum(len(r["ids"]) + 1 for r in run.value) for run in timed]
                records[name].append(_record([run.value[i] | {"seconds": run.seconds * s, "cpu_s": run.cpu_s * s}
                                              for run, s in zip(timed, share)]))
        _progress(say, phase, records, len(chunk) * (c + 1), len(prompts), time.perf_counter() - begin, chunk)
    return records


def _record(repeats: list[dict]) -> dict:
    out = dict(repeats[0])
    for key in TIMED:
        if key in out:
            out[key] = statistics.median(r[key] for r in repeats)
    return out


def _progress(say, phase, records, done, total, elapsed, chunk) -> None:
    rates = ", ".join(f"{name} {sum(len(r['ids']) for r in rows[-len(chunk):]) / max(sum(r['seconds'] for r in rows[-len(chunk):]), 1e-9):.1f}"
                      for name, rows in records.items())
    left = elapsed / done * (total - done)
    kind = chunk[0].kind or "no kind"
    say(f"{phase} prompt {min(done, total)}/{total} ({kind}): {rates} tokens/s; {elapsed:.0f} s, about {left:.0f} s left")
