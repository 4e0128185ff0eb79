"""The run loop: one `RunConfig` (`runs.config`) run over task problems.

`build_generator` resolves the configuration's drafter and verifier names once (`specdiff.models.ModelRef`)
and assembles its SpeculativeGenerator from the models of a `ModelCache` (`specdiff.models`) and its
kind's knobs (`KindSpec.run_options`). `run_config` generates answers
for a list of prompts one problem at a time (batch 1, as latency is measured per problem) or in
batches, and returns the accuracy, throughput, latency and acceptance figures with per-problem
records.
"""
from __future__ import annotations

import statistics
import time

from specdiff.lm.counting import count_forwards
from specdiff.progress import progress as progress_bar
from specdiff.runs.config import RunConfig, config_rule
from specdiff.models import ModelCache, check_pair


def build_generator(config: RunConfig, cache: ModelCache):
    """The SpeculativeGenerator of a configuration (config.drafter must not be None): the drafter gets its
    kind's effort knobs (`KindSpec.run_options`), the verifier (DFlash reads its states) and, through the
    generator, its vocabulary fitted to the verifier's where the two tokenizers agree."""
    from specdiff.engine.generate import SpeculativeGenerator
    verifier_ref, drafter_ref = cache.ref(config.verifier, "verifier"), cache.ref(config.drafter, "drafter")
    check_pair(drafter_ref, verifier_ref)
    verifier = cache.verifier(verifier_ref, **config.sampling)
    drafter = cache.drafter(drafter_ref, verifier=verifier, **drafter_ref.spec.run_options(config))
    return SpeculativeGenerator(drafter, verifier, block_size=config.block_size,
                                rule=config_rule(config), method=config.method,
                                proposal=config.proposal, tokenizer=cache.tokenizer(verifier_ref),
                                drafter_tokenizer=cache.tokenizer(drafter_ref), batch_size=config.batch_size,
                                controller=config.controller, tree_budget=config.tree_budget)


def run_config(config: RunConfig, prompts: list[str], targets: list[str] | None, cache: ModelCache,
               max_new_tokens: int, seed: int = 0, progress: bool = False, is_correct=None) -> dict:
    """Generates an answer per prompt and measures the configuration. Returns a dict of figures
    (accuracy when targets are given), the texts, and per-problem records."""
    import torch

    device = cache.verifier(config.verifier).device  # draws happen where the models are
    generator = torch.Generator(device=device).manual_seed(seed)
    tokenizer = cache.tokenizer(config.verifier)
    chunks = [prompts[i:i + config.batch_size] for i in range(0, len(prompts), config.batch_size)]
    iterator = progress_bar(chunks, desc=config.name, unit="batch" if config.batch_size > 1 else "problem",
                            enabled=progress)
    texts, records, wall = [], [], 0.0
    rounds = accepted = drafted = new_tokens = 0
    draft_s = verify_s = forward_s = 0.0
    exact = True
    for chunk in iterator:
        if config.drafter is None:
            chunk_texts, chunk_records, seconds = _autoregressive(config, chunk, cache, tokenizer, max_new_tokens,
                                                                   generator)
            exact = True
        else:
            speculative = build_generator(config, cache)
            with count_forwards(speculative.verifier.model) as verifier_calls, \
                    count_forwards(getattr(speculative.drafter, "model", None)) as drafter_calls:
                out = speculative.generate(chunk, max_new_tokens=max_new_tokens, generator=generator)
            chunk_texts, seconds = out.texts, out.summary.wall_s
            calls = {**verifier_calls.as_dict("verifier"), **drafter_calls.as_dict("drafter"), "rows": len(chunk)}
            chunk_records = [dict(new_tokens=s.new_tokens, rounds=s.rounds, accepted=s.accepted, drafted=s.drafted,
                                  wall_s=s.wall_s,
                                  draft_s=s.draft_s, verify_s=s.verify_s, calls=calls) for s in out.stats]
            rounds += out.summary.rounds
            accepted += sum(sum(s.accepted) for s in out.stats)
            drafted += sum(sum(s.drafted) for s in out.stats)
            draft_s, verify_s = draft_s + out.summary.draft_s, verify_s + out.summary.verify_s
            forward_s += out.summary.forward_s
            exact = exact and out.summary.exact
        new_tokens += sum(r["new_tokens"] for r in chunk_records)
        texts += chunk_texts
        records += chunk_records
        wall += seconds
    totals = (dict(rounds=rounds, accepted=accepted, drafted=drafted, draft_s=draft_s, verify_s=verify_s,
                   forward_s=forward_s) if config.drafter is not None else None)
    if targets is not None:
        for record, text, target in zip(records, texts, targets):
            record["correct"] = bool(is_correct(text, target))
    result = _figures(config.name, records, wall, exact, totals)
    for record, text in zip(records, texts):
        record["text"] = text
    result["records"] = records
    return result


def _autoregressive(config: RunConfig, prompts: list[str], cache: ModelCache, tokenizer, max_new_tokens: int,
                    generator):
    """Plain cached decoding of the verifier with its own sampling settings, per batch."""
    from specdiff.engine.baselines import autoregressive_generate
    from specdiff.engine.generate import eos_token_ids

    verifier = cache.verifier(config.verifier, **config.sampling)
    rows = [tokenizer(p).input_ids for p in prompts]
    begin = time.perf_counter()
    with count_forwards(verifier.model) as verifier_calls:
        ids, seconds = autoregressive_generate(verifier.model, rows, max_new_tokens,
                                               eos_token_ids(verifier.model, None), verifier.temperature,
                                               verifier.top_p, verifier.top_k, generator,
                                               pad_token_id=verifier.model.config.pad_token_id or 0)
    wall = time.perf_counter() - begin
    texts = [tokenizer.decode(row, skip_special_tokens=True) for row in ids]
    calls = {**verifier_calls.as_dict("verifier"), "drafter_forwards": 0, "drafter_tokens": 0, "rows": len(prompts)}
    records = [dict(new_tokens=len(row), wall_s=seconds, calls=calls) for row in ids]
    return texts, records, wall


def merge_results(parts: list[dict]) -> dict:
    """One configuration's `run_config` results over several chunks of problems -> the figures of all
    of them together, as if one call had run them (without the records)."""
    records = [r for part in parts for r in part["records"]]
    totals = None
    if "rounds" in parts[0]:  # speculative: the totals behind each part's per-round figures
        totals = {"rounds": sum(part["rounds"] for part in parts),
                  "accepted": sum(sum(r["accepted"]) for r in records),
                  "drafted": sum(sum(r["drafted"]) for r in records),
                  "draft_s": sum(part["draft_ms"] * part["rounds"] for part in parts) / 1000,
                  "forward_s": sum(part["verify_ms"] * part["rounds"] for part in parts) / 1000,
                  "verify_s": sum((part["verify_ms"] + part["accept_ms"]) * part["rounds"] for part in parts) / 1000}
    out = _figures(parts[0]["config"], records, sum(part["wall_s"] for part in parts),
                   all(part["exact"] for part in parts), totals)
    out.pop("records")
    return out


def _figures(name: str, records: list[dict], wall: float, exact: bool, totals: dict | None) -> dict:
    """The figures of a run: throughput and latency from the records and the wall time; per-round figures
    from the speculative totals (rounds, accepted and drafted tokens, draft / verify / forward seconds);
    accuracy when the records are scored."""
    new_tokens = sum(r["new_tokens"] for r in records)
    result = {
        "config": name, "problems": len(records), "new_tokens": new_tokens, "wall_s": wall,
        "tokens_per_s": new_tokens / wall if wall else 0.0,
        "latency_s": statistics.mean(r["wall_s"] for r in records),
        "exact": exact,
    }
    if totals is not None:
        rounds = totals["rounds"]
        result.update(rounds=rounds, mean_accepted=totals["accepted"] / rounds if rounds else 0.0,
                      tokens_per_round=new_tokens / rounds if rounds else 0.0,
                      acceptance_rate=totals["accepted"] / totals["drafted"] if totals["drafted"] else 0.0,
                      draft_ms=1000 * totals["draft_s"] / rounds, verify_ms=1000 * totals["forward_s"] / rounds,
                      accept_ms=1000 * (totals["verify_s"] - totals["forward_s"]) / rounds,
                      overhead_ms=1000 * (wall - totals["draft_s"] - totals["forward_s"]) / rounds)
    if records and "correct" in records[0]:
        accuracy = sum(r["correct"] for r in records) / len(records)
        result.update(accuracy=accuracy, accuracy_stderr=(accuracy * (1 - accuracy) / len(records)) ** 0.5)
    result["records"] = records
    return result
