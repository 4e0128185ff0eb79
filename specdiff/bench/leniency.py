"""`specdiff bench leniency`'s measurement (the command's docstring has the protocol): lenient rules tuned on
validation problems against the lossless rule at the same effort, then both measured on held-out test problems
with paired-bootstrap intervals.

Why it keeps its own tuner and timer rather than `bench.tuner` and `bench.timer` (issue 52): the shared tuner
chooses the fastest candidate by wall-clock tokens/s with a 2% tie rule and knows no accuracy; this bench chooses
by priced throughput (each configuration's verifier and drafter calls priced once, `runs.call_costs`, so machine
noise cannot reorder the candidates) under an accuracy-loss bound on validation, and it reports per-problem paired
bootstrap intervals, which need each problem's accuracy and calls, not the shared timer's per-prompt medians. Its
drafter's kinds and their proposal mode come from the bench's table (`bench/kinds.toml`).

`run_leniency(settings, say)` takes a `LeniencySettings` (the command, `specdiff.commands.bench_leniency`, makes it
from its flags, as `bench speedup` makes its `bench.settings.Settings`); `say(line)` is told each progress line."""
from __future__ import annotations

import statistics
from dataclasses import dataclass

CANDIDATES = (
    ("typical eps=0.05", dict(rule="typical", leniency=0.05)),
    ("typical eps=0.09", dict(rule="typical", leniency=0.09)),
    ("typical eps=0.2", dict(rule="typical", leniency=0.2)),
    ("gated linear lam=0.3 top<=0.7", dict(rule="linear", leniency=0.3, gate_top=0.7)),
    ("gated linear lam=1 top<=0.5", dict(rule="linear", leniency=1.0, gate_top=0.5)),
    ("gated cactus delta=2 H>=0.5", dict(rule="cactus", leniency=2.0, gate_entropy=0.5)),
    ("gated cactus delta=8 H>=0.5", dict(rule="cactus", leniency=8.0, gate_entropy=0.5)),
    ("typical eps=0.09 untruncated", dict(rule="typical", leniency=0.09, support="untruncated")),
    ("gated cactus delta=8 H>=0.5 untruncated", dict(rule="cactus", leniency=8.0, gate_entropy=0.5,
                                                     support="untruncated")),
)
BOOTSTRAP = 1000


@dataclass(frozen=True)
class LeniencySettings:
    """One leniency bench (the command's flags have the same names): drafter, a kind of `bench/kinds.toml`'s
    leniency bench; steps, the K grid, or threshold, a tau grid tuned over instead (None: the K grid); block_size,
    B (capped at a block drafter's trained length); tune_problems validation problems; test problems
    [first_problem, first_problem + problems), measured `repeats` times interleaved; loss, the validation accuracy
    a lenient rule may lose; max_new_tokens per problem; threads, torch's (for the call costs); seed."""

    drafter: str
    steps: tuple[int, ...] = (2, 4)
    threshold: tuple[float, ...] | None = None
    block_size: int = 16
    tune_problems: int = 60
    problems: int = 200
    first_problem: int = 0
    repeats: int = 3
    loss: float = 0.01
    max_new_tokens: int = 96
    threads: int = 1
    seed: int = 0


def run_leniency(settings: LeniencySettings, say) -> dict:
    """Tunes a lenient rule against the lossless one on validation problems and measures both, interleaved, on
    held-out test problems (module docstring)."""
    from specdiff.eval import tasks
    from specdiff.eval.pricing import price_ms
    from specdiff.bench.settings import kind_settings
    from specdiff.models import DRAFTER_KINDS, ModelCache
    from specdiff.runs import RunConfig, run_config
    from specdiff.runs.call_costs import measure_call_costs

    drafter = DRAFTER_KINDS[settings.drafter]
    cache = ModelCache()
    block = settings.block_size
    length = getattr(cache.drafter(drafter), "block_length", None)  # a block drafter's trained length
    block = min(block, length) if length else block
    proposal = kind_settings(settings.drafter).get("leniency_proposal", "marginal")  # block: exact only in point mass
    costs = measure_call_costs("verifier", drafter, threads=settings.threads)
    tune = tasks.arith_problems("validation", settings.tune_problems)
    test = tasks.arith_problems("test", settings.first_problem + settings.problems)[settings.first_problem:]

    # the effort grid: K denoising steps, or confidence thresholds tau when --threshold is given
    efforts = ([(f"tau={tau}", dict(threshold=tau)) for tau in settings.threshold] if settings.threshold
               else [(f"K={steps}", dict(steps=steps)) for steps in settings.steps])

    def config(name, effort, **rule):
        label, knob = effort
        return RunConfig(f"{label} {name}", drafter=drafter, block_size=block, proposal=proposal, **knob, **rule)

    def measure(run, problems, seed):
        result = run_config(run, [p.prompt for p in problems], [p.target for p in problems], cache,
                            settings.max_new_tokens, seed=seed, is_correct=tasks.is_correct)
        priced = sum(price_ms(r["calls"], costs) for r in result["records"]) / 1000
        forwards = sum(r["calls"]["verifier_forwards"] for r in result["records"])
        result.update(priced_throughput=result["new_tokens"] / priced, tokens_per_call=result["new_tokens"] / forwards)
        return result

    run_config(config("lossless", efforts[0]), [tune[0].prompt], None, cache, 16)  # warm-up: load both models
    grid = []
    for effort in efforts:
        for name, rule in (("lossless", {}),) + CANDIDATES:
            result = measure(config(name, effort, **rule), tune, settings.seed)
            grid.append(dict(config=config(name, effort, **rule).as_dict(), lossless=name == "lossless",
                             **{k: result[k] for k in ("accuracy", "tokens_per_round", "tokens_per_call",
                                                       "priced_throughput", "tokens_per_s")}))
            say(f"tune {grid[-1]['config']['name']}: accuracy {result['accuracy']:.3f}, "
                f"{result['tokens_per_call']:.2f} tokens/call, {result['priced_throughput']:.0f} priced tokens/s")
    lossless = max((row for row in grid if row["lossless"]), key=lambda row: row["priced_throughput"])
    allowed = [row for row in grid if not row["lossless"] and row["accuracy"] >= lossless["accuracy"] - settings.loss
               and row["priced_throughput"] > lossless["priced_throughput"]]
    chosen = max(allowed, key=lambda row: row["priced_throughput"]) if allowed else lossless
    say(f"lossless: {lossless['config']['name']}; chosen: {chosen['config']['name']}")

    runs = {"lossless": [], "lenient": []}
    for repeat in range(settings.repeats):
        for key, row in (("lossless", lossless), ("lenient", chosen)):
            runs[key].append(measure(RunConfig(**row["config"]), test, settings.seed + repeat))
            say(f"repeat {repeat + 1}/{settings.repeats} {key}: {runs[key][-1]['tokens_per_s']:.0f} tokens/s")
    result = _report(runs, costs, settings.seed)
    result.update(chosen=chosen["config"]["name"], lossless=lossless["config"]["name"],
                  chosen_config=chosen["config"], lossless_config=lossless["config"],
                  no_lenient_rule_qualified=not allowed, tuning=grid, call_costs=costs,
                  drafter=settings.drafter,
                  test_problems=[settings.first_problem, settings.first_problem + settings.problems],
                  tune_problems=settings.tune_problems, seed=settings.seed, repeats=settings.repeats,
                  loss=settings.loss)
    return result


def _report(runs: dict, costs: dict, seed: int) -> dict:
    """The held-out figures and their paired-bootstrap intervals over test problems.

    Each problem's tokens, wall and priced seconds and verifier forwards are summed over the repeats (and
    its correctness averaged), so that every point estimate is the statistic of the same pooled records
    that the bootstrap resamples, problem by problem, for both configurations at once (paired).
    """
    import numpy as np

    from specdiff.eval.pricing import price_ms

    def per_problem(key):  # [repeats, problems] -> [problems]
        rows = [run["records"] for run in runs[key]]
        table = {"tokens": [[r["new_tokens"] for r in rs] for rs in rows],
                 "wall": [[r["wall_s"] for r in rs] for rs in rows],
                 "priced": [[price_ms(r["calls"], costs) for r in rs] for rs in rows],
                 "forwards": [[r["calls"]["verifier_forwards"] for r in rs] for rs in rows],
                 "correct": [[float(r["correct"]) for r in rs] for rs in rows]}
        out = {name: np.array(values, dtype=float).sum(axis=0) for name, values in table.items()}
        out["correct"] /= len(rows)
        return out

    arrays = {key: per_problem(key) for key in runs}

    def figures(pick):
        a, b = ({k: v[pick] for k, v in arrays[key].items()} for key in ("lossless", "lenient"))
        return {"tokens_per_call_ratio": (b["tokens"].sum() / b["forwards"].sum()) / (a["tokens"].sum() / a["forwards"].sum()),
                "throughput_ratio": (b["tokens"].sum() / b["wall"].sum()) / (a["tokens"].sum() / a["wall"].sum()),
                "priced_throughput_ratio": (b["tokens"].sum() / b["priced"].sum()) / (a["tokens"].sum() / a["priced"].sum()),
                "accuracy_difference": b["correct"].mean() - a["correct"].mean()}

    n = len(arrays["lossless"]["tokens"])
    point = figures(np.arange(n))
    rng = np.random.default_rng(seed)
    samples = [figures(rng.integers(0, n, n)) for _ in range(BOOTSTRAP)]
    out = {"accuracy_lossless": float(arrays["lossless"]["correct"].mean()),
           "accuracy_lenient": float(arrays["lenient"]["correct"].mean()),
           **{key: float(value) for key, value in point.items()},
           # the whole-run ratio of each repeat (tokens over the run's wall time), for the spread between repeats
           "throughput_ratios_per_repeat": [b["tokens_per_s"] / a["tokens_per_s"]
                                            for a, b in zip(runs["lossless"], runs["lenient"])],
           "tokens_per_round_lossless": statistics.fmean(r["tokens_per_round"] for r in runs["lossless"]),
           "tokens_per_round_lenient": statistics.fmean(r["tokens_per_round"] for r in runs["lenient"]),
           "bootstrap": {"resamples": BOOTSTRAP, "paired": True,
                         "over": f"{n} test problems, each pooled over {len(runs['lossless'])} repeats"}}
    for key in ("tokens_per_call_ratio", "throughput_ratio", "priced_throughput_ratio", "accuracy_difference"):
        values = [s[key] for s in samples]
        out[f"{key}_95"] = [float(np.percentile(values, 2.5)), float(np.percentile(values, 97.5))]
    return out
