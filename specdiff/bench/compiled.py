"""The compiled rows of `bench speedup` (`--compile`, issue 53), measured beside the eager ones in the same run:

- `ar_compiled`: plain decoding through the compiled verifier (`baselines.verifier_generate`: the chunk-1 graph);
- `spec_<kind>_compiled`: each drafter's tuned row with its verifier compiled (the chunk B + 1 graph);
- `ar_batch<N>_compiled`, `spec_<kind>_batch<N>_compiled`: the batch rows, compiled.

One `CompiledVerifier` per (block size, batch): rows that share one share its graphs. Each is reserved, before
anything runs, for the longest measured prompt plus max_new_tokens and a chunk, so the timer's warm-up call
compiles (or loads from the inductor cache) the graphs the timed calls use; their seconds are in the row's config
as `compile_s`. Draft trees and the effort and leniency rows stay eager.
"""
from __future__ import annotations

from specdiff.bench.methods import Method


def compiled_rows(configs: dict, verifier, cache, prompts: list, settings) -> dict[str, Method]:
    """{row name: Method} for `ar_compiled`, the batch rows' plain decoding, and every `spec_<kind>` and
    `spec_<kind>_batch<N>` of configs (name -> RunConfig), compiled."""
    longest = max(len(prompt.ids) for prompt in prompts) + settings.max_new_tokens
    verifiers = {}

    def compiled_verifier(block: int, batch: int):
        if (block, batch) not in verifiers:
            from specdiff.engine.compiled import CompiledVerifier

            verifiers[block, batch] = CompiledVerifier.of(verifier)
            verifiers[block, batch].reserve(longest + block + 1, batch)  # a last, partial batch: the same graph
        return verifiers[block, batch]

    rows = {"ar_compiled": _plain(compiled_verifier(0, 1), "ar_compiled", 1)}
    rows.update({f"ar_batch{n}_compiled": _plain(compiled_verifier(0, n), f"ar_batch{n}_compiled", n)
                 for n in settings.batch_sizes})
    for name, config in configs.items():
        if name.startswith("spec_") and config.tree_budget is None and config.rule == "lossless" and " " not in name:
            batch = int(config.batch_size or 1)
            rows[f"{name}_compiled"] = _speculative(config, cache, compiled_verifier(int(config.block_size), batch))
    return rows


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


def _speculative(config, cache, verifier) -> Method:
    import copy

    import torch

    from specdiff.runs import build_generator

    config = copy.copy(config)
    config.name = f"{config.name}_compiled"
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
                 "verify_s": out.summary.verify_s * share, "prefill_s": out.summary.prefill_s * share} for ids, stats in zip(out.token_ids, out.stats)]

    return Method(config.name, generator.exact, call, config.batch_size,
                  {**config.as_dict(), "compiled": True, "compile_s": verifier.compile_s})
