"""The measuring core of `specdiff bench speedup --verifier REAL` (issue 30, item 5): specdiff's drafters
against plain and speculative decoding of Hugging Face transformers, on a real chat model.

Rows, every one on the same prompts (put through the chat template), the same max new tokens, the same
seed and the same sampling settings (greedy unless a temperature is given):
- `ar`: specdiff's plain cached decoding of the verifier (`engine.baselines.autoregressive_generate`);
- `hf`: transformers' `generate` (at greedy its ids are the reference of `greedy_identical`);
- `hf_lookup`: transformers' prompt lookup decoding (`prompt_lookup_num_tokens=N`, N tuned);
- `hf_assisted`: transformers' assisted generation with a full-vocabulary drafter (`--hf-assistant`);
- `spec_<kind>`: each specdiff drafter that fits the verifier (`--drafters`, default `lookup`), at the
  configuration tuned for it. The list is data: any entry `runs.kinds.resolve` accepts gets a grid from
  its kind's effort knobs (`runs.kinds.EFFORT`) by B; a testbed drafter is refused (`kinds.check_pair`).

No tuning on the measured prompts: every specdiff drafter's (B, n-gram size or K) and HF prompt lookup's N
are chosen on the bench's own validation prompts (`VALIDATION_FILE`: chat, code, math, summarisation and
rewriting, disjoint from the test prompts and from any training data), read by `validation_prompts` only;
the measured prompts (`--prompts-file`, default `TEST_FILE`) are never read by the tuning. A candidate
wins by tokens/s on validation; candidates within `TIE_TOLERANCE` of the fastest count as tied, and the
tie goes to more tokens per round. The headline row is the exact specdiff row that was fastest on
validation (never chosen by its test figures).

Timing is interleaved per prompt: after a warm-up, every method runs on prompt i (`repeats` times, the
order of methods rotated from prompt to prompt) before any runs on prompt i + 1; a method's seconds on a
prompt are the median of its repeats, and its tokens/s is its generated tokens over the sum of those
seconds. `tokens_per_cpu_s` uses the process's CPU seconds (all torch threads) instead.

Per row: tokens/s, mean accepted drafted tokens per round (HF rows: new tokens per verifier forward,
minus one; plain decoding: 0), tokens per round, per prompt kind (the JSONL "kind" key) the same
acceptance figures, and at greedy the fraction of prompts whose ids equal HF greedy's (`greedy_identical`).
"""
from __future__ import annotations

import itertools
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from specdiff.runs.real_tradeoffs import LENIENCY, REAL_CONTROLLERS

DATA = Path(__file__).resolve().parents[1] / "eval" / "tasks" / "data"
VALIDATION_FILE = DATA / "real_validation.jsonl"  # tuning only: never a measured set
TEST_FILE = DATA / "real_test.jsonl"  # the held-out prompts the docs' figures are measured on
DEFAULT_DRAFTERS = ("lookup",)  # besides the verifier's own distilled drafters (`default_drafters`)
TIE_TOLERANCE = 0.02  # candidates within 2% of the fastest on validation are tied: more tokens/round wins
HF_ROWS = ("hf", "hf_lookup", "hf_assisted")
HF_SPECULATIVE = ("hf_lookup", "hf_assisted")


@dataclass
class Settings:
    """What one real-verifier bench run measures (the command fills it from its flags)."""

    verifier: str
    prompts_file: str | None = None  # None: TEST_FILE
    problems: int | None = None  # measured prompts (None: all of the file from first_problem)
    first_problem: int = 0
    tune_problems: int | None = None  # validation prompts used for tuning (None: all)
    repeats: int = 3
    tune_repeats: int = 1
    max_new_tokens: int = 96
    tune_max_new_tokens: int = 48
    seed: int = 0
    threads: int = 2
    sampling: dict = field(default_factory=lambda: {"temperature": 0.0})  # temperature 0: greedy
    drafters: list[str] | None = None  # None: `default_drafters(verifier)`
    blocks: list[int] = field(default_factory=lambda: [4, 8, 12, 16])  # B grid of every specdiff drafter
    lookup_ngrams: list[int] = field(default_factory=lambda: [2, 3])  # prompt lookup's longest n-gram
    steps: list[int] = field(default_factory=lambda: [1, 2, 4])  # K grid of kinds that take steps
    hf_lookup_tokens: list[int] = field(default_factory=lambda: [3, 5, 10])  # HF prompt lookup's N grid
    hf_assistant: str | None = None  # a full-vocabulary causal LM for HF assisted generation (None: the
    # verifier's shipped distilled AR drafter, when it has one; "none": no hf_assisted row)
    caches: list = field(default_factory=lambda: ["off"])  # prefix caches tried for kinds whose effort is K
    # the tradeoff rows of drafters whose effort is K (`runs.real_tradeoffs`); empty lists: none
    tradeoff_steps: list[int] = field(default_factory=lambda: [1, 2, 4, 8])
    controllers: list[str] = field(default_factory=lambda: list(REAL_CONTROLLERS))
    leniency: list = field(default_factory=lambda: list(LENIENCY))  # (rule, leniency) pairs


@dataclass
class Prompt:
    ids: list[int]  # through the chat template, the assistant's turn opened
    kind: str  # the JSONL "kind" ("" when absent)
    index: int  # line order in its file (after first_problem)
    source: str  # the file it was read from


def default_drafters(verifier: str) -> list[str]:
    """The drafters distilled for this verifier and shipped (`specdiff.zoo.distilled`), then prompt lookup."""
    from specdiff.zoo import distilled

    return [name for kind in ("dflash", "ar", "masked") if (name := distilled.shipped_for(verifier, kind))] + list(
        DEFAULT_DRAFTERS)


def drafter_references(values: list[str] | None, verifier: str) -> dict[str, str]:
    """--drafters for a real verifier -> {kind: reference}; default `default_drafters`. A testbed drafter is
    refused with `check_pair`'s reason before any weights load; a kind named twice is refused."""
    from specdiff.runs.kinds import check_pair, for_verifier, require_weights, resolve

    references = {}
    for value in ",".join(values or default_drafters(verifier)).split(","):
        if not value.strip():
            continue
        check_pair(for_verifier(value.strip(), verifier), verifier)
        kind, reference = resolve(value.strip(), verifier)
        check_pair(reference, verifier)
        if kind in references:
            raise ValueError(f"--drafters names the {kind} drafter twice")
        require_weights(reference)
        references[kind] = reference
    if not references:
        raise ValueError("--drafters names no drafter")
    return references


def read_prompts(path, tokenizer, first: int = 0, n: int | None = None) -> list[Prompt]:
    """Prompts [first, first + n) of a prompts JSONL file (`eval.tasks.prompts`), as token ids: a conversation
    through the tokenizer's chat template, a raw prompt as it is."""
    from specdiff.engine.generate import chat_ids
    from specdiff.eval.tasks import prompts as prompts_task

    problems = prompts_task.read(path)[first:]
    problems = problems if n is None else problems[:n]
    if not problems:
        raise ValueError(f"{path}: no prompts from prompt {first} on")
    out = []
    for index, problem in enumerate(problems, first):
        if prompts_task.is_conversation(problem):
            ids = chat_ids(tokenizer, list(problem.meta["messages"]), index)
        else:
            ids = list(tokenizer(problem.question).input_ids)
        out.append(Prompt(ids=ids, kind=str(problem.meta.get("kind", "")), index=index, source=str(path)))
    return out


def validation_prompts(tokenizer, n: int | None = None) -> list[Prompt]:
    """The bench's own validation prompts: the only prompts the tuning ever reads."""
    return read_prompts(VALIDATION_FILE, tokenizer, 0, n)


# -- methods: prompt -> {"ids", "rounds", "accepted"} (timing is the caller's) ------------------------------

def spec_method(config, cache):
    """A specdiff row: the configuration's SpeculativeGenerator, built once; marginal proposals that would not
    be exact are verified as point masses instead (every specdiff row is exact under the lossless rule)."""
    import torch

    from specdiff.runs import build_generator

    generator = build_generator(config, cache)
    if not generator.exact and config.proposal == "marginal":
        config.proposal = "point_mass"
        generator = build_generator(config, cache)
    generator.tokenizer = None  # ids only: the rows compare ids, and plain decoding decodes nothing either

    def run(prompt: Prompt, max_new_tokens: int, seed: int) -> dict:
        draws = torch.Generator(device=generator.verifier.device).manual_seed(seed)
        out = generator.generate([prompt.ids], max_new_tokens=max_new_tokens, generator=draws)
        stats = out.stats[0]
        return {"ids": out.token_ids[0], "rounds": stats.rounds, "accepted": sum(stats.accepted),
                "draft_s": stats.draft_s}
    run.exact = generator.exact
    return run


def ar_method(verifier):
    """specdiff's plain cached decoding of the verifier: one token per forward, nothing accepted."""
    import torch

    from specdiff.engine.baselines import autoregressive_generate
    from specdiff.engine.generate import eos_token_ids

    eos = eos_token_ids(verifier.model, None)

    def run(prompt: Prompt, max_new_tokens: int, seed: int) -> dict:
        draws = torch.Generator(device=verifier.device).manual_seed(seed)
        ids, _ = autoregressive_generate(verifier.model, [prompt.ids], max_new_tokens, eos, verifier.temperature,
                                         verifier.top_p, verifier.top_k, draws,
                                         pad_token_id=verifier.model.config.pad_token_id or 0)
        return {"ids": ids[0], "rounds": len(ids[0]), "accepted": 0}
    run.exact = True
    return run


def hf_method(verifier, assistant_model=None, prompt_lookup_num_tokens: int | None = None):
    """transformers' generate (plain, prompt lookup or assisted) at the verifier's sampling settings; its
    rounds are the verifier's forwards (counted by a hook), its accepted tokens the new tokens beyond one
    per forward."""
    from specdiff.engine.baselines import hf_generate
    from specdiff.engine.generate import eos_token_ids
    from specdiff.lm.counting import count_forwards

    eos = eos_token_ids(verifier.model, None)

    def run(prompt: Prompt, max_new_tokens: int, seed: int) -> dict:
        with count_forwards(verifier.model) as calls:
            ids, _ = hf_generate(verifier.model, [prompt.ids], max_new_tokens, eos, verifier.temperature,
                                 verifier.top_p, verifier.top_k, assistant_model=assistant_model, seed=seed,
                                 prompt_lookup_num_tokens=prompt_lookup_num_tokens)
        rounds = max(calls.forwards, 1)
        return {"ids": ids[0], "rounds": rounds, "accepted": max(len(ids[0]) - rounds, 0)}
    run.exact = True  # transformers' own decoding of the verifier: the reference, by definition
    return run


# -- interleaved measurement ------------------------------------------------------------------------------

def measure(methods: dict, prompts: list[Prompt], max_new_tokens: int, repeats: int, seed: int, say=None,
            phase: str = "test") -> dict:
    """name -> one record per prompt ({ids, seconds, cpu_s, rounds, accepted}): a warm-up of every method on
    the first prompt, then per prompt every method `repeats` times (order rotated per prompt) before the next
    prompt; seconds and cpu_s are medians over the repeats, ids those of the first repeat."""
    say = say or (lambda *a: None)
    names = list(methods)
    for name in names:  # warm-up: first calls allocate caches and pick kernels
        methods[name](prompts[0], min(max_new_tokens, 8), seed)
    records = {name: [] for name in names}
    for i, prompt in enumerate(prompts):
        order = names[i % len(names):] + names[:i % len(names)]
        runs = {name: [] for name in names}
        for _ in range(repeats):
            for name in order:
                wall, cpu = time.perf_counter(), time.process_time()
                out = methods[name](prompt, max_new_tokens, seed)
                runs[name].append({**out, "seconds": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu})
        for name in names:
            first = runs[name][0]
            records[name].append({"ids": first["ids"], "rounds": first["rounds"], "accepted": first["accepted"],
                                  "seconds": statistics.median(r["seconds"] for r in runs[name]),
                                  "cpu_s": statistics.median(r["cpu_s"] for r in runs[name])})
            if "draft_s" in first:
                records[name][-1]["draft_s"] = statistics.median(r["draft_s"] for r in runs[name])
        rates = ", ".join(f"{name} {len(records[name][-1]['ids']) / records[name][-1]['seconds']:.1f}"
                          for name in names)
        say(f"{phase} prompt {i + 1}/{len(prompts)} ({prompt.kind or 'no kind'}): {rates} tokens/s")
    return records


def figures(records: list[dict], prompts: list[Prompt], reference: list[list[int]] | None = None) -> dict:
    """A row's figures from its per-prompt records; greedy_identical when HF greedy's ids are given."""
    tokens = sum(len(r["ids"]) for r in records)
    seconds = sum(r["seconds"] for r in records)
    cpu = sum(r["cpu_s"] for r in records)
    out = {"tokens_per_s": tokens / seconds if seconds else 0.0, "tokens_per_cpu_s": tokens / cpu if cpu else 0.0,
           **_acceptance(records), "new_tokens": tokens, "wall_s": seconds, "prompts": len(records)}
    if reference is not None:
        same = [r["ids"] == ids for r, ids in zip(records, reference)]
        out["greedy_identical"] = sum(same) / len(same)
        out["greedy_differs_at"] = {str(p.index): _first_difference(r["ids"], ids)
                                    for p, r, ids, s in zip(prompts, records, reference, same) if not s}
    kinds = sorted({p.kind for p in prompts})
    out["per_kind"] = {}
    for kind in kinds:
        mine = [(p, r) for p, r in zip(prompts, records) if p.kind == kind]
        kind_tokens = sum(len(r["ids"]) for _, r in mine)
        kind_seconds = sum(r["seconds"] for _, r in mine)
        out["per_kind"][kind or "none"] = {"prompts": len(mine), **_acceptance([r for _, r in mine]),
                                           "tokens_per_s": kind_tokens / kind_seconds if kind_seconds else 0.0}
    out["per_prompt"] = [{"index": p.index, "kind": p.kind, "new_tokens": len(r["ids"]), "seconds": r["seconds"],
                          "rounds": r["rounds"], "accepted": r["accepted"]} for p, r in zip(prompts, records)]
    return out


def _acceptance(records: list[dict]) -> dict:
    rounds = sum(r["rounds"] for r in records)
    return {"mean_accepted": sum(r["accepted"] for r in records) / rounds if rounds else 0.0,
            "tokens_per_round": sum(len(r["ids"]) for r in records) / rounds if rounds else 0.0}


def _first_difference(ids: list[int], reference: list[int]) -> int:
    return next((i for i, (a, b) in enumerate(zip(ids, reference)) if a != b), min(len(ids), len(reference)))


# -- tuning on validation ----------------------------------------------------------------------------------

def candidates(kind: str, reference: str, settings: Settings) -> list:
    """A drafter's tuning grid, from its kind's knobs: B (settings.blocks) by prompt lookup's n-gram size
    (lookup), by K and prefix cache (kinds whose effort is steps), or alone (dflash, ar)."""
    from specdiff.runs import RunConfig
    from specdiff.runs.kinds import EFFORT, describe

    configs = []
    for block in _blocks_for(kind, reference, settings.blocks):
        common = dict(drafter=reference, verifier=settings.verifier, block_size=block, sampling=dict(settings.sampling))
        if kind == "lookup":
            configs += [RunConfig(f"lookup B={block} n={n}", extra={"max_ngram": n}, **common)
                        for n in settings.lookup_ngrams]
        elif "steps" in EFFORT.get(kind, ()):
            configs += [RunConfig(f"{describe(kind, k, None, block)} cache={cache}", steps=k,
                                  prefix_cache=False if cache == "off" else cache, **common)
                        for k in settings.steps if k <= block for cache in settings.caches]
        else:
            configs.append(RunConfig(describe(kind, 1, None, block), **common))
    return configs


def _blocks_for(kind: str, reference: str, blocks: list[int]) -> list[int]:
    """The B grid, capped at a DFlash drafter's trained block (its config's block_size, the anchor excluded)."""
    import json

    from specdiff.zoo import distilled

    folder = distilled.folder(reference) if kind == "dflash" else None
    if folder is None:
        return list(blocks)
    trained = int(json.loads((folder / "config.json").read_text())["block_size"]) - 1
    return sorted({min(block, trained) for block in blocks})


def choose(rows: list[dict]) -> dict:
    """The fastest row by tokens/s; rows within TIE_TOLERANCE of it are tied, and more tokens/round wins."""
    fastest = max(row["tokens_per_s"] for row in rows)
    tied = [row for row in rows if row["tokens_per_s"] >= (1 - TIE_TOLERANCE) * fastest]
    return max(tied, key=lambda row: (row["tokens_per_round"], row["tokens_per_s"]))


def tune(references: dict, settings: Settings, cache, verifier, say=None) -> dict:
    """Every specdiff drafter's grid and HF prompt lookup's N grid, measured interleaved on the validation
    prompts (and only those). Returns {"chosen": {row: config}, "grid": rows, "prompts", ...}: row names
    `spec_<kind>` and `hf_lookup`; each chosen config carries its validation figures."""
    prompts = validation_prompts(cache.tokenizer(settings.verifier), settings.tune_problems)
    methods, groups, configs = {}, {}, {}
    for kind, reference in references.items():
        for config in candidates(kind, reference, settings):
            methods[config.name] = spec_method(config, cache)
            groups[config.name], configs[config.name] = f"spec_{kind}", config
    for n in settings.hf_lookup_tokens:
        name = f"hf prompt lookup N={n}"
        methods[name] = hf_method(verifier, prompt_lookup_num_tokens=n)
        groups[name], configs[name] = "hf_lookup", {"name": name, "prompt_lookup_num_tokens": n}
    records = measure(methods, prompts, settings.tune_max_new_tokens, settings.tune_repeats, settings.seed, say,
                      phase="tune")
    grid = []
    for name, rows in records.items():
        config = configs[name]
        row = {"name": name, "row": groups[name], "exact": methods[name].exact, **figures(rows, prompts),
               "config": config.as_dict() if hasattr(config, "as_dict") else config}
        row.pop("per_prompt")
        grid.append(row)
    chosen = {}
    for group in dict.fromkeys(groups.values()):
        best = choose([row for row in grid if row["row"] == group])
        config = configs[best["name"]]
        chosen[group] = {"config": config.as_dict() if hasattr(config, "as_dict") else config,
                         "exact": best["exact"], "validation_tokens_per_s": best["tokens_per_s"],
                         "validation_tokens_per_round": best["tokens_per_round"]}
        say and say(f"tuned {group}: {best['name']}")
    return {"chosen": chosen, "grid": grid, "on": str(VALIDATION_FILE.name), "prompts": len(prompts),
            "kinds": sorted({p.kind for p in prompts}), "max_new_tokens": settings.tune_max_new_tokens,
            "repeats": settings.tune_repeats, "tie_tolerance": TIE_TOLERANCE}


# -- the bench ---------------------------------------------------------------------------------------------

def load_assistant(path: str, verifier):
    """A full-vocabulary causal LM for transformers' assisted generation (a distilled AR drafter is completed
    with the verifier's embeddings); refused when its vocabulary is not the verifier's."""
    from specdiff import models
    from specdiff.zoo import distilled

    folder = distilled.folder(path)
    if folder is not None:
        model, config, d2t = distilled.build(folder, verifier.model, getattr(verifier, "name", None))
        if d2t is not None:
            raise ValueError(f"--hf-assistant {path}: a drafter with a reduced draft vocabulary cannot be "
                             "transformers' assistant (it takes a full-vocabulary causal LM)")
    else:
        model, config, _ = models.load_model(path)
    if models.drafter_kind(config) != "autoregressive":
        raise ValueError(f"--hf-assistant {path}: transformers' assisted generation needs a causal LM")
    if int(model.config.vocab_size) != verifier.vocab_size:
        raise ValueError(f"--hf-assistant {path}: its vocabulary ({model.config.vocab_size} tokens) is not the "
                         f"verifier's ({verifier.vocab_size}); assisted generation here takes a full-vocabulary "
                         "drafter of the same tokenizer")
    return model.to(verifier.device)


def check_prompts_file(path) -> Path:
    """The measured prompts file; the validation file is refused (the bench tunes on it)."""
    path = Path(path) if path is not None else TEST_FILE
    if not path.is_file():
        raise ValueError(f"--prompts-file {str(path)!r} does not exist")
    if path.resolve() == VALIDATION_FILE.resolve():
        raise ValueError(f"--prompts-file {path} is the bench's validation set, which it tunes on; measure on "
                         f"other prompts (default {TEST_FILE.name})")
    return path


def run(settings: Settings, say=None) -> dict:
    """Tunes on validation, then measures every row interleaved on the prompts file; returns the report."""
    import torch

    from specdiff.runs import ModelCache, RunConfig, real_tradeoffs
    from specdiff.runs.model_cache import quiet_transformers

    say = say or (lambda *a: None)
    references = drafter_references(settings.drafters, settings.verifier)
    prompts_file = check_prompts_file(settings.prompts_file)
    quiet_transformers()
    torch.set_num_threads(settings.threads)
    cache = ModelCache()
    verifier = cache.get(settings.verifier, "verifier", **settings.sampling)
    greedy = verifier.temperature == 0
    from specdiff.zoo import distilled

    settings.hf_assistant = settings.hf_assistant or distilled.shipped_for(settings.verifier, "ar")
    if settings.hf_assistant == "none":
        settings.hf_assistant = None
    assistant = load_assistant(settings.hf_assistant, verifier) if settings.hf_assistant else None
    prompts = read_prompts(prompts_file, cache.tokenizer(settings.verifier), settings.first_problem, settings.problems)

    tuning = tune(references, settings, cache, verifier, say)
    chosen = tuning["chosen"]
    methods = {"ar": ar_method(verifier), "hf": hf_method(verifier),
               "hf_lookup": hf_method(verifier, prompt_lookup_num_tokens=chosen["hf_lookup"]["config"][
                   "prompt_lookup_num_tokens"])}
    if assistant is not None:
        methods["hf_assisted"] = hf_method(verifier, assistant_model=assistant)
    spec_rows = [f"spec_{kind}" for kind in references]
    for row in spec_rows:
        methods[row] = spec_method(RunConfig(**{**chosen[row]["config"], "name": row}), cache)
    kinds = real_tradeoffs.effort_kinds(references)
    extra, lenient = _tradeoff_rows(kinds, settings, cache, tuning, say)
    for name, config in extra.items():
        methods[name] = spec_method(config, cache)
    spec_rows += list(extra)
    records = measure(methods, prompts, settings.max_new_tokens, settings.repeats, settings.seed, say, phase="test")

    reference = [r["ids"] for r in records["hf"]] if greedy else None
    rows = {}
    for name, method in methods.items():
        rows[name] = {**figures(records[name], prompts, reference), "exact": method.exact}
        if name in chosen:
            rows[name]["config"] = chosen[name]["config"]
        elif name in extra:
            rows[name]["config"] = extra[name].as_dict()
        if name == "hf_assisted":
            rows[name]["config"] = {"assistant_model": settings.hf_assistant}
    step_s = rows["ar"]["wall_s"] / max(rows["ar"]["new_tokens"], 1)  # one verifier forward of one token
    for row in spec_rows:  # the drafter's seconds per round, in verifier steps
        drafted = [r for r in records[row] if "draft_s" in r]
        rounds = sum(r["rounds"] for r in drafted)
        if rounds:
            rows[row]["drafter_cost_vs_verifier_step"] = sum(r["draft_s"] for r in drafted) / rounds / step_s
    for name, config in lenient.items():  # untimed: what the leniency rows emit, beside lossless at K = 1
        rows[name].update(real_tradeoffs.agreement(config, cache, prompts, settings.max_new_tokens, settings.seed))
        if config.rule != "lossless":
            rows[name]["rule"] = f"{config.rule} {config.leniency:g}"
    result = _headline(rows, [f"spec_{kind}" for kind in references], chosen, references, greedy)
    result.update(real_tradeoffs.summaries(rows, kinds, chosen))
    sampling = {"temperature": verifier.temperature, "top_p": verifier.top_p, "top_k": verifier.top_k}
    result.update({
        "rows": rows, "tuning": tuning,
        "verifier": settings.verifier, "prompts_file": str(prompts_file), "prompts": len(prompts),
        "first_problem": settings.first_problem, "kinds": sorted({p.kind for p in prompts}),
        "repeats": settings.repeats, "max_new_tokens": settings.max_new_tokens, "threads": settings.threads,
        "seed": settings.seed, "greedy": greedy, "sampling": sampling,
        "timing": "interleaved per prompt (every row on prompt i before any on prompt i + 1, order rotated), "
                  "after a warm-up; per prompt the median of the repeats; tokens/s = tokens / summed seconds",
        "tuned_on": f"{VALIDATION_FILE.name} (validation, tuning only)", "measured_on": prompts_file.name,
    })
    return result


def _tradeoff_rows(kinds: list[str], settings: Settings, cache, tuning: dict, say) -> tuple[dict, dict]:
    """({row: RunConfig} of the effort, adaptive and leniency rows of `runs.real_tradeoffs`, {row: RunConfig}
    of the rows whose agreement is measured: the leniency rows and the lossless K = 1 row). The adaptive row's
    controller is chosen on validation here (recorded in tuning["chosen"] and tuning["grid"])."""
    from specdiff.runs import RunConfig, real_tradeoffs

    extra, lenient = {}, {}
    for kind in kinds:
        tuned = tuning["chosen"][f"spec_{kind}"]["config"]
        extra.update(real_tradeoffs.effort_configs(kind, tuned, settings.tradeoff_steps, tuning["grid"]))
        if settings.leniency:
            lenient_rows = real_tradeoffs.leniency_configs(kind, tuned, settings.leniency)
            base = f"spec_{kind}" if tuned["steps"] == 1 else f"spec_{kind} K=1"
            if base not in extra and base != f"spec_{kind}":
                extra[base] = RunConfig(**{**tuned, "name": base, "steps": 1})
            lenient[base] = RunConfig(**{**tuned, "name": base, "steps": 1, "proposal": "marginal"})
            extra.update(lenient_rows)
            lenient.update({name: RunConfig(**config.as_dict()) for name, config in lenient_rows.items()})
        if settings.controllers:
            configs = real_tradeoffs.adaptive_candidates(kind, tuned, settings.controllers, settings.blocks)
            prompts = validation_prompts(cache.tokenizer(settings.verifier), settings.tune_problems)
            methods = {config.name: spec_method(config, cache) for config in configs}
            records = measure(methods, prompts, settings.tune_max_new_tokens, settings.tune_repeats, settings.seed,
                              say, phase="tune adaptive")
            grid = []
            for name, rows in records.items():
                row = {"name": name, "row": f"spec_{kind}_adaptive", "exact": methods[name].exact, **figures(rows, prompts)}
                row.pop("per_prompt")
                grid.append(row)
            best = choose(grid)
            config = next(c for c in configs if c.name == best["name"])
            tuning["grid"] += grid
            tuning["chosen"][f"spec_{kind}_adaptive"] = {
                "config": config.as_dict(), "exact": best["exact"], "validation_tokens_per_s": best["tokens_per_s"],
                "validation_tokens_per_round": best["tokens_per_round"]}
            say and say(f"tuned spec_{kind}_adaptive: {best['name']}")
            extra[f"spec_{kind}_adaptive"] = RunConfig(**{**config.as_dict(), "name": f"spec_{kind}_adaptive"})
    return extra, lenient


def _headline(rows: dict, spec_rows: list[str], chosen: dict, references: dict, greedy: bool) -> dict:
    """The top-level keys, for the exact specdiff row that was fastest on validation."""
    exact = [row for row in spec_rows if rows[row]["exact"]]
    ar_baseline = "ar" if rows["ar"]["tokens_per_s"] >= rows["hf"]["tokens_per_s"] else "hf"
    hf_best = max((row for row in HF_SPECULATIVE if row in rows), key=lambda row: rows[row]["tokens_per_s"])
    out = {"ar_baseline": ar_baseline, "hf_best_speculative": hf_best}
    if not exact:
        return {**out, "speedup_vs_ar": None, "speedup_vs_hf_best_speculative": None, "mean_accepted": None,
                "drafter": None, "row": None, "note": "no exact specdiff row"}
    row = max(exact, key=lambda name: chosen[name]["validation_tokens_per_s"])  # chosen on validation
    figures_ = rows[row]
    out.update({"speedup_vs_ar": figures_["tokens_per_s"] / rows[ar_baseline]["tokens_per_s"],
                "speedup_vs_hf_best_speculative": figures_["tokens_per_s"] / rows[hf_best]["tokens_per_s"],
                "mean_accepted": figures_["mean_accepted"], "drafter": references[row[len("spec_"):]], "row": row,
                "config": chosen[row]["config"]})
    if greedy:
        out["greedy_identical"] = figures_["greedy_identical"]
    return out
