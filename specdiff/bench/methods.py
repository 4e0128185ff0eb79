"""Methods: the rows a bench measures, each one interface.

Terms:
- Method: `name`, `exact` (whether its output follows the verifier's law: lossless rule and an exact proposal),
  `batch` (prompts per call), `config` (what it runs, as a dict, for the report) and `call(prompts,
  max_new_tokens, seed) -> [record per prompt]`; a record holds `ids` (the generated ids), `rounds` (verifier
  forwards after the prefill), `accepted` (drafted tokens accepted) and, for speculative rows, `draft_s`,
  `forward_s` and `verify_s` (seconds drafting, in the verifier's forward, and verifying);
- `speculative`: a specdiff configuration (`runs.RunConfig`); a marginal proposal that would not be exact is
  verified as a point mass instead, so every lossless specdiff row is exact;
- `plain`: specdiff's cached autoregressive decoding of the verifier (`ar`, the plain-decoding row);
- `hf`: transformers' generate: plain (`hf`), with an assistant model (`hf_assisted`) or prompt lookup
  (`hf_lookup`); its rounds are the verifier's forwards (counted by a hook).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass
class Method:
    name: str
    exact: bool
    call: Callable[[list, int, int], list[dict]]
    batch: int = 1
    config: dict | None = None


def speculative(config, cache) -> Method:
    """A specdiff row: the configuration's SpeculativeGenerator, built once."""
    import torch

    from specdiff.runs import build_generator

    generator = build_generator(config, cache)
    if not generator.exact and config.proposal == "marginal" and generator.rule.lossless:
        config.proposal = "point_mass"
        generator = build_generator(config, cache)
    generator.tokenizer = None  # ids only: rows are compared and scored on ids

    def call(prompts, max_new_tokens: int, seed: int) -> list[dict]:
        draws = torch.Generator(device=generator.verifier.device).manual_seed(seed)
        out = generator.generate([p.ids for p in prompts], max_new_tokens=max_new_tokens, generator=draws)
        share = 1 / len(prompts)
        return [{"ids": ids, "rounds": stats.rounds, "accepted": sum(stats.accepted),
                 "draft_s": out.summary.draft_s * share, "forward_s": out.summary.forward_s * share,
                 "verify_s": out.summary.verify_s * share, "prefill_s": out.summary.prefill_s * share} for ids, stats in zip(out.token_ids, out.stats)]
    return Method(config.name, generator.exact, call, config.batch_size, config.as_dict())


def plain(verifier, name: str = "ar", batch: int = 1) -> Method:
    """specdiff's plain cached decoding of the verifier: one token per forward, nothing accepted; `batch` prompts
    per call (left-padded)."""
    import torch

    from specdiff.engine.baselines import autoregressive_generate
    from specdiff.engine.generate import eos_token_ids

    eos = eos_token_ids(verifier.model, None)

    def call(prompts, max_new_tokens: int, seed: int) -> list[dict]:
        draws = torch.Generator(device=verifier.device).manual_seed(seed)
        ids, _ = autoregressive_generate(verifier.model, [p.ids for p in prompts], max_new_tokens, eos,
                                         verifier.temperature, verifier.top_p, verifier.top_k, draws,
                                         pad_token_id=verifier.model.config.pad_token_id or 0)
        return [{"ids": row, "rounds": len(row), "accepted": 0} for row in ids]
    return Method(name, True, call, batch, config={"name": name, "drafter": None, "batch_size": batch})


def hf(verifier, name: str = "hf", assistant_model=None, prompt_lookup_num_tokens: int | None = None,
       config: dict | None = None) -> Method:
    """transformers' generate at the verifier's sampling settings (its own decoding of the verifier: exact)."""
    from specdiff.engine.baselines import hf_generate
    from specdiff.engine.generate import eos_token_ids
    from specdiff.lm.counting import count_forwards

    eos = eos_token_ids(verifier.model, None)

    def call(prompts, max_new_tokens: int, seed: int) -> list[dict]:
        out = []
        for prompt in prompts:
            with count_forwards(verifier.model) as calls:
                ids, _ = hf_generate(verifier.model, [prompt.ids], max_new_tokens, eos, verifier.temperature,
                                     verifier.top_p, verifier.top_k, assistant_model=assistant_model, seed=seed,
                                     prompt_lookup_num_tokens=prompt_lookup_num_tokens)
            rounds = max(calls.forwards, 1)
            out.append({"ids": ids[0], "rounds": rounds, "accepted": max(len(ids[0]) - rounds, 0)})
        return out
    return Method(name, True, call, config=config or {"name": name})
