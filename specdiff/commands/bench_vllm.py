"""`specdiff bench vllm`: vLLM + specdiff beside specdiff's own engine, tokens/s at 1 and 32 requests.

Run it in the vLLM environment (`scripts/vllm_env.sh VENV`; `VENV/bin/specdiff bench vllm --json`).
On the same models, prompts and settings it times:
- vLLM with the plugin: `draft_model` drafting, Linear(lam) (`additional_config`);
- vLLM with `DiffusionProposer`: a masked diffusion drafter, K steps, point-mass verification;
- specdiff's engine (`SpeculativeGenerator`): the same draft model (autoregressive drafter, greedy,
  point mass as vLLM's default greedy drafting), and the same masked drafter, with the same rule.
At each concurrency c, c requests arrive together and each generates `--tokens` tokens (EOS ignored);
tokens/s = c * tokens / wall time, the median of `--repeats` timed runs after one warm-up. vLLM runs in
this process (VLLM_ENABLE_V1_MULTIPROCESSING=0, one worker) with a fixed torch thread count, as the
engine does. Without --target, a tiny Qwen3 pair (head_dim 32, which vLLM's CPU attention needs) and a
masked drafter from the target's weights are built in a temporary directory: the zoo's testbed models
(head_dim 24 and 16) do not load in vLLM's CPU backend.

`--verifier NAME|FOLDER` (a real verifier: a fetched name such as smollm2-135m-instruct, or its converted
folder) times vLLM on it without speculation and with `DiffusionProposer` running `--drafter` (a masked
drafter specdiff distilled for it: its name, e.g. smollm2-135m-instruct-masked, the default where shipped,
or a folder), on the bench's held-out chat prompts (`specdiff.runs.real_bench.TEST_FILE`, through the
verifier's chat template, cycled to the largest concurrency), Lossless unless `--lam` > 0 (Linear),
at `--temperature` / `--top-p`. Rows: "vllm no speculation" and "vllm DiffusionProposer <rule>"; ratios
`vllm_speculative_over_plain_c<c>`. See `_real`.

`--arrivals poisson` (staggered arrivals, where continuous batching differs from static batches):
`--requests` requests arrive at Poisson times at `--rate` per second, with output lengths uniform in
`--min-tokens`..`--tokens`, at most c in flight; the engines and concurrencies run interleaved, each
repeat in turn, and each reports tokens/s and per-request latency (mean, p50, p90). See `_staggered`.
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from specdiff.argtypes import positive_float, positive_int


def register(which) -> None:
    parser = which.add_parser("vllm", help="vLLM + specdiff (plugin, DiffusionProposer) against specdiff's engine")
    parser.add_argument("--json", action="store_true", help="print only the JSON result")
    parser.add_argument("--target", help="target checkpoint (default: a tiny Qwen3 built here)")
    parser.add_argument("--draft", help="draft model for draft_model drafting (default: built with the target)")
    parser.add_argument("--masked", "--drafter", dest="masked",
                        help="masked diffusion drafter for DiffusionProposer (default: built; with --verifier, the "
                             "masked drafter distilled for it: a name or a folder)")
    parser.add_argument("--verifier", help="a real verifier (a fetched name or its converted folder): vLLM without "
                                           "speculation against vLLM + DiffusionProposer, on chat prompts")
    parser.add_argument("--concurrency", type=positive_int, nargs="+", default=[1, 32])
    parser.add_argument("--tokens", type=positive_int, default=64, help="tokens generated per request")
    parser.add_argument("--block", type=positive_int, default=4, help="drafted tokens per round (B)")
    parser.add_argument("--lam", type=float, default=None,
                        help="Linear's lam (default 0.5; with --verifier 0: Lossless)")
    parser.add_argument("--temperature", type=float, default=1.0, help="the requests' temperature (0: greedy)")
    parser.add_argument("--top-p", type=float, default=1.0, help="the requests' top-p")
    parser.add_argument("--steps", type=positive_int, default=2, help="the masked drafter's K")
    parser.add_argument("--repeats", type=positive_int, default=3)
    parser.add_argument("--threads", type=positive_int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--arrivals", choices=("together", "poisson"), default="together",
                        help="together: c requests arrive at once, all of --tokens tokens; poisson: --requests "
                             "requests arrive over time at --rate per second with output lengths drawn uniformly "
                             "from --min-tokens..--tokens, at most c in flight (c = each --concurrency)")
    parser.add_argument("--rate", type=positive_float, default=8.0, help="poisson: requests per second")
    parser.add_argument("--requests", type=positive_int, default=48, help="poisson: requests per run")
    parser.add_argument("--min-tokens", type=positive_int, default=None,
                        help="poisson: shortest output length (default --tokens / 4)")
    parser.set_defaults(handler=run)


def build_models(root: Path, vocab: int = 512, seed: int = 0) -> tuple[Path, Path, Path]:
    """A 4-layer Qwen3 target, a 1-layer draft sharing its embedding, first layer and head, and a
    Dream-style masked drafter (bidirectional, shifted logits, mask id vocab - 1) from the target's
    weights; head_dim 32. Returns their directories under root."""
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


def run(args) -> int:
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")  # vLLM logs to stdout: keep --json's output JSON only
    import torch

    if args.min_tokens is not None and args.min_tokens > args.tokens:
        raise SystemExit(f"--min-tokens ({args.min_tokens}) must not exceed --tokens ({args.tokens})")
    torch.set_num_threads(args.threads)
    if args.verifier is not None:
        return _print(args, *_real(args))
    if (args.temperature, args.top_p) != (1.0, 1.0):
        raise ValueError("--temperature and --top-p apply with --verifier; the tiny pair's bench runs at temperature 1")
    args.lam = 0.5 if args.lam is None else args.lam
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as scratch:
        if args.target is None:
            target, draft, masked = build_models(Path(scratch))
        else:
            target, draft, masked = Path(args.target), Path(args.draft), Path(args.masked)
        vocab = json.loads((Path(target) / "config.json").read_text())["vocab_size"]
        generator = torch.Generator().manual_seed(args.seed)
        count = args.requests if args.arrivals == "poisson" else max(args.concurrency)
        prompts = torch.randint(1, vocab - 1, (count, 16), generator=generator).tolist()
        if args.arrivals == "poisson":
            results, schedule = _staggered(args, target, draft, masked, prompts, generator)
        else:
            results, schedule = _together(args, target, draft, masked, prompts), None
    settings = {"arrivals": args.arrivals, "tokens": args.tokens, "block": args.block, "lam": args.lam,
                "steps": args.steps, "threads": args.threads, "engine_threads": torch.get_num_threads(),
                "repeats": args.repeats, "temperature": 1.0,
                "models": "built (tiny Qwen3, head_dim 32)" if args.target is None else str(target),
                "cpu_count": os.cpu_count(), "load_average_before": [round(x, 2) for x in load_before],
                "load_average_after": [round(x, 2) for x in os.getloadavg()]}
    if schedule is not None:
        settings.update(schedule)
    return _print(args, settings, results, _ratios(results))


def _print(args, settings: dict, results: list[dict], ratios: dict) -> int:
    report = {"settings": settings, "results": results, "ratios": ratios}
    print(json.dumps(report, indent=None if args.json else 2))
    return 0


def _real(args) -> tuple[dict, list[dict], dict]:
    """(settings, results, ratios) of vLLM on a real verifier without speculation and with DiffusionProposer
    (module docstring). At each concurrency c: tokens/s and acceptance as `_time_vllm` measures them."""
    from specdiff import checkpoints, models
    from specdiff.runs import real_bench
    from specdiff.zoo import distilled

    name = Path(args.verifier).name
    folder = Path(args.verifier) if Path(args.verifier).is_dir() else checkpoints.require(args.verifier)
    drafter = args.masked or distilled.shipped_for(name, "masked")
    if drafter is None:
        raise ValueError(f"no masked drafter is shipped for {name!r}: give one with --drafter (a folder that "
                         f"`specdiff distill --verifier {name} --kind masked --out DIR` wrote)")
    if args.arrivals != "together":
        raise ValueError("--verifier times requests arriving together only (--arrivals together)")
    lam = args.lam or 0.0
    rule = {"rule": "linear", "leniency": lam} if lam > 0 else {"rule": "lossless"}
    count = max(args.concurrency)
    loaded = real_bench.read_prompts(real_bench.TEST_FILE, models.load_tokenizer(str(folder)))
    prompts = [loaded[i % len(loaded)].ids for i in range(count)]
    load_before = os.getloadavg()
    label = rule["rule"] if lam == 0 else f"linear {lam:g}"
    results = _time_vllm(args, folder, prompts, "vllm no speculation", None, {})
    _log(args, results)
    speculative = {"method": "custom_class", "model": "specdiff.integrations.vllm.DiffusionProposer",
                   "num_speculative_tokens": args.block}
    extra = {"specdiff": {**rule, "drafter": str(drafter), "steps": args.steps, "seed": args.seed}}
    results += _time_vllm(args, folder, prompts, f"vllm DiffusionProposer {label}", speculative, extra)
    _log(args, results[-len(args.concurrency):])
    import torch

    settings = {"arrivals": "together", "tokens": args.tokens, "block": args.block, "rule": rule, "steps": args.steps,
                "temperature": args.temperature, "top_p": args.top_p, "threads": args.threads,
                "engine_threads": torch.get_num_threads(), "repeats": args.repeats,
                "verifier": str(folder), "drafter": str(drafter), "prompts": f"{real_bench.TEST_FILE.name}, first "
                f"{min(count, len(loaded))} (cycled to {count}), chat template", "prompt_tokens": [len(p) for p in prompts],
                "cpu_count": os.cpu_count(), "omp_threads_bind": os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "auto"),
                "load_average_before": [round(x, 2) for x in load_before],
                "load_average_after": [round(x, 2) for x in os.getloadavg()]}
    by = {(r["engine"], r["concurrency"]): r["tokens_per_s"] for r in results}
    ratios = {f"vllm_speculative_over_plain_c{c}": round(by[(results[-1]["engine"], c)] /
                                                         by[("vllm no speculation", c)], 3) for c in args.concurrency}
    return settings, results, ratios


def _together(args, target, draft, masked, prompts) -> list[dict]:
    results = []
    for name, speculative, extra in _vllm_cases(args, draft, masked):
        results += _time_vllm(args, target, prompts, name, speculative, extra)
        _log(args, results[-len(args.concurrency):])
    results += _time_engine(args, target, draft, masked, prompts)
    _log(args, results[-2 * len(args.concurrency):])
    return results


def _vllm_cases(args, draft, masked):
    linear = {"specdiff": {"rule": "linear", "leniency": args.lam}}
    yield ("vllm draft_model linear", {"method": "draft_model", "model": str(draft),
                                       "num_speculative_tokens": args.block}, linear)
    yield ("vllm DiffusionProposer linear",
           {"method": "custom_class", "model": "specdiff.integrations.vllm.DiffusionProposer",
            "num_speculative_tokens": args.block},
           {"specdiff": {**linear["specdiff"], "drafter": str(masked), "steps": args.steps, "seed": args.seed}})


def _time_vllm(args, target, prompts, name, speculative, extra) -> list[dict]:
    import gc

    from vllm import LLM, SamplingParams

    longest = max(len(p) for p in prompts)
    llm = LLM(model=str(target), skip_tokenizer_init=True, enforce_eager=True, dtype="float32", seed=args.seed,
              max_model_len=longest + args.tokens + args.block + 8, max_num_seqs=max(args.concurrency),
              disable_log_stats=False, distributed_executor_backend="uni", speculative_config=speculative,
              additional_config=extra)
    params = SamplingParams(temperature=args.temperature, top_p=args.top_p, max_tokens=args.tokens, ignore_eos=True)
    out = []
    for concurrency in args.concurrency:
        batch = [{"prompt_token_ids": p} for p in prompts[:concurrency]]
        llm.generate(batch, params, use_tqdm=False)  # warm-up
        before = _counters(llm)
        walls = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            llm.generate(batch, params, use_tqdm=False)
            walls.append(time.perf_counter() - start)
        after = _counters(llm)
        drafted = after[1] - before[1]
        out.append(_row(name, concurrency, args.tokens, walls, (after[0] - before[0]) / drafted if drafted else None,
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


def _time_engine(args, target, draft, masked, prompts) -> list[dict]:
    import torch

    import specdiff as sd
    from specdiff.models import load_model

    target_model, draft_model = load_model(str(target))[0], load_model(str(draft))[0]
    masked_model = load_model(str(masked))[0]
    rule = sd.Linear(args.lam)
    cases = [("specdiff engine ar-drafter linear", lambda: sd.AutoregressiveDrafter(draft_model, temperature=0.0,
                                                                                    top_p=1.0, top_k=0)),
             ("specdiff engine masked-drafter linear", lambda: sd.MaskedDiffusionDrafter(masked_model, steps=args.steps))]
    out = []
    for name, make in cases:
        for concurrency in args.concurrency:
            gen = sd.SpeculativeGenerator(make(), sd.Verifier(target_model, temperature=1.0, top_p=1.0, top_k=0),
                                          block_size=args.block, rule=rule, proposal="point_mass", eos_token_id=[],
                                          batch_size=concurrency)
            batch = prompts[:concurrency]
            generator = torch.Generator().manual_seed(args.seed)
            gen.generate(batch, max_new_tokens=args.tokens, generator=generator)  # warm-up
            walls, accepted, drafted = [], 0, 0
            for _ in range(args.repeats):
                start = time.perf_counter()
                result = gen.generate(batch, max_new_tokens=args.tokens, generator=generator)
                walls.append(time.perf_counter() - start)
                accepted += sum(sum(s.accepted) for s in result.stats)
                drafted += sum(s.rounds for s in result.stats) * args.block
            out.append(_row(name, concurrency, args.tokens, walls, accepted / drafted if drafted else None))
    return out


# ------------------------------------------------------------------------------------------------
# staggered arrivals (--arrivals poisson)
# ------------------------------------------------------------------------------------------------


def _staggered(args, target, draft, masked, prompts, generator) -> tuple[list[dict], dict]:
    """Poisson arrivals at --rate, output lengths uniform in --min-tokens..--tokens, the same schedule for
    every engine and concurrency c (at most c requests in flight; the others wait, as behind a client
    with c connections). Each repeat runs every (engine, c) once, interleaved, so that the machine's
    drift hits them alike; per (engine, c): tokens/s and per-request latency (arrival to its last
    token) of the repeat with the shortest wall time (every repeat's wall time is reported too).

    - vLLM (continuous batching): a request enters vLLM's running batch at the next engine step once it
      has arrived and fewer than c are in flight, and leaves it when its own length is reached;
    - specdiff's engine (static batches): when idle, it takes every waiting request (at most c) as one
      batch and returns them together when the batch is done. `SpeculativeGenerator.generate` takes one
      max_new_tokens per call, so the batch runs to its longest request's length; a request that
      arrives meanwhile waits for the next batch. At c = 1 that is one request at a time."""
    import torch

    count = len(prompts)
    gaps = torch.empty(count, dtype=torch.float64).exponential_(args.rate, generator=generator)
    arrivals = (torch.cumsum(gaps, 0) - gaps[0]).tolist()  # the first request arrives at 0
    shortest = args.min_tokens or max(1, args.tokens // 4)
    lengths = torch.randint(shortest, args.tokens + 1, (count,), generator=generator).tolist()
    schedule = {"rate_per_s": args.rate, "requests": count, "min_tokens": shortest,
                "arrival_span_s": round(arrivals[-1], 3), "output_tokens": sum(lengths)}
    servers = [(name, _VllmServer(args, target, speculative, extra)) for name, speculative, extra in
               _vllm_cases(args, draft, masked)]
    observer = _AcceptanceObserver()  # after the engines: outside the plugin's hook, which they install
    for _, server in servers:
        server.observer = observer
    servers += [(name, _StaticServer(args, target, make)) for name, make in _engine_drafters(args, draft, masked)]
    warm = [0.0] * min(count, 4)
    for _, server in servers:  # warm-up: a few requests at once, at each concurrency
        for concurrency in args.concurrency:
            server.serve(prompts[: len(warm)], warm, [8] * len(warm), concurrency)
    runs: dict = {}
    for _ in range(args.repeats):
        for name, server in servers:
            for concurrency in args.concurrency:
                run = server.serve(prompts, arrivals, lengths, concurrency)
                runs.setdefault((name, concurrency), []).append(run)
                print(f"[bench vllm] {name} c={concurrency}: {max(run[0]):.2f} s", file=sys.stderr, flush=True)
    results = []
    for (name, concurrency), measured in runs.items():
        finish, acceptance = min(measured, key=lambda run: max(run[0]))  # other jobs' load only slows a run
        latency = sorted(f - a for f, a in zip(finish, arrivals))
        wall = max(finish)
        results.append({"engine": name, "concurrency": concurrency, "wall_s": round(wall, 4),
                        "tokens_per_s": round(sum(lengths) / wall, 1),
                        "latency_mean_s": round(statistics.fmean(latency), 4),
                        "latency_p50_s": round(_quantile(latency, 0.5), 4),
                        "latency_p90_s": round(_quantile(latency, 0.9), 4),
                        "acceptance": None if acceptance is None else round(acceptance, 4),
                        "walls_s": [round(max(run[0]), 3) for run in measured]})
        _log(args, results[-1:])
    for _, server in servers:
        server.close()
    observer.remove()
    return results, schedule


class _AcceptanceObserver:
    """Counts drafted and accepted tokens at vLLM V1's rejection_sample (the plugin's wrapper, in this
    process: build it after the engines, whose start installs the plugin's hook). vLLM's own counters (llm.get_metrics) live in one Prometheus registry per process, which
    the latest engine takes over, so with two engines alive they cannot tell the engines apart."""

    def __init__(self):
        from vllm.v1.sample import rejection_sampler as v1

        self.module, self.inner = v1, v1.rejection_sample
        self.drafted = self.accepted = 0

        def rejection_sample(draft_token_ids, num_draft_tokens, *args, **kwargs):
            output = self.inner(draft_token_ids, num_draft_tokens, *args, **kwargs)
            counts = [int(n) for n in num_draft_tokens]
            real = [n for n, ok in zip(counts, self._real_rows(draft_token_ids, counts)) if ok]
            emitted = (output != -1).sum(dim=1).tolist()  # accepted drafts + 1 (vLLM's rows, -1 padded)
            accepted = [max(e - 1, 0) if n else 0 for e, n in zip(emitted, counts)]
            self.drafted += sum(real)
            self.accepted += sum(a for a, ok in zip(accepted, self._real_rows(draft_token_ids, counts)) if ok)
            return output

        v1.rejection_sample = rejection_sample

    @staticmethod
    def _real_rows(draft_token_ids, counts):
        """Rows without vLLM's placeholder drafts (-1: drafts vLLM rejects by construction)."""
        placeholder = (draft_token_ids < 0).tolist()
        out, start = [], 0
        for n in counts:
            out.append(not any(placeholder[start : start + n]))
            start += n
        return out

    def read(self) -> tuple[int, int]:
        return self.accepted, self.drafted

    def remove(self):
        self.module.rejection_sample = self.inner


def _quantile(values: list[float], q: float) -> float:
    """The q-quantile of the values (numpy's linear interpolation between order statistics)."""
    import numpy as np

    return float(np.quantile(values, q))


class _VllmServer:
    """One in-process vLLM engine, fed through LLMEngine.add_request / step as requests arrive."""

    def __init__(self, args, target, speculative, extra):
        from vllm import LLM

        self.observer = None  # an _AcceptanceObserver, set once every engine has started
        self.llm = LLM(model=str(target), skip_tokenizer_init=True, enforce_eager=True, dtype="float32", seed=args.seed,
                       max_model_len=16 + args.tokens + args.block + 8, max_num_seqs=max(args.concurrency),
                       disable_log_stats=False, distributed_executor_backend="uni", speculative_config=speculative,
                       additional_config=extra)
        self.counter = 0

    def serve(self, prompts, arrivals, lengths, concurrency):
        """Finish times (seconds from the first arrival) and the acceptance of this run."""
        from vllm import SamplingParams

        engine = self.llm.llm_engine
        before = self.observer.read()
        waiting, in_flight, finish = [], {}, [0.0] * len(prompts)
        arrived, done = 0, 0
        start = time.perf_counter()
        while done < len(prompts):
            now = time.perf_counter() - start
            while arrived < len(prompts) and arrivals[arrived] <= now:
                waiting.append(arrived)
                arrived += 1
            while waiting and len(in_flight) < concurrency:
                i = waiting.pop(0)
                self.counter += 1
                request_id = f"r{self.counter}"
                engine.add_request(request_id, {"prompt_token_ids": prompts[i]},
                                   SamplingParams(temperature=1.0, max_tokens=lengths[i], ignore_eos=True))
                in_flight[request_id] = i
            if not in_flight:
                time.sleep(max(0.0, arrivals[arrived] - now))
                continue
            for output in engine.step():
                if output.finished and output.request_id in in_flight:
                    finish[in_flight.pop(output.request_id)] = time.perf_counter() - start
                    done += 1
        after = self.observer.read()
        drafted = after[1] - before[1]
        return finish, (after[0] - before[0]) / drafted if drafted else None

    def close(self):
        import gc

        del self.llm
        gc.collect()


class _StaticServer:
    """specdiff's engine serving arrivals in static batches of at most c requests."""

    def __init__(self, args, target, make_drafter):
        import specdiff as sd
        from specdiff.models import load_model

        self.args, self.make = args, make_drafter
        self.target = load_model(str(target))[0]
        self.sd = sd
        self.generators = {}

    def _generator(self, concurrency):
        sd = self.sd
        if concurrency not in self.generators:
            self.generators[concurrency] = sd.SpeculativeGenerator(
                self.make(), sd.Verifier(self.target, temperature=1.0, top_p=1.0, top_k=0), block_size=self.args.block,
                rule=sd.Linear(self.args.lam), proposal="point_mass", eos_token_id=[], batch_size=concurrency)
        return self.generators[concurrency]

    def serve(self, prompts, arrivals, lengths, concurrency):
        import torch

        gen = self._generator(concurrency)
        generator = torch.Generator().manual_seed(self.args.seed)
        waiting, finish = [], [0.0] * len(prompts)
        arrived, done, accepted, drafted = 0, 0, 0, 0
        start = time.perf_counter()
        while done < len(prompts):
            now = time.perf_counter() - start
            while arrived < len(prompts) and arrivals[arrived] <= now:
                waiting.append(arrived)
                arrived += 1
            if not waiting:
                time.sleep(max(0.0, arrivals[arrived] - now))
                continue
            batch, waiting = waiting[:concurrency], waiting[concurrency:]
            result = gen.generate([prompts[i] for i in batch], max_new_tokens=max(lengths[i] for i in batch),
                                  generator=generator)
            end = time.perf_counter() - start
            for i in batch:
                finish[i] = end
            done += len(batch)
            accepted += sum(sum(s.accepted) for s in result.stats)
            drafted += sum(s.rounds for s in result.stats) * self.args.block
        return finish, accepted / drafted if drafted else None

    def close(self):
        self.generators.clear()


def _engine_drafters(args, draft, masked):
    """(name, drafter factory) of specdiff's engine: the same draft model and masked drafter as vLLM's."""
    import specdiff as sd
    from specdiff.models import load_model

    draft_model, masked_model = load_model(str(draft))[0], load_model(str(masked))[0]
    yield ("specdiff engine ar-drafter linear",
           lambda: sd.AutoregressiveDrafter(draft_model, temperature=0.0, top_p=1.0, top_k=0))
    yield ("specdiff engine masked-drafter linear", lambda: sd.MaskedDiffusionDrafter(masked_model, steps=args.steps))


def _row(name, concurrency, tokens, walls, acceptance, load: float | None = None) -> dict:
    """One result; load: the 1-minute load average when its timed runs ended."""
    wall = statistics.median(walls)
    row = {"engine": name, "concurrency": concurrency, "wall_s": round(wall, 4),
           "tokens_per_s": round(concurrency * tokens / wall, 1),
           "acceptance": None if acceptance is None else round(acceptance, 4)}
    return row if load is None else {**row, "walls_s": [round(w, 3) for w in walls], "load_average_1m": round(load, 2)}


def _ratios(results) -> dict:
    """tokens/s of each vLLM case over the engine's with the same drafter, per concurrency."""
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


def _log(args, rows) -> None:
    if not args.json:
        for row in rows:
            latency = (f"  latency mean {row['latency_mean_s']:.3f} s p50 {row['latency_p50_s']:.3f} "
                       f"p90 {row['latency_p90_s']:.3f}" if "latency_mean_s" in row else "")
            print(f"{row['engine']:40s} c={row['concurrency']:3d}  {row['tokens_per_s']:9.1f} tok/s  "
                  f"acceptance {row['acceptance']}{latency}", flush=True)
