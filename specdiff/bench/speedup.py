"""`specdiff bench speedup` and `specdiff bench tune`: the one bench, on any suite (`suites`).

`speedup(settings, tuning=None, say)`: the drafters (`references`), the suite, then the tuning (`tuner.tune` on
validation only, unless a tuning file's is given), then every row measured interleaved on the suite's test
prompts (`timer.measure`), then the report (`report.report`). Rows:
- `ar` (specdiff's plain decoding) and `hf` (transformers' generate): the plain-decoding rows;
- `hf_lookup` (HF prompt lookup at its tuned N, when `hf_lookup_tokens` is not empty) and `hf_assisted`
  (transformers' assisted generation with `hf_assistant`, by default the verifier's AR drafter where one fits);
- `spec_<kind>` per drafter at its tuned configuration; `spec_<kind>_adaptive` with its tuned controller;
  `spec_<kind>_batch<N>` (the first drafter or `batch_drafters`, at each of `batch_sizes`) beside `ar_batch<N>`
  (plain decoding at that batch); `spec_<kind>_tree<N>` (a drafter's tuned
  configuration with draft trees of N nodes, the budget of `trees` chosen on validation; every budget of `trees`
  when the tuning file has no choice); the effort and leniency rows of `tradeoffs`;
- with `compile`: `ar_compiled`, `ar_batch<N>_compiled`, `spec_<kind>_compiled` (and its adaptive row) and
  `spec_<kind>_batch<N>_compiled` (`compiled`);
- with `llama_cpp`: `llama_cpp_<quant>`, llama.cpp's plain decoding of the verifier's GGUF (`llama_cpp`), checked
  before the tuning; rows that cannot be measured are skipped, saying why (the report's `skipped`), and each
  lossless specdiff row gets its tokens/s over the shipped GGUF's row (`vs_llama_cpp_<quant>`).
After the rows, with `verify_ks`: the report's `steps`, verify(k) and the weight-streaming floor (`steps`).
`estimate` says, before anything is tuned, about how long the run takes.
"""
from __future__ import annotations

from dataclasses import replace

from specdiff.bench import llama_cpp as llama
from specdiff.bench import methods as rows_
from specdiff.bench import report as report_
from specdiff.bench import rows as named
from specdiff.bench import suites, tradeoffs, tuner
from specdiff.bench.figures import figures
from specdiff.bench.ties import up_to_ties
from specdiff.bench.timer import measure


def speedup(settings, tuning: dict | None = None, say=None) -> dict:
    """Tunes (unless `tuning` is given), measures every row, returns the report."""
    from specdiff.runs import RunConfig

    say = say or (lambda *a: None)
    references = tuning["references"] if tuning else drafter_references(settings)
    for kind in settings.batch_drafters:  # refused before anything is loaded or tuned
        if kind not in references:
            raise ValueError(f"batch_drafters names {kind!r}, which is not measured (drafters: {', '.join(references)})")
    cache, verifier, suite = _setup(settings)
    llama_rows, skipped, shipped = llama.plan(settings, suite.test[0].ids, say)  # before the tuning
    for what, why in skipped.items():
        say(f"{what} rows skipped: {why}")
    say(estimate(settings, references, suite, verifier, tuned=tuning is not None))
    tuning = tuning or tuner.tune(references, settings, suite, cache, verifier, say)
    chosen = tuning["chosen"]
    plain, hf, lookup, assisted = named.plain(), named.hf(), named.hf("hf_lookup"), named.hf("hf_assisted")
    methods = {plain.name: rows_.plain(verifier, plain.name), hf.name: rows_.hf(verifier, hf.name)}
    if lookup.name in chosen:
        n = chosen[lookup.name]["config"]["prompt_lookup_num_tokens"]
        methods[lookup.name] = rows_.hf(verifier, lookup.name, prompt_lookup_num_tokens=n,
                                        config=chosen[lookup.name]["config"])
    assistant = assistant_reference(settings, references)
    if assistant is not None:
        methods[assisted.name] = rows_.hf(verifier, assisted.name,
                                          assistant_model=load_assistant(assistant, verifier, cache),
                                          config={"assistant_model": assistant})
    tuned = [named.spec(kind, reference, adaptive=adaptive) for kind, reference in references.items()
             for adaptive in (False, True)]
    configs = {row.name: RunConfig(**{**chosen[row.name]["config"], "name": row.name})
               for row in tuned if row.name in chosen}
    compilable = {row: configs[row.name] for row in tuned if row.name in configs}  # the rows `compile` compiles
    plain_rows = [plain] + [named.plain(n) for n in settings.batch_sizes]
    methods.update({row.name: rows_.plain(verifier, row.name, row.batch) for row in plain_rows[1:]})
    for kind in settings.batch_drafters or [next(iter(references))]:  # a batched row's ratio is over ar_batch<N>
        for n in settings.batch_sizes:
            row = named.spec(kind, references[kind], batch=n)
            configs[row.name] = RunConfig(**{**chosen[named.spec(kind).name]["config"], "batch_size": n,
                                             "name": row.name})
            compilable[row] = configs[row.name]
    for kind in tuner.tree_kinds(references, settings):  # the budget chosen on validation (else each budget)
        fixed = chosen.get(named.spec(kind).name)
        tree = chosen.get(named.spec(kind, tree=0).name)
        budgets = [tree["config"]["tree_budget"]] if tree else settings.trees if fixed else []
        for n in budgets:
            row = named.spec(kind, references[kind], tree=n)
            configs[row.name] = RunConfig(**{**(tree or fixed)["config"], "tree_budget": n, "name": row.name})
    steps_kinds = [kind for kind in references if "steps" in _spec(kind).effort]
    extra, lenient = tradeoffs.tradeoff_rows(steps_kinds, chosen, tuning["grid"], settings)
    configs.update(extra)
    methods.update({row: rows_.speculative(config, cache) for row, config in configs.items()})
    if settings.compile:  # the compiled rows beside the eager ones (`bench.compiled`)
        from specdiff.bench.compiled import compiled_rows

        methods.update(compiled_rows(plain_rows, compilable, verifier, cache, suite.test, settings))
    if llama_rows:
        from specdiff.engine.generate import eos_token_ids

        methods.update(llama.methods(llama_rows, eos_token_ids(verifier.model, None), suite.test, settings))
    records = measure(methods, suite.test, settings.max_new_tokens, settings.repeats, settings.seed, say, phase="test")
    greedy = verifier.temperature == 0
    reference = [r["ids"] for r in records[hf.name]] if greedy else None
    tokenizer = cache.tokenizer(settings.verifier)
    rows = {}
    for name, method in methods.items():
        rows[name] = {**figures(records[name], suite.test, reference, suite.score,
                                lambda ids: tokenizer.decode(ids, skip_special_tokens=True)),
                      "exact": method.exact, "config": method.config}
    if reference is not None:  # near-ties at the first difference from HF greedy (`ties`)
        up_to_ties(rows, suite.test, reference, records, verifier.model,
                   str(next(verifier.model.parameters()).dtype).removeprefix("torch."))
    step_s = rows[plain.name]["wall_s"] / max(rows[plain.name]["new_tokens"], 1)  # one verifier forward of one token
    for name in configs:  # the drafter's seconds per round, in verifier steps
        if rows[name].get("rounds"):
            rows[name]["drafter_cost_vs_verifier_step"] = rows[name]["draft_ms"] / 1000 / step_s
    for name, config in lenient.items():  # untimed: what the leniency rows emit, beside lossless at the same K
        rows[name].update(tradeoffs.agreement(config, cache, suite.test, settings.max_new_tokens, settings.seed))
        if config.rule != "lossless":
            rows[name]["rule"] = f"{config.rule} {config.leniency:g}"
    versus = llama.compare(rows, llama_rows, shipped) if llama_rows else {}
    report = report_.report(rows, tuning, references, settings, suite, verifier, steps_kinds)
    report.update(versus)
    if skipped:
        report["skipped"] = skipped
    if settings.verify_ks:  # after the rows, in the same process (`bench.steps`)
        from specdiff.bench.steps import steps

        say(f"steps: verify(k) at k = {', '.join(map(str, settings.verify_ks))} and the weight-streaming floor")
        report["steps"] = steps(verifier.model, settings.verify_ks, compile=settings.compile, say=say)
    return report


def tune(settings, say=None) -> dict:
    """`specdiff bench tune`: the tuning alone, on the suite's validation prompts."""
    references = drafter_references(settings)
    cache, verifier, suite = _setup(settings)
    return tuner.tune(references, settings, suite, cache, verifier, say)


def drafter_references(settings) -> dict[str, str]:
    """{kind: drafter reference} of `always_drafters` and then `drafters` (the user's or the preset's). A user's
    drafter replaces an always-measured one of its kind and is refused when it does not fit the verifier or
    names a kind twice; a preset's default that does not fit is skipped; a zoo model without weights is refused
    (naming `specdiff zoo train NAME`) before anything runs."""
    from specdiff.models import pair, require_weights

    references, given = {}, set()
    entries = [(value, False) for value in settings.always_drafters]
    entries += [(value, "drafters" in settings.user_set) for value in settings.drafters or []]
    for value, users in entries:
        for name in (part.strip() for part in str(value).split(",") if part.strip()):
            try:
                drafter = pair(name, settings.verifier)[0]  # resolved once: named for the verifier, and checked
                kind = drafter.spec.name
            except ValueError:
                if users or name in settings.always_drafters:
                    raise
                continue
            if kind in given:
                raise ValueError(f"--drafters names the {kind} drafter twice")
            if users:
                given.add(kind)
            elif kind in references:
                continue
            references[kind] = drafter.reference
    if not references:
        raise ValueError("--drafters names no drafter")
    for reference in references.values():
        require_weights(reference)
    return references


def assistant_reference(settings, references: dict) -> str | None:
    """`hf_assistant`, or by default the verifier's AR drafter (the kind that can verify) where one fits."""
    from specdiff.drafters import registry
    from specdiff.models import pair

    if settings.hf_assistant == "none":
        return None
    if settings.hf_assistant is not None:
        return settings.hf_assistant
    kind = next(spec.name for spec in registry.specs() if spec.can_verify)
    try:
        return pair(kind, settings.verifier)[0].reference
    except ValueError:
        return None


def load_assistant(reference: str, verifier, cache):
    """A full-vocabulary causal LM for transformers' assisted generation (a distilled AR drafter is completed with
    the verifier's embeddings); refused when it is not a causal LM or its vocabulary is not the verifier's."""
    from specdiff.zoo import distilled

    assistant = cache.ref(reference)
    if assistant.source == "distilled":
        model, config, d2t = distilled.build(assistant.path, verifier.model, getattr(verifier, "name", None))
        if d2t is not None:
            raise ValueError(f"--hf-assistant {reference}: a drafter with a reduced draft vocabulary cannot be "
                             "transformers' assistant (it takes a full-vocabulary causal LM)")
    elif not assistant.spec.can_verify:
        raise ValueError(f"--hf-assistant {reference}: transformers' assisted generation needs a causal LM")
    else:
        model = cache.drafter(assistant).model
    if int(model.config.vocab_size) != verifier.vocab_size:
        raise ValueError(f"--hf-assistant {reference}: its vocabulary ({model.config.vocab_size} tokens) is not the "
                         f"verifier's ({verifier.vocab_size}); assisted generation here takes a full-vocabulary "
                         "drafter of the same tokenizer")
    return model.to(verifier.device)


def estimate(settings, references: dict, suite, verifier, tuned: bool = False) -> str:
    """About how long the run takes: its generated tokens (every candidate and row at its max new tokens) at the
    speed of the verifier's plain decoding, timed now on the first measured prompt (speculative rows are faster)."""
    import time

    prompt = suite.test[0]
    method = rows_.plain(verifier)
    method.call([prompt], 4, settings.seed)
    start = time.perf_counter()
    made = len(method.call([prompt], 16, settings.seed)[0]["ids"])
    per_token = (time.perf_counter() - start) / max(made, 1)
    candidates = sum(len(tuner.candidates(kind, ref, settings)) for kind, ref in references.items())
    candidates += len(settings.hf_lookup_tokens)
    controlled = [kind for kind in references if not settings.controlled_kinds
                  or settings.controlled_kinds in _spec(kind).effort]
    adaptive = sum(len(tuner.controllers_of(settings, kind, i)) for i, kind in enumerate(references) if kind in controlled)
    tune_tokens = 0 if tuned else ((candidates + 2 * adaptive) * suite.validation_size * settings.tune_repeats
                                   * (settings.tune_max_new_tokens or settings.max_new_tokens))
    tree_kinds = tuner.tree_kinds(references, settings)
    candidates += len(settings.trees) * len(tree_kinds) if len(settings.trees) > 1 else 0
    plan = planned_rows(settings, references)
    rows = len(plan) + sum(row.rule is not None for row in plan)  # a leniency row is also run for its agreement
    n = len(suite.test)
    test_tokens = rows * n * (settings.repeats + 0.2) * settings.max_new_tokens
    minutes = (tune_tokens + test_tokens) * per_token / 60
    return (f"about {minutes:.0f} min: {'no tuning (a tuning file)' if tuned else f'{candidates} tuning candidates'}"
            f" on {suite.validation_size} validation prompts, about {rows} rows on {n} test prompts x "
            f"{settings.repeats} repeats, at plain decoding's {1000 * per_token:.0f} ms/token (longer where rows are slower than plain decoding)")


def planned_rows(settings, references: dict) -> list:
    """The rows a run measures (`bench.rows.Row`), as far as they are known before tuning: a tree's node budget
    and a tradeoff row at the tuned K are chosen on validation (each tree kind counts once, every tradeoff K); the
    compiled rows with `compile`; the llama.cpp rows of `llama_cpp` (its "gguf" entry stands for the shipped
    file's quant, known once the file is read)."""
    controlled = [kind for kind in references if not settings.controlled_kinds
                  or settings.controlled_kinds in _spec(kind).effort]
    plan = [named.plain(), named.hf()]
    plan += [named.hf("hf_lookup")] if settings.hf_lookup_tokens else []
    plan += [named.hf("hf_assisted")] if settings.hf_assistant != "none" else []
    for index, (kind, reference) in enumerate(references.items()):
        plan.append(named.spec(kind, reference))
        if kind in controlled and tuner.controllers_of(settings, kind, index):
            plan.append(named.spec(kind, reference, adaptive=True))
    for n in settings.batch_sizes:
        plan.append(named.plain(n))
        plan += [named.spec(kind, references.get(kind), batch=n)
                 for kind in settings.batch_drafters or [next(iter(references))]]
    if settings.compile:  # the compiled rows (`compiled`): plain decoding, the tuned, adaptive and batch rows
        plan += [replace(row, compiled=True) for row in plan if row.method == "plain"
                 or (row.method == "spec" and row.tree is None and row.steps is None and row.rule is None)]
    plan += [named.llama_cpp(str(entry)) for entry in settings.llama_cpp]  # "gguf": the shipped file's quant
    plan += [named.spec(kind, references[kind], tree=0) for kind in tuner.tree_kinds(references, settings)]
    for kind in (kind for kind in references if "steps" in _spec(kind).effort):
        plan += [named.spec(kind, references[kind], steps=k) for k in settings.tradeoff_steps]
        plan += [named.spec(kind, references[kind], steps=k, rule=str(entry))
                 for k in settings.leniency_steps for entry in settings.leniency]
    return plan


def _setup(settings):
    import torch

    from specdiff.models import ModelCache, quiet_transformers

    quiet_transformers()
    torch.set_num_threads(settings.threads)
    cache = ModelCache(dtype=settings.dtype)
    verifier = cache.verifier(settings.verifier, **settings.sampling)
    return cache, verifier, suites.suite(settings, cache.tokenizer(settings.verifier))


def _spec(kind: str):
    from specdiff.drafters import registry

    return registry.get(kind)
