"""Routing glue: the cheap request features a router reads (`specdiff.eval.routing`), and a router
file applied to requests (`specdiff generate --router FILE`: `generate_routed`).

Features of one prompt, each from one forward:
- prompt_tokens: its length in the verifier's tokens;
- prefill_entropy: the entropy (nats) of the verifier's next-token distribution after the prompt, at
  temperature 1 (the prefill every request pays anyway);
- first_block_confidence: the mean confidence (largest untempered probability) of the drafter's first
  block of `block` tokens, drafted in one step.
"""
from __future__ import annotations

import json
from pathlib import Path

ROUTER_VERSION = 1


def request_features(prompts: list[str], cache, verifier: str, drafter: str, block: int = 8):
    """prompts -> features [n, 3] (`specdiff.eval.routing.FEATURES`), one prompt at a time."""
    import numpy as np
    import torch

    from specdiff.engine.controllers import RoundPlan

    tokenizer = cache.tokenizer(verifier)
    target = cache.verifier(verifier)
    spec = cache.ref(drafter).spec
    draft_model = cache.drafter(drafter, verifier=target, **({"steps": 1} if "steps" in spec.effort else {}))
    if draft_model.verifier_hidden_layers is not None:
        raise ValueError(f"route features need a drafter that drafts from the tokens alone; {drafter} reads the "
                         "verifier's hidden states: fit the router on a sweep of a masked, block or AR drafter")
    rows = []
    with torch.inference_mode():
        for prompt in prompts:
            ids = torch.tensor([tokenizer(prompt).input_ids], device=target.device)
            mask = torch.ones_like(ids, dtype=torch.bool)
            logits = target.model(input_ids=ids, logits_to_keep=1).logits[0, -1].float()  # [V]
            entropy = float(-(logits.softmax(-1) * logits.log_softmax(-1)).sum())
            draft_model.start(ids, mask)
            draft = draft_model.propose_planned(ids, mask, RoundPlan([block]))
            confidence = draft.confidence if draft.confidence is not None else draft.probs.amax(-1)
            rows.append([ids.shape[1], entropy, float(confidence[0, : int(draft.lengths[0])].mean())])
    return np.asarray(rows, dtype=float)


def save_router(path: str | Path, router: dict) -> None:
    Path(path).write_text(json.dumps({"version": ROUTER_VERSION, **router}, indent=1))


def load_router(path: str | Path) -> dict:
    """A router file written by `specdiff route fit`; ValueError naming what is wrong otherwise."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"--router {str(path)!r} does not exist")
    try:
        router = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"--router {str(path)!r} is not JSON ({error})") from None
    needed = ("version", "thresholds", "cells", "default", "configurations", "feature_models")
    if not isinstance(router, dict) or any(key not in router for key in needed):
        raise ValueError(f"--router {str(path)!r} is not a router file of `specdiff route fit` (needs {needed})")
    if router["version"] != ROUTER_VERSION:
        raise ValueError(f"--router {str(path)!r} has version {router['version']}; this specdiff reads {ROUTER_VERSION}")
    return router


def routed_configs(router: dict, prompts: list[str], cache) -> list:
    """The RunConfig of each prompt under a router: its features' cell's configuration."""
    from specdiff.eval.routing import route
    from specdiff.runs.config import RunConfig

    models = router["feature_models"]
    features = request_features(prompts, cache, models["verifier"], models["drafter"], models["block"])
    configurations = router["configurations"]
    return [RunConfig(name=configurations[i]["name"], **configurations[i]["params"]) for i in route(router, features)]


def generate_routed(router_path: str, prompts: list, cache, max_new_tokens: int, seed: int):
    """Each prompt generated under the configuration of its features' cell in the router file; prompts
    sharing a configuration run together. Returns (the JSON result of `specdiff generate --router`, a
    summary over all prompts)."""
    import torch

    from specdiff.engine.stats import summarize
    from specdiff.runs import build_generator

    router = load_router(router_path)
    configs = routed_configs(router, prompts, cache)
    generations, stats, totals = [None] * len(prompts), [None] * len(prompts), dict.fromkeys(
        ("wall_s", "draft_s", "verify_s", "forward_s"), 0.0)
    exact = True
    for name in dict.fromkeys(c.name for c in configs):
        rows = [i for i, c in enumerate(configs) if c.name == name]
        generator = build_generator(configs[rows[0]], cache)
        out = generator.generate([prompts[i] for i in rows], max_new_tokens=max_new_tokens,
                                 generator=torch.Generator(device=generator.verifier.device).manual_seed(seed))
        exact = exact and generator.exact
        for key in totals:
            totals[key] += getattr(out.summary, key)
        for i, text, ids, s in zip(rows, out.texts, out.token_ids, out.stats):
            generations[i] = {"prompt": prompts[i], "text": text, "token_ids": ids, "stats": s.as_dict(),
                              "config": configs[i].as_dict()}
            stats[i] = s
    summary = summarize(stats, **totals)
    return {"router": router_path, "exact": exact, "summary": summary.as_dict(), "generations": generations}, summary
