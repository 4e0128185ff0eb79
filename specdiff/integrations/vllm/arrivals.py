"""Staggered arrivals for `specdiff bench vllm --arrivals poisson`: where continuous batching differs
from static batches.

`staggered` runs one Poisson schedule through every (engine, c); `serve_arrivals` is the one
request-arrival loop, which both servers run: `VllmServer` (vLLM's continuous batching, an in-process
engine fed by add_request / step) and `StaticServer` (specdiff's engine, static batches).
`AcceptanceObserver` counts acceptance at V1's rejection_sample after the plugin's rules, as an observer
the plugin's wrapper tells (`state.OBSERVERS`), not by patching vLLM a second time.
"""
from __future__ import annotations

import os
import statistics
import sys
import time

from specdiff.integrations.vllm.bench_engines import engine_drafters, load, make_llm, speculative_generator, \
    vllm_cases


def staggered(options, target, draft, masked, prompts, generator, log) -> tuple[list[dict], dict]:
    """Poisson arrivals at options.rate, output lengths uniform in min_tokens..tokens, the same schedule for
    every engine and concurrency c (at most c requests in flight; the others wait, as behind a client
    with c connections). Each repeat runs every (engine, c) once, interleaved, so that the machine's
    drift hits them alike; per (engine, c): tokens/s and per-request latency (arrival to its last
    token) of the repeat with the shortest wall time (every repeat's wall time is reported too).
    How each server admits requests: `VllmServer`, `StaticServer`."""
    import torch

    count = len(prompts)
    gaps = torch.empty(count, dtype=torch.float64).exponential_(options.rate, generator=generator)
    arrivals = (torch.cumsum(gaps, 0) - gaps[0]).tolist()  # the first request arrives at 0
    shortest = options.min_tokens or max(1, options.tokens // 4)
    lengths = torch.randint(shortest, options.tokens + 1, (count,), generator=generator).tolist()
    schedule = {"rate_per_s": options.rate, "requests": count, "min_tokens": shortest,
                "arrival_span_s": round(arrivals[-1], 3), "output_tokens": sum(lengths)}
    observer = AcceptanceObserver()
    servers = [(name, VllmServer(options, target, speculative, extra, observer)) for name, speculative, extra in
               vllm_cases(options, draft, masked)]
    target_model = load(target, options)
    servers += [(name, StaticServer(options, target_model, make)) for name, make in
                engine_drafters(options, draft, masked)]
    try:
        warm = [0.0] * min(count, 4)
        for _, server in servers:  # warm-up: a few requests at once, at each concurrency
            for concurrency in options.concurrency:
                server.serve(prompts[: len(warm)], warm, [8] * len(warm), concurrency)
        runs: dict = {}
        for _ in range(options.repeats):
            for name, server in servers:
                for concurrency in options.concurrency:
                    measured = server.serve(prompts, arrivals, lengths, concurrency)
                    runs.setdefault((name, concurrency), []).append(measured)
                    print(f"[bench vllm] {name} c={concurrency}: {max(measured[0]):.2f} s", file=sys.stderr,
                          flush=True)
        results = []
        for (name, concurrency), measured in runs.items():
            finish, acceptance = min(measured, key=lambda run: max(run[0]))  # other jobs' load only slows a run
            latency = sorted(f - a for f, a in zip(finish, arrivals))
            wall = max(finish)
            results.append({"engine": name, "concurrency": concurrency, "wall_s": round(wall, 4),
                            "tokens_per_s": round(sum(lengths) / wall, 1),
                            "latency_mean_s": round(statistics.fmean(latency), 4),
                            "latency_p50_s": round(quantile(latency, 0.5), 4),
                            "latency_p90_s": round(quantile(latency, 0.9), 4),
                            "acceptance": None if acceptance is None else round(acceptance, 4),
                            "walls_s": [round(max(run[0]), 3) for run in measured]})
            log(results[-1:])
    finally:
        for _, server in servers:
            server.close()
        observer.remove()
    return results, schedule


def serve_arrivals(server, prompts, arrivals, lengths, concurrency) -> list[float]:
    """The one arrival loop: finish times (seconds from the first arrival) of requests i arriving at
    arrivals[i] (sorted), at most `concurrency` in flight. Each turn moves the arrived requests to the
    waiting queue, admits waiting ones in order while fewer than `concurrency` are in flight
    (`server.admit(i, prompts[i], lengths[i])`), then runs one `server.step()`, which returns the indices
    that finished; with nothing in flight it sleeps until the next arrival."""
    waiting, in_flight, finish = [], set(), [0.0] * len(prompts)
    arrived = done = 0
    start = time.perf_counter()
    while done < len(prompts):
        now = time.perf_counter() - start
        while arrived < len(prompts) and arrivals[arrived] <= now:
            waiting.append(arrived)
            arrived += 1
        while waiting and len(in_flight) < concurrency:
            i = waiting.pop(0)
            server.admit(i, prompts[i], lengths[i])
            in_flight.add(i)
        if not in_flight:
            time.sleep(max(0.0, arrivals[arrived] - now))
            continue
        finished = server.step()
        end = time.perf_counter() - start
        for i in finished:
            if i in in_flight:
                in_flight.discard(i)
                finish[i] = end
                done += 1
    return finish


class VllmServer:
    """One in-process vLLM engine with continuous batching: a request enters vLLM's running batch at the
    next engine step once it has arrived and fewer than c are in flight (LLMEngine.add_request), and
    leaves it when its own length is reached (LLMEngine.step). Acceptance from `observer` (vLLM's own
    counters live in one Prometheus registry per process, which the latest engine takes over, so with two
    engines alive they cannot tell the engines apart)."""

    def __init__(self, options, target, speculative, extra, observer=None):
        self.llm = make_llm(options, target, speculative, extra)
        self.observer = observer
        self.counter = 0
        self.ids: dict = {}

    def serve(self, prompts, arrivals, lengths, concurrency):
        """Finish times (seconds from the first arrival) and the acceptance of this run."""
        before = self.observer.read() if self.observer is not None else (0, 0)
        self.ids = {}
        finish = serve_arrivals(self, prompts, arrivals, lengths, concurrency)
        after = self.observer.read() if self.observer is not None else (0, 0)
        drafted = after[1] - before[1]
        return finish, (after[0] - before[0]) / drafted if drafted else None

    def admit(self, i, prompt, length) -> None:
        from vllm import SamplingParams

        self.counter += 1
        request_id = f"r{self.counter}"
        self.llm.llm_engine.add_request(request_id, {"prompt_token_ids": prompt},
                                        SamplingParams(temperature=1.0, max_tokens=length, ignore_eos=True))
        self.ids[request_id] = i

    def step(self) -> list[int]:
        return [self.ids.pop(output.request_id) for output in self.llm.llm_engine.step()
                if output.finished and output.request_id in self.ids]

    def close(self):
        import gc

        del self.llm
        gc.collect()


class StaticServer:
    """specdiff's engine serving arrivals in static batches: when idle, it takes every waiting request (at
    most c) as one batch and returns them together when the batch is done. `SpeculativeGenerator.generate`
    takes one max_new_tokens per call, so the batch runs to its longest request's length; a request that
    arrives meanwhile waits for the next batch. At c = 1 that is one request at a time."""

    def __init__(self, options, target_model, make_drafter):
        if isinstance(target_model, (str, os.PathLike)):
            target_model = load(target_model, options)
        self.options, self.make, self.target = options, make_drafter, target_model
        self.generators: dict = {}
        self.batch: list = []

    def serve(self, prompts, arrivals, lengths, concurrency):
        """Finish times (seconds from the first arrival) and the acceptance of this run."""
        import torch

        self.gen = self.generators.get(concurrency)
        if self.gen is None:
            self.gen = self.generators[concurrency] = speculative_generator(self.options, self.target, self.make(),
                                                                            concurrency)
        self.generator = torch.Generator().manual_seed(self.options.seed)
        self.accepted = self.drafted = 0
        finish = serve_arrivals(self, prompts, arrivals, lengths, concurrency)
        return finish, self.accepted / self.drafted if self.drafted else None

    def admit(self, i, prompt, length) -> None:
        self.batch.append((i, prompt, length))

    def step(self) -> list[int]:
        """The admitted requests as one batch, run to the longest one's length."""
        batch, self.batch = self.batch, []
        result = self.gen.generate([prompt for _, prompt, _ in batch], max_new_tokens=max(n for _, _, n in batch),
                                   generator=self.generator)
        self.accepted += sum(sum(s.accepted) for s in result.stats)
        self.drafted += sum(s.rounds for s in result.stats) * self.options.block
        return [i for i, _, _ in batch]

    def close(self):
        self.generators.clear()


class AcceptanceObserver:
    """Drafted and accepted tokens at vLLM V1's rejection_sample, after the plugin's rules: an observer of
    the plugin (`state.OBSERVERS`, told by its V1 wrapper), so vLLM is not patched a second time. Rows with
    vLLM's placeholder drafts (-1: drafts vLLM rejects by construction) are not counted. The plugin must be
    active (an engine that asks for specdiff has started in this process) for anything to be counted."""

    def __init__(self):
        from specdiff.integrations.vllm import state

        self.observers = state.OBSERVERS
        self.drafted = self.accepted = 0
        self.observers.append(self)

    def __call__(self, draft_token_ids, num_draft_tokens, output) -> None:
        counts = [int(n) for n in num_draft_tokens]
        real = self._real_rows(draft_token_ids, counts)
        emitted = (output != -1).sum(dim=1).tolist()  # accepted drafts + 1 (vLLM's rows, -1 padded)
        self.drafted += sum(n for n, ok in zip(counts, real) if ok)
        self.accepted += sum(max(e - 1, 0) if n else 0 for e, n, ok in zip(emitted, counts, real) if ok)

    @staticmethod
    def _real_rows(draft_token_ids, counts):
        placeholder = (draft_token_ids < 0).tolist()
        out, start = [], 0
        for n in counts:
            out.append(not any(placeholder[start : start + n]))
            start += n
        return out

    def read(self) -> tuple[int, int]:
        return self.accepted, self.drafted

    def remove(self):
        if self in self.observers:
            self.observers.remove(self)


def quantile(values: list[float], q: float) -> float:
    """The q-quantile of the values (numpy's linear interpolation between order statistics)."""
    import numpy as np

    return float(np.quantile(values, q))
