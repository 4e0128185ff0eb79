"""Tokens per round of a distilled drafter (a training run's checkpoint.pt or a finished folder) on the bench's
validation prompts, greedy and lossless: a quick check while `specdiff distill` trains (not a benchmark).

    python scripts/distill_probe.py runs/distill/dflash --prompts 10 --block 15 [--threads 1]
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch


def drafter_from(folder: Path, verifier):
    from specdiff import models
    from specdiff.zoo import distilled
    from specdiff.zoo_tools import distill_train

    if (folder / "config.json").is_file():
        return models.wrap_distilled(distilled.build(folder, verifier.model), verifier)
    state = torch.load(folder / "checkpoint.pt", weights_only=False)
    kind = state["kind"]
    settings = state.get("settings") or dict(distill_train.DEFAULTS[kind])  # the run's own settings
    model = distill_train._build(kind, verifier.model, settings)
    model.load_state_dict(state["model"], strict=False)
    d2t = torch.tensor(state["d2t"]) if kind == "dflash" else None
    model_config = model.config.to_dict()
    model_config.update(specdiff_role=f"distilled-{kind}")
    return models.wrap_distilled((model.eval(), model_config, d2t), verifier), state["step"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("folder")
    parser.add_argument("--verifier", default="smollm2-135m-instruct")
    parser.add_argument("--prompts", type=int, default=10)
    parser.add_argument("--block", type=int, default=15)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    import specdiff as sd
    from specdiff import models
    from specdiff.runs.real_bench import validation_prompts

    verifier = models.load(args.verifier, temperature=0.0)
    out = drafter_from(Path(args.folder), verifier)
    drafter, step = out if isinstance(out, tuple) else (out, None)
    prompts = validation_prompts(models.load_tokenizer(args.verifier), args.prompts)
    generator = sd.SpeculativeGenerator(drafter, verifier, block_size=args.block, eos_token_id=None)
    per_kind, rounds, tokens, begin = {}, 0, 0, time.perf_counter()
    for prompt in prompts:
        result = generator.generate([prompt.ids], max_new_tokens=args.max_new_tokens)
        stats = result.stats[0]
        rounds += stats.rounds
        tokens += len(result.token_ids[0])
        kind = per_kind.setdefault(prompt.kind, [0, 0])
        kind[0] += len(result.token_ids[0])
        kind[1] += stats.rounds
    print(json.dumps({"step": step, "tokens_per_round": round(tokens / rounds, 3),
                      "per_kind": {k: round(t / r, 2) for k, (t, r) in per_kind.items()},
                      "seconds": round(time.perf_counter() - begin, 1), "prompts": len(prompts)}))


if __name__ == "__main__":
    main()
