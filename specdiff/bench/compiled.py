"""The compiled rows of `bench speedup` (`--compile`, issue 53), measured beside the eager ones in the same run:

- `ar_compiled`: plain decoding through the compiled verifier (`baselines.verifier_generate`: the chunk-1 graph);
- `spec_<kind>_compiled`: each drafter's tuned row (and its adaptive row) with its verifier compiled (the chunk
  B + 1 graph);
- `ar_batch<N>_compiled`, `spec_<kind>_batch<N>_compiled`: the batch rows, compiled.

Which rows are compiled is said by the caller as `bench.rows.Row` values (the eager rows, each with its RunConfig);
a compiled row is the same Row with `compiled=True`, and its name comes from that value (nothing reads a row's
name). One `CompiledVerifier` per (block size, batch): rows that share one share its graphs. Each is reserved,
before anything runs, for the longest measured prompt plus max_new_tokens and a chunk, so the timer's warm-up call
compiles (or loads from the inductor cache) the graphs the timed calls use; their seconds are in the row's config
as `compile_s`. Draft trees and the effort and leniency rows stay eager.
"""
from __future__ import annotations

from dataclasses import replace

from specdiff.bench.methods import Method


def compiled_rows(plain: list, speculative: dict, verifier, cache, prompts: list, settings) -> dict[str, Method]:
    """{compiled row name: Method} of the plain rows `plain` ([Row]: `ar`, `ar_batch<N>`) and the speculative rows
    `speculative` ({Row: RunConfig}: the tuned, adaptive and batch rows), each compiled."""
    compiled_verifier = _compiled_verifiers(verifier, prompts, settings.max_new_tokens)
    rows = {}
    for row in plain:
        name = replace(row, compiled=True).name
        rows[name] = _plain(compiled_verifier(0, row.batch), name, row.batch)
    for row, config in speculative.items():
        name = replace(row, compiled=True).name
        rows[name] = _speculative(config, name, cache, compiled_verifier(int(config.block_size), row.batch))
    return rows


def tuning_candidates(verifier, cache, prompts: list, max_new_tokens: int):
    """The tuner's maker of compiled candidates (`bench tune` with `compile`): RunConfig -> Method, the drafter's
    rounds on a compiled copy of `verifier`, one per (B, batch) (candidates that share one share its graphs). The
    Method's config is the RunConfig's own, so that the tuning file stays a file of RunConfigs (the tuning says
    `compiled` once)."""
    compiled_verifier = _compiled_verifiers(verifier, prompts, max_new_tokens)

    def make(config) -> Method:
        method = _speculative(config, config.name, cache,
                              compiled_verifier(int(config.block_size), int(config.batch_size or 1)))
        return replace(method, config=config.as_dict())

    return make


def _compiled_verifiers(verifier, prompts: list, max_new_tokens: int):
    """(B, batch) -> the one compiled copy of `verifier` for that pair, reserved before anything runs for the longest
    prompt plus max_new_tokens and a chunk, and for the batch (a last, partial batch runs in the same slots), so the
    timer's warm-up call compiles every graph the timed calls use."""
    longest = max(len(prompt.ids) for prompt in prompts) + max_new_tokens
    verifiers = {}

    def compiled_verifier(block: int, batch: int):
        if (block, batch) not in verifiers:
            from specdiff.engine.compiled import CompiledVerifier

            verifiers[block, batch] = CompiledVerifier.of(verifier)
            verifiers[block, batch].reserve(longest + block + 1, batch)
        return verifiers[block, batch]

    return compiled_verifier


def _plain(verifier, name: str, batch: int) -> Method:
    import torch

    from specdiff.engine.baselines import verifier_generate
    from specdiff.engine.generate import eos_token_ids

    eos = eos_token_ids(verifier.model, None)

    def call(prompts, max_new_tokens: int, seed: int) -> list[dict]:
        draws = torch.Generator(device=verifier.device).manual_seed(seed)
        ids, _ = verifier_generate(verifier, [p.ids for p in prompts], max_new_tokens, eos, draws)
        return [{"ids": row, "rounds": len(row), "accepted": 0} for row in ids]

    config = {"name": name, "drafter": None, "batch_size": batch, "compiled": True, "compile_s": verifier.compile_s}
    return Method(name, True, call, batch, config)


def _speculative(config, name: str, cache, verifier) -> Method:
    import copy

    import torch

    from specdiff.runs import build_generator

    config = copy.copy(config)
    config.name = name
    generator = build_generator(config, cache)
    if not generator.exact and config.proposal == "marginal" and generator.rule.lossless:
        config.proposal = "point_mass"
        generator = build_generator(config, cache)
    generator.verifier, generator.tokenizer = verifier, None

    def call(prompts, max_new_tokens: int, seed: int) -> list[dict]:
        draws = torch.Generator(device=verifier.device).manual_seed(seed)
        out = generator.generate([p.ids for p in prompts], max_new_tokens=max_new_tokens, generator=draws)
        share = 1 / len(prompts)
        return [{"ids": ids, "rounds": stats.rounds, "accepted": sum(stats.accepted),
                 "draft_s": out.summary.draft_s * share, "forward_s": out.summary.forward_s * share,
                 "verify_s": out.summary.verify_s * share, "prefill_s": out.summary.prefill_s * share}
                for ids, stats in zip(out.token_ids, out.stats)]

    return Method(config.name, generator.exact, call, config.batch_size,
                  {**config.as_dict(), "compiled": True, "compile_s": verifier.compile_s})
