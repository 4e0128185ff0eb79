"""The library of `specdiff bench vllm`: vLLM + specdiff beside specdiff's own engine (see
`specdiff.commands.bench_vllm` for the command line, docs/vllm.md for the figures).

`run(options, log)` -> the JSON report {"settings", "results", "ratios"}: requests arriving together
(`together`), a real verifier (`real`) or staggered arrivals (`arrivals.staggered`). The engines are built
in `bench_engines` (vLLM's in one place, `make_llm`), in `options.dtype` (default `default_dtype()`).

Why it keeps its own timer rather than `specdiff.bench.timer` (issue 52): the shared timer interleaves rows per
prompt inside one process, each row a `bench.methods.Method` called on one batch at a time; a vLLM row is a whole
engine (`make_llm`: its own worker, KV-cache pool and speculative config, freed with `gc` before the next), which
cannot be held beside the others to interleave, and it is timed at a concurrency or an arrival schedule, not per
prompt. Each engine therefore runs one warm-up and `repeats` timed runs in turn, and the load average is recorded
with every row. There is no tuner: the configuration is the command's (block, steps, lam), the same for vLLM and
specdiff's engine, since the bench compares engines, not configurations. Its models load through
`specdiff.models` (`bench_engines.load`, `models.ref(...).folder()`).

`options` is the command's argparse namespace (attributes: verifier, draft, masked, concurrency,
tokens, block, lam, temperature, top_p, steps, repeats, threads, seed, arrivals, rate, requests,
min_tokens, dtype); `log(rows)` is told each batch of result rows as they are measured.
"""
from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from specdiff.integrations.vllm.arrivals import staggered
from specdiff.integrations.vllm.bench_engines import PROPOSER, build_models, default_dtype, dtype_of, \
    engine_drafters, load, make_llm, speculative_generator, vllm_cases


def run(options, log=None) -> dict:
    """The bench (module docstring): {"settings", "results", "ratios"}."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")  # vLLM logs to stdout: keep --json's output JSON only
    import torch

    log = log or (lambda rows: None)
    if options.min_tokens is not None and options.min_tokens > options.tokens:
        raise SystemExit(f"--min-tokens ({options.min_tokens}) must not exceed --tokens ({options.tokens})")
    options.dtype = dtype_of(options)
    torch.set_num_threads(options.threads)
    if options.verifier is not None and options.draft is None:  # a verifier alone: the real-verifier bench
        settings, results, ratios = real(options, log)
    else:
        settings, results, ratios = tiny(options, log)
    return {"settings": settings, "results": results, "ratios": ratios}


def tiny(options, log) -> tuple[dict, list[dict], dict]:
    """The built tiny pair (or --verifier/--draft/--masked): vLLM + plugin and + DiffusionProposer against
    specdiff's engine with the same drafters, requests arriving together or staggered."""
    import torch

    if (options.temperature, options.top_p) != (1.0, 1.0):
        raise ValueError("--temperature and --top-p apply to the real-verifier bench (--verifier without --draft); the tiny pair's bench runs at temperature 1")
    options.lam = 0.5 if options.lam is None else options.lam
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as scratch:
        if options.verifier is None:
            target, draft, masked = build_models(Path(scratch))
        else:
            target, draft, masked = Path(options.verifier), Path(options.draft), Path(options.masked)
        vocab = json.loads((Path(target) / "config.json").read_text())["vocab_size"]
        generator = torch.Generator().manual_seed(options.seed)
        count = options.requests if options.arrivals == "poisson" else max(options.concurrency)
        prompts = torch.randint(1, vocab - 1, (count, 16), generator=generator).tolist()
        if options.arrivals == "poisson":
            results, schedule = staggered(options, target, draft, masked, prompts, generator, log)
        else:
            results, schedule = together(options, target, draft, masked, prompts, log), None
    settings = {"arrivals": options.arrivals, "tokens": options.tokens, "block": options.block, "lam": options.lam,
                "steps": options.steps, "threads": options.threads, "engine_threads": torch.get_num_threads(),
                "repeats": options.repeats, "temperature": 1.0, "dtype": options.dtype,
                "models": "built (tiny Qwen3, head_dim 32)" if options.verifier is None else str(target),
                "cpu_count": os.cpu_count(), "load_average_before": [round(x, 2) for x in load_before],
                "load_average_after": [round(x, 2) for x in os.getloadavg()]}
    if schedule is not None:
        settings.update(schedule)
    return settings, results, ratios(results)


# ------------------------------------------------------------------------------------------------
# requests arriving together (--arrivals together) and the real verifier (--verifier)
# ------------------------------------------------------------------------------------------------


def together(options, target, draft, masked, prompts, log) -> list[dict]:
    results = []
    for name, speculative, extra in vllm_cases(options, draft, masked):
        results += time_vllm(options, target, prompts, name, speculative, extra)
        log(results[-len(options.concurrency):])
    results += time_engine(options, target, draft, masked, prompts)
    log(results[-2 * len(options.concurrency):])
    return results


def real(options, log) -> tuple[dict, list[dict], dict]:
    """(settings, results, ratios) of vLLM on a real verifier without speculation and with DiffusionProposer
    (`specdiff.commands.bench_vllm`). At each concurrency c: tokens/s and acceptance as `time_vllm` measures."""
    import torch

    from specdiff import models
    from specdiff.runs import prompts as prompt_files
    from specdiff.zoo import distilled

    name = Path(options.verifier).name
    folder = models.ref(options.verifier, "verifier").folder()  # a fetched name or a local folder
    from specdiff.drafters import registry

    served = [spec.name for spec in registry.specs() if spec.serves_standalone and spec.distilled_role]
    drafter = options.masked or next((found for kind in served if (found := distilled.shipped_for(name, kind))), None)
    if drafter is None:
        raise ValueError(f"no drafter DiffusionProposer serves ({', '.join(served)}) is shipped for {name!r}: give "
                         f"one with --drafter (a folder that `specdiff distill --verifier {name} --kind "
                         f"{served[0] if served else 'KIND'} --out DIR` wrote)")
    if options.arrivals != "together":
        raise ValueError("--verifier times requests arriving together only (--arrivals together)")
    lam = options.lam or 0.0
    rule = {"rule": "linear", "leniency": lam} if lam > 0 else {"rule": "lossless"}
    count = max(options.concurrency)
    loaded = prompt_files.read_prompts(prompt_files.TEST_FILE, models.load_tokenizer(folder))
    prompts = [loaded[i % len(loaded)].ids for i in range(count)]
    load_before = os.getloadavg()
    label = rule["rule"] if lam == 0 else f"linear {lam:g}"
    results = time_vllm(options, folder, prompts, "vllm no speculation", None, {})
    log(results)
    speculative = {"method": "custom_class", "model": PROPOSER, "num_speculative_tokens": options.block}
    extra = {"specdiff": {**rule, "drafter": str(drafter), "steps": options.steps, "seed": options.seed}}
    results += time_vllm(options, folder, prompts, f"vllm DiffusionProposer {label}", speculative, extra)
    log(results[-len(options.concurrency):])
    settings = {"arrivals": "together", "tokens": options.tokens, "block": options.block, "rule": rule,
                "steps": options.steps, "temperature": options.temperature, "top_p": options.top_p,
                "threads": options.threads, "engine_threads": torch.get_num_threads(), "repeats": options.repeats,
                "dtype": options.dtype, "verifier": str(folder), "drafter": str(drafter),
                "prompts": f"{prompt_files.TEST_FILE.name}, first {min(count, len(loaded))} (cycled to {count}), "
                           f"chat template", "prompt_tokens": [len(p) for p in prompts],
                "cpu_count": os.cpu_count(), "omp_threads_bind": os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "auto"),
                "load_average_before": [round(x, 2) for x in load_before],
                "load_average_after": [round(x, 2) for x in os.getloadavg()]}
    by = {(r["engine"], r["concurrency"]): r["tokens_per_s"] for r in results}
    speculative_name = results[-1]["engine"]
    ratios = {f"vllm_speculative_over_plain_c{c}": round(by[(speculative_name, c)] / by[("vllm no speculation", c)], 3)
              for c in options.concurrency}
    return settings, results, ratios


def time_vllm(options, target, prompts, name, speculative, extra) -> list[dict]:
    """Per concurrency c: c requests at once, one warm-up then options.repeats timed runs; acceptance from
    vLLM's own counters (one engine alive)."""
    import gc

    from vllm import SamplingParams

    longest = max(len(p) for p in prompts)
    llm = make_llm(options, target, speculative, extra, max_model_len=longest + options.tokens + options.block + 8)
    params = SamplingParams(temperature=options.temperature, top_p=options.top_p, max_tokens=options.tokens,
                            ignore_eos=True)
    out = []
    for concurrency in options.concurrency:
        batch = [{"prompt_token_ids": p} for p in prompts[:concurrency]]
        llm.generate(batch, params, use_tqdm=False)  # warm-up
        before = _counters(llm)
        walls = []
        for _ in range(options.repeats):
            start = time.perf_counter()
            llm.generate(batch, params, use_tqdm=False)
            walls.append(time.perf_counter() - start)
        after = _counters(llm)
        drafted = after[1] - before[1]
        out.append(row(name, concurrency, options.tokens, walls, (after[0] - before[0]) / drafted if drafted else None,
                       load=os.getloadavg()[0]))
    del llm
    gc.collect()
    return out


def _counters(llm) -> tuple[float, float]:
    accepted = drafted = 0.0
    for metric in llm.get_metrics():
        if metric.name == "vllm:spec_decode_num_accepted_tokens":
            accepted = metric.value
        elif metric.name == "vllm:spec_decode_num_draft_tokens":
            drafted = metric.value
    return accepted, drafted


def time_engine(options, target, draft, masked, prompts) -> list[dict]:
    """specdiff's engine with the same drafters, at each concurrency: one warm-up, options.repeats timed runs."""
    import torch

    target_model = load(target, options)
    out = []
    for name, make in engine_drafters(options, draft, masked):
        for concurrency in options.concurrency:
            gen = speculative_generator(options, target_model, make(), concurrency)
            batch = prompts[:concurrency]
            generator = torch.Generator().manual_seed(options.seed)
            gen.generate(batch, max_new_tokens=options.tokens, generator=generator)  # warm-up
            walls, accepted, drafted = [], 0, 0
            for _ in range(options.repeats):
                start = time.perf_counter()
                result = gen.generate(batch, max_new_tokens=options.tokens, generator=generator)
                walls.append(time.perf_counter() - start)
                accepted += sum(sum(s.accepted) for s in result.stats)
                drafted += sum(s.rounds for s in result.stats) * options.block
            out.append(row(name, concurrency, options.tokens, walls, accepted / drafted if drafted else None))
    return out


def row(name, concurrency, tokens, walls, acceptance, load: float | None = None) -> dict:
    """One result; load: the 1-minute load average when its timed runs ended."""
    wall = statistics.median(walls)
    out = {"engine": name, "concurrency": concurrency, "wall_s": round(wall, 4),
           "tokens_per_s": round(concurrency * tokens / wall, 1),
           "acceptance": None if acceptance is None else round(acceptance, 4)}
    return out if load is None else {**out, "walls_s": [round(w, 3) for w in walls], "load_average_1m": round(load, 2)}


def ratios(results) -> dict:
    """tokens/s of each vLLM case over the engine's with the same drafter, per concurrency (and, with
    latencies, the engine's mean latency over vLLM's)."""
    by = {(r["engine"], r["concurrency"]): r["tokens_per_s"] for r in results}
    pairs = {"draft_model": ("vllm draft_model linear", "specdiff engine ar-drafter linear"),
             "diffusion": ("vllm DiffusionProposer linear", "specdiff engine masked-drafter linear")}
    latency = {(r["engine"], r["concurrency"]): r.get("latency_mean_s") for r in results}
    out = {}
    for label, (ours, engine) in pairs.items():
        for (name, concurrency), value in by.items():
            if name == ours and (engine, concurrency) in by:
                out[f"vllm_over_engine_{label}_c{concurrency}"] = round(value / by[(engine, concurrency)], 3)
                if latency[(name, concurrency)] is not None:
                    out[f"engine_over_vllm_mean_latency_{label}_c{concurrency}"] = round(
                        latency[(engine, concurrency)] / latency[(name, concurrency)], 3)
    return out


__all__ = ["build_models", "default_dtype", "make_llm", "ratios", "real", "row", "run", "speculative_generator",
           "time_engine", "time_vllm", "tiny", "together"]
