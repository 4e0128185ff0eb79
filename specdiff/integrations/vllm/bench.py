"""The library of `specdiff bench vllm`: vLLM + specdiff beside specdiff's own engine (see
`specdiff.commands.bench_vllm` for the command line, docs/vllm.md for the figures).

- `run(options, log)` -> the JSON report {"settings", "results", "ratios"}: requests arriving together
  (`together`), a real verifier (`real`) or staggered arrivals (`staggered`);
- `make_llm`: the one place an in-process vLLM engine is built (CPU backend, one worker, eager);
- `serve_arrivals`: the one request-arrival loop, which both servers of the staggered mode run
  (`VllmServer`: vLLM's continuous batching; `StaticServer`: specdiff's static batches);
- `AcceptanceObserver`: acceptance counted at V1's rejection_sample after the plugin's rules, through the
  plugin's observers (`state.OBSERVERS`), not by patching vLLM again;
- `default_dtype`: bfloat16 where the hardware has it natively (CPU avx512_bf16 or AMX, or CUDA), else
  float32.

`options` is the command's argparse namespace (attributes: target, draft, masked, verifier, concurrency,
tokens, block, lam, temperature, top_p, steps, repeats, threads, seed, arrivals, rate, requests,
min_tokens, dtype); `log(rows)` is told each batch of result rows as they are measured.
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

DTYPES = ("float32", "bfloat16")
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")
PROPOSER = "specdiff.integrations.vllm.DiffusionProposer"


def default_dtype(cpuinfo: str | os.PathLike = "/proc/cpuinfo") -> str:
    """"bfloat16" where the hardware computes it natively: CUDA, or a CPU whose flags (in cpuinfo) name
    avx512_bf16 or AMX (amx_bf16); else "float32"."""
    try:
        import torch

        if torch.cuda.is_available():
            return "bfloat16"
    except ImportError:  # pragma: no cover  (torch is a dependency)
        pass
    try:
        text = Path(cpuinfo).read_text(errors="replace")
    except OSError:
        return "float32"
    flags = set()
    for line in text.splitlines():
        if line.startswith("flags") and ":" in line:
            flags.update(line.split(":", 1)[1].split())
    return "bfloat16" if flags & set(BF16_CPU_FLAGS) else "float32"


def _dtype(options) -> str:
    dtype = getattr(options, "dtype", None) or default_dtype()
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r}: expected one of {', '.join(DTYPES)}")
    return dtype


def run(options, log=None) -> dict:
    """The bench (module docstring): {"settings", "results", "ratios"}."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")  # vLLM logs to stdout: keep --json's output JSON only
    import torch

    log = log or (lambda rows: None)
    if options.min_tokens is not None and options.min_tokens > options.tokens:
        raise SystemExit(f"--min-tokens ({options.min_tokens}) must not exceed --tokens ({options.tokens})")
    options.dtype = _dtype(options)
    torch.set_num_threads(options.threads)
    if options.verifier is not None:
        settings, results, ratios = real(options, log)
    else:
        settings, results, ratios = tiny(options, log)
    return {"settings": settings, "results": results, "ratios": ratios}


def tiny(options, log) -> tuple[dict, list[dict], dict]:
    """The built tiny pair (or --target/--draft/--masked): vLLM + plugin and + DiffusionProposer against
    specdiff's engine with the same drafters, requests arriving together or staggered."""
    import torch

    if (options.temperature, options.top_p) != (1.0, 1.0):
        raise ValueError("--temperature and --top-p apply with --verifier; the tiny pair's bench runs at temperature 1")
    options.lam = 0.5 if options.lam is None else options.lam
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as scratch:
        if options.target is None:
            target, draft, masked = build_models(Path(scratch))
        else:
            target, draft, masked = Path(options.target), Path(options.draft), Path(options.masked)
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
                "models": "built (tiny Qwen3, head_dim 32)" if options.target is None else str(target),
                "cpu_count": os.cpu_count(), "load_average_before": [round(x, 2) for x in load_before],
                "load_average_after": [round(x, 2) for x in os.getloadavg()]}
    if schedule is not None:
        settings.update(schedule)
    return settings, results, ratios(results)


def build_models(root: Path, vocab: int = 512, seed: int = 0) -> tuple[Path, Path, Path]:
    """A 4-layer Qwen3 target, a 1-layer draft sharing its embedding, first layer and head, and a
    Dream-style masked drafter (bidirectional, shifted logits, mask id vocab - 1) from the target's
    weights; head_dim 32 (which vLLM's CPU attention needs; the zoo's testbed models, head_dim 24 and 16,
    do not load in vLLM's CPU backend). Returns their directories under root."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    def make(layers, bidirectional=False):
        extra = dict(logits_shift=1, mask_token_id=vocab - 1, is_causal=False) if bidirectional else {}
        config = Qwen3Config(vocab_size=vocab, hidden_size=128, intermediate_size=256, num_hidden_layers=layers,
                             num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=512,
                             tie_word_embeddings=False, pad_token_id=0, bos_token_id=None, eos_token_id=None, **extra)
        return Qwen3ForCausalLM(config).eval()

    torch.manual_seed(seed)
    target = make(4)
    with torch.no_grad():
        target.lm_head.weight.normal_(0.0, 0.15)
    draft = make(1)
    draft.load_state_dict({k: v for k, v in target.state_dict().items()
                           if not k.startswith(tuple(f"model.layers.{i}." for i in range(1, 4)))})
    masked = make(4, bidirectional=True)
    masked.load_state_dict(target.state_dict())
    paths = root / "target", root / "draft", root / "masked"
    for model, path in zip((target, draft, masked), paths):
        model.save_pretrained(path)
    config = json.loads((paths[2] / "config.json").read_text())
    config["specdiff_role"] = "masked-drafter"
    (paths[2] / "config.json").write_text(json.dumps(config, indent=2))
    return paths


# ------------------------------------------------------------------------------------------------
# engines: vLLM's (one builder) and specdiff's, with the same drafters
# ------------------------------------------------------------------------------------------------


def make_llm(options, target, speculative=None, extra=None, max_model_len: int | None = None):
    """An in-process vLLM engine on target: eager, one worker, options.dtype, options.seed, at most
    max(options.concurrency) sequences; max_model_len defaults to a 16-token prompt plus options.tokens
    and a block's slack. speculative: vLLM's speculative_config (None: no speculation); extra: its
    additional_config."""
    from vllm import LLM

    if max_model_len is None:
        max_model_len = 16 + options.tokens + options.block + 8
    return LLM(model=str(target), skip_tokenizer_init=True, enforce_eager=True, dtype=_dtype(options),
               seed=options.seed, max_model_len=max_model_len, max_num_seqs=max(options.concurrency),
               disable_log_stats=False, distributed_executor_backend="uni", speculative_config=speculative,
               additional_config=extra or {})


def vllm_cases(options, draft, masked):
    """(name, speculative_config, additional_config) of vLLM with the plugin: draft_model and DiffusionProposer."""
    linear = {"specdiff": {"rule": "linear", "leniency": options.lam}}
    yield ("vllm draft_model linear", {"method": "draft_model", "model": str(draft),
                                       "num_speculative_tokens": options.block}, linear)
    yield ("vllm DiffusionProposer linear",
           {"method": "custom_class", "model": PROPOSER, "num_speculative_tokens": options.block},
           {"specdiff": {**linear["specdiff"], "drafter": str(masked), "steps": options.steps, "seed": options.seed}})


def engine_drafters(options, draft, masked):
    """(name, drafter factory) of specdiff's engine: the same draft model and masked drafter as vLLM's."""
    import specdiff as sd

    draft_model, masked_model = _load(draft, options), _load(masked, options)
    yield ("specdiff engine ar-drafter linear",
           lambda: sd.AutoregressiveDrafter(draft_model, temperature=0.0, top_p=1.0, top_k=0))
    yield ("specdiff engine masked-drafter linear",
           lambda: sd.MaskedDiffusionDrafter(masked_model, steps=options.steps))


def _load(path, options):
    """A local checkpoint's model in options.dtype (the dtype vLLM runs), eval mode."""
    import torch

    from specdiff.models import load_model

    return load_model(str(path))[0].to(getattr(torch, _dtype(options)))


def speculative_generator(options, target_model, drafter, concurrency: int):
    """specdiff's engine as the bench runs it: temperature 1, Linear(lam), point mass, EOS ignored."""
    import specdiff as sd

    return sd.SpeculativeGenerator(drafter, sd.Verifier(target_model, temperature=1.0, top_p=1.0, top_k=0),
                                   block_size=options.block, rule=sd.Linear(options.lam), proposal="point_mass",
                                   eos_token_id=[], batch_size=concurrency)


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

    from specdiff import checkpoints, models
    from specdiff.runs import real_bench
    from specdiff.zoo import distilled

    name = Path(options.verifier).name
    folder = Path(options.verifier) if Path(options.verifier).is_dir() else checkpoints.require(options.verifier)
    drafter = options.masked or distilled.shipped_for(name, "masked")
    if drafter is None:
        raise ValueError(f"no masked drafter is shipped for {name!r}: give one with --drafter (a folder that "
                         f"`specdiff distill --verifier {name} --kind masked --out DIR` wrote)")
    if options.arrivals != "together":
        raise ValueError("--verifier times requests arriving together only (--arrivals together)")
    lam = options.lam or 0.0
    rule = {"rule": "linear", "leniency": lam} if lam > 0 else {"rule": "lossless"}
    count = max(options.concurrency)
    loaded = real_bench.read_prompts(real_bench.TEST_FILE, models.load_tokenizer(str(folder)))
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
                "prompts": f"{real_bench.TEST_FILE.name}, first {min(count, len(loaded))} (cycled to {count}), "
                           f"chat template", "prompt_tokens": [len(p) for p in prompts],
                "cpu_count": os.cpu_count(), "omp_threads_bind": os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "auto"),
                "load_average_before": [round(x, 2) for x in load_before],
                "load_average_after": [round(x, 2) for x in os.getloadavg()]}
    by = {(r["engine"], r["concurrency"]): r["tokens_per_s"] for r in results}
    ratios = {f"vllm_speculative_over_plain_c{c}": round(by[(results[-1]["engine"], c)] /
                                                         by[("vllm no speculation", c)], 3) for c in options.concurrency}
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

    target_model = _load(target, options)
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


# ------------------------------------------------------------------------------------------------
# staggered arrivals (--arrivals poisson)
# ------------------------------------------------------------------------------------------------


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
    target_model = _load(target, options)
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
            target_model = _load(target_model, options)
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
