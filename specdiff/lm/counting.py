"""Forward calls and tokens processed by a model, counted by a forward pre-hook: the cost of a run in
units no machine noise can move (issue 22, item 2).

    with count_forwards(verifier.model) as counts:
        generator.generate(...)
    counts.forwards, counts.tokens   # model calls; input positions processed (batch x length, pads included)

A frontier priced in calls (`specdiff frontier --cost calls`) multiplies these by per-call costs
measured once, side by side, on one machine (`specdiff.eval.call_costs`).
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass


@dataclass
class ForwardCounts:
    forwards: int = 0  # calls of the model's forward
    tokens: int = 0  # input positions over those calls: input_ids.numel() (or inputs_embeds' [b, n])

    def as_dict(self, prefix: str) -> dict:
        return {f"{prefix}_forwards": self.forwards, f"{prefix}_tokens": self.tokens}


@contextmanager
def count_forwards(*models):
    """Counts the forwards of every distinct model given (None is skipped; a model given twice is
    counted once per call). Yields the ForwardCounts, summed over them."""
    counts = ForwardCounts()

    def hook(module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None and kwargs.get("inputs_embeds") is not None:
            positions = kwargs["inputs_embeds"].shape[:-1].numel()
        else:
            positions = ids.numel() if ids is not None else 0
        counts.forwards += 1
        counts.tokens += int(positions)

    distinct = {id(model): model for model in models if model is not None}
    handles = [model.register_forward_pre_hook(hook, with_kwargs=True) for model in distinct.values()]
    try:
        yield counts
    finally:
        for handle in handles:
            handle.remove()
