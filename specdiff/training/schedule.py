"""The learning-rate schedule of every recipe: linear warmup, then cosine decay to a floor.

    lr(s) = peak * min(1, (s + 1) / warmup) * (floor + (1 - floor) * (1 + cos(pi * p)) / 2)
    p = max(0, s - s0) / max(1, S - s0)

with S the stage's length and s0 where the decay starts. Recipe settings: `lr` (peak), `warmup`, `lr_floor`
(the testbed's 0.1, distillation's 0) and `decay_from` ("warmup": s0 = warmup, the testbed; "start": s0 = 0,
the decay overlapping the warmup, distillation). A recipe with `stages` restarts the schedule at each stage,
with the stage's own settings merged over the recipe's.
"""
from __future__ import annotations

import math


def learning_rate(recipe: dict, step: int) -> float:
    """The learning rate of optimiser step `step` (0-based) under `recipe`."""
    stage, start, end = stage_of(recipe, step)
    step, total, warmup = step - start, end - start, stage["warmup"]
    decay_from = {"warmup": warmup, "start": 0}[stage.get("decay_from", "warmup")]
    progress = max(0, step - decay_from) / max(1, total - decay_from)
    floor = stage.get("lr_floor", 0.1)
    decay = floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))
    return stage["lr"] * min(1.0, (step + 1) / warmup) * decay


def stage_of(recipe: dict, step: int) -> tuple[dict, int, int]:
    """(the stage's settings merged over the recipe, stage start, stage end) of a step. A recipe without
    `stages` is one stage of `steps` steps."""
    start = 0
    for stage in recipe.get("stages", [dict(until=recipe["steps"])]):
        if step < stage["until"]:
            return {**recipe, **stage}, start, stage["until"]
        start = stage["until"]
    return recipe, 0, recipe["steps"]
