"""The bench's JSON report: `rows` (every row's figures, `figures.figures`), `tuning` and `settings` on every
suite, then the keys each suite's report has always had (their names and meanings are kept):

- a prompts suite: the headline is the exact specdiff row fastest on validation (never chosen by its test
  figures): `speedup_vs_ar` (over the faster of `ar` and `hf`), `speedup_vs_hf_best_speculative` (over the
  faster of `hf_lookup` and `hf_assisted`), `mean_accepted`, `greedy_identical` (at greedy), `drafter`, `row`,
  `config`; `k_tradeoff`, `leniency` and `speedup_adaptive_vs_fixed` per kind (`tradeoffs.summaries`);
  `kinds`: the prompt kinds; `batch`: per batched row (`batch_sizes`) its speedup over plain decoding at the
  same batch (`ar_batch<N>`) and over batch-1 plain decoding;
- the arith suite: the first drafter's rows are `spec`, `spec_adaptive` and `spec_batch8` in `tokens_per_s`,
  `accuracy` and the keys built on them (`speedup_vs_ar`, `speedup_vs_hf_assisted`, `batch8_vs_batch1`,
  `speedup_adaptive_vs_fixed` over `spec`, `profile`: a round of `spec` split into drafting, the verifier's
  forward and the rest); `kinds`: per drafter kind its speedup, tokens per round, accuracy, exactness and
  configuration, side by side.
"""
from __future__ import annotations

from specdiff.bench import rows as bench_rows
from specdiff.bench.rows import HF, PLAIN, is_plain, plain_name

HF_SPECULATIVE = (bench_rows.hf("hf_lookup").name, bench_rows.hf("hf_assisted").name)
PER_ROUND = ("tokens_per_round", "ms_per_round", "draft_ms", "verify_ms")


def report(rows: dict, tuning: dict, references: dict, settings, suite, verifier, steps_kinds: list) -> dict:
    common = {"rows": rows, "tuning": tuning, "settings": settings.as_dict(), "verifier": settings.verifier,
              "repeats": settings.repeats, "max_new_tokens": settings.max_new_tokens, "threads": settings.threads,
              "seed": settings.seed, "first_problem": settings.first_problem, "tuned_on": suite.tuned_on,
              "measured_on": suite.measured_on, "dtype": _dtype(verifier)}
    if suite.name == "arith":
        return {**_arith(rows, tuning, references, settings), **common}
    return {**_prompts(rows, tuning, references, suite, verifier, steps_kinds), **common}


def plain_row(name: str, row: dict, base: str) -> str:
    """The plain row a row's speedup is over: plain decoding at the row's batch (`ar_batch<N>`) for a batched row,
    else `base` (the faster of `ar` and `hf`)."""
    batch = (row.get("config") or {}).get("batch_size") or 1
    return base if batch == 1 or is_plain(row) else plain_name(row)


def _dtype(verifier) -> str:
    """The verifier's parameter dtype ("float32", "bfloat16"): the dtype every row ran in."""
    return str(next(verifier.model.parameters()).dtype).removeprefix("torch.")


def _prompts(rows, tuning, references, suite, verifier, steps_kinds) -> dict:
    from specdiff.bench.tradeoffs import summaries

    chosen, greedy = tuning["chosen"], verifier.temperature == 0
    fixed = {bench_rows.spec(kind).name: kind for kind in references}  # each drafter's tuned row
    exact = [name for name in fixed if rows[name]["exact"]]
    ar_baseline = PLAIN if rows[PLAIN]["tokens_per_s"] >= rows[HF]["tokens_per_s"] else HF
    speculative = [row for row in HF_SPECULATIVE if row in rows]
    hf_best = max(speculative, key=lambda row: rows[row]["tokens_per_s"]) if speculative else None
    out = {"ar_baseline": ar_baseline, "hf_best_speculative": hf_best}
    if not exact:
        out.update({"speedup_vs_ar": None, "speedup_vs_hf_best_speculative": None, "mean_accepted": None,
                    "drafter": None, "row": None, "note": "no exact specdiff row"})
    else:
        row = max(exact, key=lambda name: chosen[name]["validation_tokens_per_s"])  # chosen on validation
        tokens_per_s = rows[row]["tokens_per_s"]
        out.update({"speedup_vs_ar": tokens_per_s / rows[ar_baseline]["tokens_per_s"],
                    "speedup_vs_hf_best_speculative": tokens_per_s / rows[hf_best]["tokens_per_s"] if hf_best else None,
                    "mean_accepted": rows[row]["mean_accepted"], "drafter": references[fixed[row]],
                    "row": row, "config": chosen[row]["config"]})
        if greedy:
            out["greedy_identical"] = rows[row]["greedy_identical"]
            out["greedy_identical_up_to_ties"] = rows[row].get("greedy_identical_up_to_ties")
    out.update(summaries(rows, steps_kinds, chosen))
    out["batch"] = {}
    for name, row in rows.items():  # a batched row beside plain decoding at its batch
        plain = plain_row(name, row, ar_baseline)
        if not is_plain(row) and plain != ar_baseline:
            out["batch"][name] = {"batch_size": row["config"]["batch_size"], "tokens_per_s": row["tokens_per_s"],
                                  "speedup_vs_ar_batch": row["tokens_per_s"] / rows[plain]["tokens_per_s"],
                                  "speedup_vs_ar": row["tokens_per_s"] / rows[ar_baseline]["tokens_per_s"]}
    out.update({"prompts_file": suite.measured_on, "prompts": len(suite.test), "kinds": sorted({p.kind for p in suite.test}),
                "greedy": greedy, "sampling": {"temperature": verifier.temperature, "top_p": verifier.top_p,
                                               "top_k": verifier.top_k},
                "timing": "interleaved per prompt (every row on prompt i before any on prompt i + 1, order rotated), "
                          "after a warm-up; per prompt the median of the repeats; tokens/s = tokens / summed seconds"})
    return out


def _arith(rows, tuning, references, settings) -> dict:
    from specdiff.drafters import registry

    kinds = list(references)
    first = bench_rows.spec(kinds[0]).name
    ar_drafter = bench_rows.spec(next(spec.name for spec in registry.specs() if spec.can_verify)).name  # the AR kind's
    legacy = {first: "spec", bench_rows.spec(kinds[0], adaptive=True).name: "spec_adaptive",  # the headline's old keys
              **{bench_rows.spec(kinds[0], batch=n).name: f"spec_batch{n}" for n in settings.batch_sizes}}
    named = {legacy.get(name, name): row for name, row in rows.items()}
    median = {name: row["tokens_per_s"] for name, row in named.items()}
    cpu = {name: row["tokens_per_cpu_s"] for name, row in named.items()}
    accuracy = {name: row.get("accuracy") for name, row in named.items()}
    ar_baseline = PLAIN if median[PLAIN] >= median[HF] else HF
    base, base_cpu = median[ar_baseline], max(cpu[PLAIN], cpu[HF])
    spec = named["spec"]
    n = spec["prompts"]
    out = {"speedup_vs_ar": median["spec"] / base,
           "speedup_vs_hf_assisted": median["spec"] / median["hf_assisted"] if "hf_assisted" in median else None,
           "speedup_ar_drafter_vs_ar": median[ar_drafter] / base if ar_drafter in median else None,
           "batch8_vs_batch1": median["spec_batch8"] / median["spec"] if "spec_batch8" in median else None,
           "accuracy_ar": accuracy["ar"], "accuracy_spec": accuracy["spec"],
           "accuracy_stderr": (accuracy["ar"] * (1 - accuracy["ar"]) / n) ** 0.5,
           "mean_accepted": spec["mean_accepted"], "tokens_per_round": spec["tokens_per_round"], "exact": spec["exact"],
           "best_config": spec["config"], "best_ar_drafter_block": (named.get(ar_drafter) or {}).get("config", {}).get("block_size"),
           "tokens_per_s": median, "tokens_per_cpu_s": cpu,
           "cpu_time_ratios": {"speedup_vs_ar": cpu["spec"] / base_cpu,
                               "speedup_vs_hf_assisted": cpu["spec"] / cpu["hf_assisted"] if "hf_assisted" in cpu else None,
                               "speedup_ar_drafter_vs_ar": cpu[ar_drafter] / base_cpu if ar_drafter in cpu else None,
                               "note": "tokens per CPU second of the process: insensitive to waiting for a core on a "
                                       "shared machine; the wall-clock ratios above are the headline"},
           "accuracy": accuracy, "ar_baseline": ar_baseline,
           "profile": {**{key: spec.get(key) for key in ("draft_ms", "verify_ms", "accept_ms", "overhead_ms")},
                       "ar_ms_per_token": 1000 / median["ar"],
                       "note": "per round of `spec`: draft_ms drafting, verify_ms the verifier's forward, overhead_ms "
                               "everything else (accept_ms of it is the acceptance rule)"},
           "tuning_grid": [row for row in tuning["grid"] if row["row"] == first],
           "problems": n, "tune_problems": tuning.get("prompts")}
    if "spec_adaptive" in named:
        adaptive = named["spec_adaptive"]
        out.update({"speedup_adaptive_vs_ar": median["spec_adaptive"] / base,
                    "speedup_adaptive_vs_fixed": median["spec_adaptive"] / median["spec"],
                    "accuracy_adaptive": accuracy["spec_adaptive"], "exact_adaptive": adaptive["exact"],
                    "controller": adaptive["config"]["controller"], "adaptive_config": adaptive["config"],
                    "adaptive_per_round": _per_round(adaptive), "fixed_per_round": _per_round(spec),
                    "adaptive_cpu_time_ratios": {"speedup_adaptive_vs_ar": cpu["spec_adaptive"] / base_cpu,
                                                 "speedup_adaptive_vs_fixed": cpu["spec_adaptive"] / cpu["spec"]},
                    "adaptive_tuning_grid": [row for row in tuning["grid"]
                                             if row["row"] == bench_rows.spec(kinds[0], adaptive=True).name]})
    out["kinds"] = {kind: _kind(rows, tuning, kind, kind == kinds[0], base) for kind in kinds}
    return out


def _kind(rows: dict, tuning: dict, kind: str, headline: bool, base: float) -> dict:
    name, adaptive_name = bench_rows.spec(kind).name, bench_rows.spec(kind, adaptive=True).name
    row = rows[name]
    out = {"speedup_vs_ar": row["tokens_per_s"] / base, "tokens_per_round": row["tokens_per_round"],
           "accuracy": row.get("accuracy"), "exact": row["exact"], "tokens_per_s": row["tokens_per_s"],
           "config": row["config"], "method": "spec" if headline else name,
           "tuning_grid": None if headline else [r for r in tuning["grid"] if r["row"] == name], **_per_round(row)}
    adaptive = rows.get(adaptive_name)
    if adaptive is not None:
        out["adaptive"] = {"speedup_vs_ar": adaptive["tokens_per_s"] / base,
                           "speedup_vs_fixed": adaptive["tokens_per_s"] / row["tokens_per_s"],
                           "config": adaptive["config"], "controller": adaptive["config"]["controller"],
                           "accuracy": adaptive.get("accuracy"), "exact": adaptive["exact"],
                           "tuning_grid": [r for r in tuning["grid"] if r["row"] == adaptive_name],
                           **_per_round(adaptive)}
    return out


def _per_round(row: dict) -> dict:
    return {key: row.get(key) for key in PER_ROUND}
