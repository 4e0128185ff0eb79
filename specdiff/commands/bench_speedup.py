"""`specdiff bench speedup`: speculative diffusion against plain and assisted decoding, measured
side by side in one run on the shipped testbed; with a real verifier (`--verifier NAME|PATH`, a fetched
or local checkpoint) the real-prompt bench of `specdiff.runs.real_bench` instead: specdiff's plain
decoding, HF generate, HF prompt lookup, HF assisted generation (`--hf-assistant`) and each specdiff
drafter of `--drafters` (default lookup), tuned on the bench's validation prompts, measured on
`--prompts-file`. What follows is the testbed's bench.

1. Tuning, on validation problems only: the best (K, B, prefix cache) of a grid for the
   masked drafter (lossless, marginal proposal) and the best B for the AR drafter, by tokens/s;
   with `--drafters block,uniform,dflash` also each of those kinds' best lossless configuration
   (block: K in --block-steps or tau in --block-taus, B <= its trained block length; uniform: K in
   --uniform-steps; dflash: B only; B from --blocks). These are exact: marginal proposal, except the
   block drafter at K > 1 or with tau, whose q is not its marginal: point mass there.
2. Measurement, on test problems (never seen by the tuning): for `--repeats` rounds, each method
   runs once per round in turn (interleaved, so machine load falls on all alike), one problem at a
   time, with the same prompts, max tokens and seed per round:
   - `ar`: specdiff's own cached autoregressive loop of the verifier;
   - `hf`: transformers' `generate(do_sample=True)`;
   - `hf_assisted`: transformers' `generate(assistant_model=ar-drafter, do_sample=True)`;
   - `spec_ar`: classic speculative decoding with specdiff's AR drafter;
   - `spec`: lossless speculative diffusion with the masked drafter at the tuned config;
   - `spec_batch8`: the same configuration, 8 problems per batch;
   - `spec_<kind>`: each further kind of `--drafters` at its tuned configuration.
   tokens/s of a method is its generated tokens over its wall seconds; the median over repeats is
   reported, and every ratio is a ratio of those medians. Accuracy pools all repeats. Beside it,
   `cpu_time_ratios` uses tokens per CPU second of the (single) torch thread, which a busy
   machine does not distort.
3. Adaptive (docs/adaptive.md): the masked drafter with a run-time controller (`--controllers`, each at
   every K in --adaptive-steps and B in --adaptive-blocks; persistent prefix cache, point mass, so exact
   whatever the unmasking order), tuned on the same validation problems, measured as `spec_adaptive` in
   the same interleaved rounds; `speedup_adaptive_vs_ar`, `speedup_adaptive_vs_fixed` (over `spec`, the
   best fixed (K, B)), `accuracy_adaptive`, `controller`. Each further kind of `--drafters` also gets
   `spec_<kind>_adaptive`: its tuned configuration with the best of its own few controllers.
`kinds` reports, per drafter kind side by side, its speedup over AR, tokens per round, accuracy,
exactness and configuration (masked: `spec`, ar: `spec_ar`). The per-round profile of `spec` splits a round into drafting, the verifier's forward, and the
rest (acceptance rule, cache bookkeeping, prefill amortised over rounds).
"""
from __future__ import annotations

import itertools
import json
import statistics

from specdiff.argtypes import nonnegative_int, positive_int, threshold

DEFAULT_DRAFTERS = {"masked": "masked-drafter", "ar": "ar-drafter"}  # the headline's drafters, always measured
ADAPTIVE_CONTROLLERS = ("confidence:floor=0,finish=0.9", "confidence:floor=0,finish=0.8",
                        "confidence:floor=0.3,finish=0.9", "confidence:floor=0,finish=0.9+acceptance:margin=4")
KIND_CONTROLLERS = {  # each further kind's few controllers, tried on its tuned configuration
    "block": ("confidence:floor=0,finish=0.9", "confidence:floor=0.3", "acceptance:margin=2"),
    "uniform": ("confidence:floor=0.3", "acceptance:margin=2"),
    "dflash": ("confidence:floor=0.3", "confidence:floor=0.5", "acceptance:margin=2",
               "confidence:floor=0.3+acceptance:margin=2"),
}


def drafter_references(values: list[str] | None) -> dict[str, str]:
    """--drafters -> {kind: zoo name or path}, masked and ar always included; refuses a kind named twice
    and a zoo model that is not trained yet (naming `specdiff zoo train NAME`), before anything runs."""
    from specdiff.runs.kinds import require_weights, resolve

    references, given = dict(DEFAULT_DRAFTERS), set()
    for value in ",".join(values or []).split(","):
        if not value.strip():
            continue
        kind, reference = resolve(value.strip())
        if kind in given:
            raise ValueError(f"--drafters names the {kind} drafter twice")
        given.add(kind)
        references[kind] = reference
    for reference in references.values():
        require_weights(reference)
    return references


def register(targets) -> None:
    speedup = targets.add_parser(
        "speedup", help="speculative diffusion vs plain, HF and HF-assisted decoding on the testbed or a real "
                        "verifier (JSON)",
        description="Tokens/s of lossless speculative diffusion against plain and assisted decoding, side by side.")
    speedup.add_argument("--json", action="store_true", help="print only the JSON result")
    speedup.add_argument("--problems", type=positive_int, default=100,
                         help="arith test problems (a real verifier: --prompts-file prompts) measured (default 100)")
    speedup.add_argument("--tune-problems", type=positive_int, default=None,
                         help="validation problems for tuning (default 20; a real verifier: all of its validation "
                              "prompts)")
    speedup.add_argument("--repeats", type=positive_int, default=3, help="interleaved measurement rounds (default 3)")
    speedup.add_argument("--max-new-tokens", type=positive_int, default=96)
    speedup.add_argument("--threads", type=positive_int, default=None,
                         help="torch threads (default 1: batch-1 decoding of the tiny testbed is bound by per-op "
                              "overhead, which a second thread does not cut; 2 for a real verifier)")
    speedup.add_argument("--steps", type=positive_int, nargs="+", default=None,
                         help="K grid (default 1 2 4 6 8; a real verifier: 1 2 4 8)")
    speedup.add_argument("--blocks", type=positive_int, nargs="+", default=None,
                         help="B grid (default 8 12 16; a real verifier: 4 8 12 16)")
    speedup.add_argument("--caches", nargs="+", default=None, choices=["off", "round", "persistent"],
                         help="masked drafter prefix caches in the grid (default all three; a real verifier: off)")
    speedup.add_argument("--drafters", action="append", default=None, metavar="KIND[,KIND...]",
                         help="drafter kinds measured side by side: masked, ar (always), uniform, block, dflash, "
                              "each its zoo model; a zoo name or a trained checkpoint's folder also works "
                              "(comma-separated or repeated). A real verifier: lookup (default) and drafters "
                              "that fit its vocabulary")
    speedup.add_argument("--block-steps", type=positive_int, nargs="+", default=[2, 4, 8],
                         help="block drafter: K grid (default 2 4 8)")
    speedup.add_argument("--block-taus", type=threshold, nargs="+", default=[0.7, 0.9],
                         help="block drafter: confidence threshold tau grid (default 0.7 0.9)")
    speedup.add_argument("--uniform-steps", type=positive_int, nargs="+", default=[1, 2, 4],
                         help="uniform drafter: K grid (default 1 2 4)")
    speedup.add_argument("--controllers", nargs="+", default=None, metavar="NAME",
                         help="the masked drafter's controller grid (docs/adaptive.md; default: "
                              + " ".join(ADAPTIVE_CONTROLLERS) + "; a real verifier: runs.real_tradeoffs."
                              "REAL_CONTROLLERS; 'none': no adaptive row)")
    speedup.add_argument("--adaptive-steps", type=positive_int, nargs="+", default=[4, 6],
                         help="adaptive grid: the most steps K per round (default 4 6)")
    speedup.add_argument("--adaptive-blocks", type=positive_int, nargs="+", default=[16, 24],
                         help="adaptive grid: the longest draft B (default 16 24)")
    speedup.add_argument("--kind-controllers", nargs="+", default=None, metavar="NAME",
                         help="the controllers tried on each further kind of --drafters (default: its own few, "
                              "KIND_CONTROLLERS)")
    speedup.add_argument("--seed", type=int, default=0)
    speedup.add_argument("--first-problem", type=nonnegative_int, default=0,
                         help="measure test problems [first, first + problems): re-measure on other problems")
    real = speedup.add_argument_group("a real verifier (specdiff.runs.real_bench)")
    real.add_argument("--verifier", default="verifier",
                      help="the testbed's verifier (default), or a real one: a fetched name (specdiff models list) "
                           "or a local checkpoint folder")
    real.add_argument("--prompts-file", default=None, help="JSONL prompts measured ({\"messages\"} or {\"prompt\"} "
                      "per line, a \"kind\" key grouped in the report; default: the shipped real_test.jsonl); "
                      "never used for tuning")
    real.add_argument("--hf-assistant", default=None, metavar="PATH",
                      help="a full-vocabulary causal LM drafter: adds transformers' assisted generation as a row")
    real.add_argument("--tradeoff-steps", type=positive_int, nargs="*", default=None,
                      help="K of the effort rows of drafters whose effort is K, at their tuned B (default 1 2 4 8; "
                           "none: no effort rows)")
    real.add_argument("--leniency", type=_rule_value, nargs="*", default=None, metavar="RULE:VALUE",
                      help="leniency rows at the tuned B with K = 1 (default linear:0.3 linear:0.6 typical:0.09 "
                           "typical:0.2; none: no leniency rows)")
    real.add_argument("--temperature", type=float, default=None, help="sample at this temperature (default: greedy)")
    real.add_argument("--top-p", type=float, default=None, help="with --temperature: top-p (default: the verifier's)")
    real.add_argument("--top-k", type=int, default=None,
                      help="with --temperature: top-k, 0 off (default: the verifier's)")
    real.add_argument("--tune-max-new-tokens", type=positive_int, default=None,
                      help="max new tokens of each validation prompt while tuning (default 48)")
    real.add_argument("--tune-repeats", type=positive_int, default=None,
                      help="interleaved repeats of each validation prompt while tuning (default 1)")
    real.add_argument("--lookup-ngrams", type=positive_int, nargs="+", default=None,
                      help="prompt lookup drafter: longest n-gram grid (default 2 3)")
    real.add_argument("--hf-lookup-tokens", type=positive_int, nargs="+", default=None,
                      help="HF prompt lookup: prompt_lookup_num_tokens grid (default 3 5 10)")
    speedup.set_defaults(handler=run)


REAL_ONLY = ("prompts_file", "hf_assistant", "temperature", "top_p", "top_k", "tune_max_new_tokens", "tune_repeats",
             "lookup_ngrams", "hf_lookup_tokens", "tradeoff_steps", "leniency")


def run(args) -> int:
    from specdiff import models

    if models.is_real(args.verifier):
        return _run_real(args)
    given = [name for name in REAL_ONLY if getattr(args, name) is not None]
    if given:
        raise ValueError(f"--{given[0].replace('_', '-')} applies to a real verifier (--verifier NAME|PATH), "
                         "not to the testbed's")
    args.threads = 1 if args.threads is None else args.threads
    args.steps = [1, 2, 4, 6, 8] if args.steps is None else args.steps
    args.caches = ["off", "round", "persistent"] if args.caches is None else args.caches
    args.controllers = list(ADAPTIVE_CONTROLLERS) if args.controllers is None else args.controllers
    args.tune_problems = 20 if args.tune_problems is None else args.tune_problems
    args.blocks = [8, 12, 16] if args.blocks is None else args.blocks
    import torch

    from specdiff.runs.model_cache import quiet_transformers
    from specdiff.runs import ModelCache
    from specdiff.eval import tasks

    references = drafter_references(args.drafters)
    quiet_transformers()
    torch.set_num_threads(args.threads)
    cache = ModelCache()
    say = (lambda *a: None) if args.json else (lambda *a: print(*a, flush=True))
    tune = tasks.arith_problems("validation", args.tune_problems)
    test = tasks.arith_problems("test", args.first_problem + args.problems)[args.first_problem:]
    controllers = _check_controllers(args.controllers)
    if args.kind_controllers is not None:
        args.kind_controllers = _check_controllers(args.kind_controllers)
    best, best_ar, grid = _tune(args, cache, tune, say, references)
    adaptive, adaptive_grid = _tune_adaptive(args, cache, tune, say, references["masked"], controllers)
    others = {kind: _tune_kind(kind, reference, args, cache, tune, say)
              for kind, reference in references.items() if kind not in DEFAULT_DRAFTERS}
    others_adaptive = {kind: _tune_kind_adaptive(kind, config, args, cache, tune, say)
                       for kind, (config, _) in others.items()}
    tuned = {kind: config for kind, (config, _) in others.items()}
    tuned.update({f"{kind}_adaptive": config for kind, (config, _) in others_adaptive.items()})
    tuned["adaptive"] = adaptive
    methods = _methods(best, best_ar, cache, args.max_new_tokens, references, tuned)
    runs = {name: [] for name in methods}
    for repeat in range(args.repeats):
        for name, method in methods.items():
            runs[name].append(method([p.prompt for p in test], [p.target for p in test], args.seed + repeat))
            say(f"repeat {repeat + 1}/{args.repeats} {name}: {runs[name][-1]['tokens_per_s']:.0f} tokens/s")
    result = _report(args, runs, best, best_ar, grid)
    result.update(_adaptive_report(runs, result, adaptive, adaptive_grid))
    result["kinds"] = _kinds(runs, result, best, best_ar, references, others, others_adaptive)
    print(json.dumps(result, indent=1))
    return 0


def _rule_value(text: str) -> tuple[str, float]:
    """"linear:0.3" -> ("linear", 0.3): a leniency row's rule and its leniency."""
    import argparse

    rule, _, value = text.partition(":")
    if rule not in ("linear", "typical", "tv", "cactus") or not value:
        raise argparse.ArgumentTypeError(f"expected RULE:VALUE with RULE linear, typical, tv or cactus, got {text!r}")
    try:
        return rule, float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: the value after ':' must be a number") from None


def _run_real(args) -> int:
    """The real-verifier bench: flags -> `real_bench.Settings`, its report printed as JSON."""
    from specdiff.commands.generate import sampling_of
    from specdiff.runs import real_bench

    sampling = sampling_of(args)
    if not sampling.get("temperature"):
        if set(sampling) - {"temperature"}:
            raise ValueError("--top-p and --top-k apply to a sampled run: give --temperature T > 0 (default greedy)")
        sampling = {"temperature": 0.0}
    given = {key: value for key, value in dict(
        tune_problems=args.tune_problems, threads=args.threads, blocks=args.blocks, lookup_ngrams=args.lookup_ngrams,
        hf_lookup_tokens=args.hf_lookup_tokens, tune_max_new_tokens=args.tune_max_new_tokens,
        tune_repeats=args.tune_repeats, steps=args.steps, caches=args.caches,
        tradeoff_steps=args.tradeoff_steps, leniency=args.leniency,
        controllers=None if args.controllers is None else _check_controllers(
            [] if args.controllers == ["none"] else args.controllers)).items() if value is not None}
    settings = real_bench.Settings(
        verifier=args.verifier, prompts_file=args.prompts_file, problems=args.problems,
        first_problem=args.first_problem, repeats=args.repeats, max_new_tokens=args.max_new_tokens, seed=args.seed,
        sampling=sampling, drafters=args.drafters, hf_assistant=args.hf_assistant, **given)
    say = (lambda *a: None) if args.json else (lambda *a: print(*a, flush=True))
    print(json.dumps(real_bench.run(settings, say), indent=1))
    return 0


def _tune(args, cache, problems, say, references):
    """Best masked (K, B, prefix cache) and best AR-drafter B by tokens/s on validation problems."""
    from specdiff.runs import RunConfig, run_config

    masked = references["masked"]
    run_config(RunConfig("warm-up", drafter=masked, steps=1), [p.prompt for p in problems][:2], None, cache, 16)
    caches = [{"off": False}.get(cache, cache) for cache in args.caches]
    configs = [RunConfig(f"masked K={steps} B={block} cache={prefix_cache or 'off'}", drafter=masked, steps=steps,
                         block_size=block, prefix_cache=prefix_cache)
               for steps, block, prefix_cache in itertools.product(args.steps, args.blocks, caches)
               if steps <= block and not (steps == 1 and prefix_cache == "round")]  # K=1: a round cache is never reused
    best, grid = _best_of(configs, args, cache, problems, say)
    ar_rows = []
    for block in (4, 8, 12):
        config = RunConfig(f"ar-drafter B={block}", drafter=references["ar"], block_size=block)
        ar_rows.append((_measure(config, args, cache, problems)["tokens_per_s"], block))
    best_ar = max(ar_rows)[1]
    return best, best_ar, grid


def _tune_kind(kind: str, reference: str, args, cache, problems, say):
    """(best config, grid rows) of a uniform, block or dflash drafter on validation problems: its own
    effort grid (block: K or tau, B <= its trained block length; uniform: K; dflash: none) by --blocks,
    every configuration exact (lossless rule; point-mass proposal where the block drafter's q is not its
    marginal: K > 1 or tau)."""
    from specdiff.runs.kinds import describe
    from specdiff.runs import RunConfig, run_config

    blocks = list(args.blocks)
    efforts = [{}]
    if kind == "block":
        length = cache.get(reference, "drafter").block_length
        blocks = [b for b in blocks if length is None or b <= length] or [length]
        efforts = [dict(steps=k) for k in args.block_steps] + [dict(threshold=t) for t in args.block_taus]
    elif kind == "uniform":
        efforts = [dict(steps=k) for k in args.uniform_steps]
    configs = []
    for effort, block in itertools.product(efforts, blocks):
        if effort.get("steps", 1) > block:
            continue
        # lossless means exact: the block drafter's q is its marginal only at one step (docs/drafters.md)
        exact_marginal = kind != "block" or (effort.get("steps", 1) == 1 and "threshold" not in effort)
        name = describe(kind, effort.get("steps", 1), effort.get("threshold"), block)
        configs.append(RunConfig(name if exact_marginal else f"{name} point mass", drafter=reference, block_size=block,
                                 proposal="marginal" if exact_marginal else "point_mass", **effort))
    run_config(configs[0], [p.prompt for p in problems][:2], None, cache, 16)  # warm-up: load the model
    return _best_of(configs, args, cache, problems, say)


def _check_controllers(names: list[str]) -> list[str]:
    """--controllers (or --kind-controllers), each parsed now (a clear error before any model loads); 'none' is refused."""
    from specdiff.engine.controllers import parse_controller

    for name in names:
        try:
            if parse_controller(name) is None:
                raise ValueError("the adaptive grid needs controllers, not 'none'")
        except ValueError as error:
            raise ValueError(f"--controllers: {error}") from None
    return [name.strip() for name in names]


def _tune_adaptive(args, cache, problems, say, masked: str, controllers: list[str]):
    """(best config, grid rows) of the masked drafter with a controller on validation problems: every
    controller at every K (the most steps) and B (the longest draft), persistent prefix cache, point mass."""
    from specdiff.runs import RunConfig

    configs = [RunConfig(f"masked adaptive K<={steps} B<={block} {controller}", drafter=masked, steps=steps,
                         block_size=block, prefix_cache="persistent", proposal="point_mass", controller=controller)
               for controller, steps, block in itertools.product(controllers, args.adaptive_steps, args.adaptive_blocks)
               if steps <= block]
    return _best_of(configs, args, cache, problems, say)


def _tune_kind_adaptive(kind: str, config: dict, args, cache, problems, say):
    """(best config, grid rows): a further kind's tuned configuration with each of its `KIND_CONTROLLERS`
    (point mass where the kind's marginal mode would not stay exact under the controller)."""
    from specdiff.runs import RunConfig

    configs = []
    for controller in args.kind_controllers or KIND_CONTROLLERS[kind]:
        candidate = RunConfig(**{**config, "name": f"{config['name']} {controller}", "controller": controller})
        if kind == "block":
            candidate.proposal = "point_mass"
        configs.append(candidate)
    return _best_of(configs, args, cache, problems, say)


def _measure(config, args, cache, problems) -> dict:
    from specdiff.runs import run_config
    from specdiff.eval import tasks

    return run_config(config, [p.prompt for p in problems], [p.target for p in problems], cache,
                      args.max_new_tokens, seed=args.seed, is_correct=tasks.is_correct)


def _best_of(configs, args, cache, problems, say):
    """Runs each configuration once on the validation problems, re-measures the four fastest twice more,
    interleaved (single runs are a few percent noisy), and returns (the best by median, the grid rows)."""
    from specdiff.runs import RunConfig

    grid = []
    for config in configs:
        result = _measure(config, args, cache, problems)
        grid.append({"config": config.as_dict(), "tokens_per_s": result["tokens_per_s"],
                     "tokens_per_round": result["tokens_per_round"], "accuracy": result["accuracy"]})
        say(f"tune {config.name}: {result['tokens_per_s']:.0f} tokens/s, {result['tokens_per_round']:.2f} tokens/round")
    leaders = sorted(grid, key=lambda row: -row["tokens_per_s"])[:4]
    rerun = {row["config"]["name"]: [row["tokens_per_s"]] for row in leaders}
    for _ in range(2):
        for row in leaders:
            rerun[row["config"]["name"]].append(_measure(RunConfig(**row["config"]), args, cache,
                                                         problems)["tokens_per_s"])
    for row in leaders:
        row["tokens_per_s_rerun_median"] = statistics.median(rerun[row["config"]["name"]])
    best = max(leaders, key=lambda row: row["tokens_per_s_rerun_median"])["config"]
    say(f"tuned: {best['name']}")
    return best, grid


def _methods(best: dict, best_ar: int, cache, max_new_tokens: int, references: dict, others: dict) -> dict:
    """name -> function(prompts, targets, seed) -> figures of one run over the problems; `others`: the tuned
    configuration of each further kind, measured as `spec_<kind>` (and `spec_<kind>_adaptive`), and under
    "adaptive" the masked drafter's with a controller, measured as `spec_adaptive`."""
    from specdiff.runs import RunConfig, run_config
    from specdiff.eval import tasks

    others = dict(others)
    adaptive = others.pop("adaptive", None)
    configs = {"ar": RunConfig("ar", drafter=None),
               "spec_ar": RunConfig("spec_ar", drafter=references["ar"], block_size=best_ar),
               "spec": RunConfig(**{**best, "name": "spec"}),
               "spec_batch8": RunConfig(**{**best, "name": "spec_batch8", "batch_size": 8}),
               **({"spec_adaptive": RunConfig(**{**adaptive, "name": "spec_adaptive"})} if adaptive else {}),
               **{f"spec_{kind}": RunConfig(**{**config, "name": f"spec_{kind}"}) for kind, config in others.items()}}

    def ours(config):
        def measure(prompts, targets, seed):
            return run_config(config, prompts, targets, cache, max_new_tokens, seed=seed, is_correct=tasks.is_correct)
        return _with_cpu_time(measure)

    def hf(assisted: bool):
        def measure(prompts, targets, seed):
            return _hf_run(cache, prompts, targets, seed, max_new_tokens, assisted, references["ar"])
        return _with_cpu_time(measure)

    methods = {"ar": ours(configs["ar"]), "hf": hf(False), "hf_assisted": hf(True), "spec_ar": ours(configs["spec_ar"]),
               "spec": ours(configs["spec"]), "spec_batch8": ours(configs["spec_batch8"])}
    return {**methods, **{name: ours(config) for name, config in configs.items() if name not in methods}}


def _with_cpu_time(measure):
    """Adds the CPU seconds of this thread (torch runs single-threaded here) and tokens per CPU second:
    a figure that, unlike wall time, does not count time spent waiting for a core on a shared machine."""
    import time

    def timed(prompts, targets, seed):
        start = time.thread_time()
        result = measure(prompts, targets, seed)
        result["cpu_s"] = time.thread_time() - start
        result["tokens_per_cpu_s"] = result["new_tokens"] / result["cpu_s"]
        return result
    return timed


def _hf_run(cache, prompts, targets, seed, max_new_tokens, assisted, assistant="ar-drafter"):
    from specdiff.engine.baselines import hf_generate
    from specdiff.engine.generate import eos_token_ids
    from specdiff.eval import tasks

    verifier = cache.get("verifier", "verifier")
    tokenizer = cache.tokenizer("verifier")
    rows = [tokenizer(p).input_ids for p in prompts]
    assistant = cache.get(assistant, "drafter").model if assisted else None
    ids, seconds = hf_generate(verifier.model, rows, max_new_tokens, eos_token_ids(verifier.model, None),
                               verifier.temperature, verifier.top_p, verifier.top_k, assistant_model=assistant, seed=seed)
    texts = [tokenizer.decode(row, skip_special_tokens=True) for row in ids]
    correct = [tasks.is_correct(t, y) for t, y in zip(texts, targets)]
    new_tokens = sum(map(len, ids))
    return {"tokens_per_s": new_tokens / seconds, "new_tokens": new_tokens, "wall_s": seconds,
            "accuracy": sum(correct) / len(correct)}


def _report(args, runs, best, best_ar, grid) -> dict:
    median = {name: statistics.median(r["tokens_per_s"] for r in rows) for name, rows in runs.items()}
    cpu = {name: statistics.median(r["tokens_per_cpu_s"] for r in rows) for name, rows in runs.items()}
    pooled = {name: statistics.mean(r["accuracy"] for r in rows) for name, rows in runs.items()}
    ar_baseline = max(median["ar"], median["hf"])
    spec_runs = runs["spec"]
    rounds = sum(r["rounds"] for r in spec_runs)

    def per_round(key):
        return sum(r[key] * r["rounds"] for r in spec_runs) / rounds

    n = args.problems * args.repeats
    return {
        "speedup_vs_ar": median["spec"] / ar_baseline,
        "speedup_vs_hf_assisted": median["spec"] / median["hf_assisted"],
        "speedup_ar_drafter_vs_ar": median["spec_ar"] / ar_baseline,
        "batch8_vs_batch1": median["spec_batch8"] / median["spec"],
        "accuracy_ar": pooled["ar"],
        "accuracy_spec": pooled["spec"],
        "accuracy_stderr": (pooled["ar"] * (1 - pooled["ar"]) / n) ** 0.5,
        "mean_accepted": statistics.mean(r["mean_accepted"] for r in spec_runs),
        "tokens_per_round": statistics.mean(r["tokens_per_round"] for r in spec_runs),
        "exact": all(r["exact"] for r in spec_runs),
        "best_config": best,
        "best_ar_drafter_block": best_ar,
        "tokens_per_s": median,
        "tokens_per_cpu_s": cpu,
        "cpu_time_ratios": {"speedup_vs_ar": cpu["spec"] / max(cpu["ar"], cpu["hf"]),
                            "speedup_vs_hf_assisted": cpu["spec"] / cpu["hf_assisted"],
                            "speedup_ar_drafter_vs_ar": cpu["spec_ar"] / max(cpu["ar"], cpu["hf"]),
                            "note": "tokens per CPU second of the one torch thread: insensitive to waiting for a "
                                    "core on a shared machine; the wall-clock ratios above are the headline"},
        "accuracy": pooled,
        "ar_baseline": "ar" if median["ar"] >= median["hf"] else "hf",
        "profile": {"draft_ms": per_round("draft_ms"), "verify_ms": per_round("verify_ms"),
                    "accept_ms": per_round("accept_ms"), "overhead_ms": per_round("overhead_ms"),
                    "ar_ms_per_token": 1000 / median["ar"],
                    "note": "per round of `spec`: draft_ms drafting, verify_ms the verifier's forward, overhead_ms "
                            "everything else (accept_ms of it is the acceptance rule)"},
        "tuning_grid": grid,
        "problems": args.problems, "first_problem": args.first_problem, "tune_problems": args.tune_problems, "repeats": args.repeats,
        "max_new_tokens": args.max_new_tokens, "threads": args.threads, "seed": args.seed,
        "tuned_on": "arith validation", "measured_on": "arith test",
    }


def _per_round(rows: list[dict]) -> dict:
    """Tokens per round and ms per round (wall seconds over rounds) of one method's runs."""
    rounds = sum(r["rounds"] for r in rows)
    return {"tokens_per_round": sum(r["new_tokens"] for r in rows) / rounds,
            "ms_per_round": 1000 * sum(r["wall_s"] for r in rows) / rounds,
            "draft_ms": sum(r["draft_ms"] * r["rounds"] for r in rows) / rounds,
            "verify_ms": sum(r["verify_ms"] * r["rounds"] for r in rows) / rounds}


def _adaptive_report(runs: dict, result: dict, adaptive: dict, grid: list) -> dict:
    """The adaptive drafter's keys: its speedups over plain decoding and over the best fixed (K, B) (`spec`),
    its accuracy, exactness, controller and per-round figures, all from the same interleaved rounds."""
    median = result["tokens_per_s"]
    ar_baseline = median[result["ar_baseline"]]
    rows = runs["spec_adaptive"]
    cpu = result["tokens_per_cpu_s"]
    return {"speedup_adaptive_vs_ar": median["spec_adaptive"] / ar_baseline,
            "speedup_adaptive_vs_fixed": median["spec_adaptive"] / median["spec"],
            "accuracy_adaptive": result["accuracy"]["spec_adaptive"],
            "exact_adaptive": all(r["exact"] for r in rows),
            "controller": adaptive["controller"], "adaptive_config": adaptive,
            "adaptive_per_round": _per_round(rows), "fixed_per_round": _per_round(runs["spec"]),
            "adaptive_cpu_time_ratios": {"speedup_adaptive_vs_ar": cpu["spec_adaptive"] / max(cpu["ar"], cpu["hf"]),
                                         "speedup_adaptive_vs_fixed": cpu["spec_adaptive"] / cpu["spec"]},
            "adaptive_tuning_grid": grid}


def _kinds(runs: dict, result: dict, best: dict, best_ar: int, references: dict, others: dict,
           others_adaptive: dict | None = None) -> dict:
    """kind -> {speedup_vs_ar, tokens_per_round, accuracy, exact, tokens_per_s, config}, all from the same
    interleaved measurement (masked: `spec`, ar: `spec_ar`, others: `spec_<kind>`)."""
    from specdiff.runs import RunConfig

    ar_baseline = result["tokens_per_s"][result["ar_baseline"]]
    spec_ar = RunConfig("spec_ar", drafter=references["ar"], block_size=best_ar).as_dict()
    methods = {"masked": ("spec", best), "ar": ("spec_ar", spec_ar),
               **{kind: (f"spec_{kind}", config) for kind, (config, _) in others.items()}}
    out = {}
    for kind, (method, config) in methods.items():
        rows, tokens_per_s = runs[method], result["tokens_per_s"][method]
        out[kind] = {"speedup_vs_ar": tokens_per_s / ar_baseline,
                     "tokens_per_round": statistics.mean(r["tokens_per_round"] for r in rows),
                     "accuracy": result["accuracy"][method], "exact": all(r["exact"] for r in rows),
                     "tokens_per_s": tokens_per_s, "config": config, "method": method,
                     "tuning_grid": others[kind][1] if kind in others else None, **_per_round(rows)}
    out["masked"]["adaptive"] = {"speedup_vs_ar": result["speedup_adaptive_vs_ar"], "config": result["adaptive_config"],
                                 "controller": result["controller"], "accuracy": result["accuracy_adaptive"],
                                 "exact": result["exact_adaptive"], **result["adaptive_per_round"]}
    for kind, (config, grid) in (others_adaptive or {}).items():
        rows = runs[f"spec_{kind}_adaptive"]
        out[kind]["adaptive"] = {"speedup_vs_ar": result["tokens_per_s"][f"spec_{kind}_adaptive"] / ar_baseline,
                                 "speedup_vs_fixed": (result["tokens_per_s"][f"spec_{kind}_adaptive"]
                                                      / result["tokens_per_s"][f"spec_{kind}"]),
                                 "config": config, "controller": config["controller"],
                                 "accuracy": result["accuracy"][f"spec_{kind}_adaptive"],
                                 "exact": all(r["exact"] for r in rows), "tuning_grid": grid, **_per_round(rows)}
    return out
