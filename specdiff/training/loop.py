"""The one training loop of `specdiff zoo train` and `specdiff distill`.

Per step: the learning rate of the recipe's schedule (`training.schedule`), `loss = step_loss(step, generator)`,
backward, gradient clipping at `clip` (default 1.0), an AdamW step. The optimiser: AdamW with the recipe's
`weight_decay` and `betas` over the trainable parameters; with `decay_1d=False` (the testbed) one-dimensional
parameters (norms, biases) sit in a second group without weight decay.

Resumable: a checkpoint (`training.checkpoint`) every `every_steps` steps or `every_s` seconds and at the end
(or at `until`) holds the trainable weights, the optimiser, the step and the generator's state, so a run killed
and resumed ends with the same weights as one that was not, provided `step_loss` is a function of (step,
generator state) only.
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from specdiff.progress import progress as progress_bar
from specdiff.training import checkpoint as checkpoints
from specdiff.training.schedule import learning_rate


def fit(model, step_loss, recipe: dict, checkpoint: Path, *, seed: int = 0, until: int | None = None,
        resume: bool = True, every_steps: int | None = None, every_s: float | None = None, meta: dict | None = None,
        on_step=None, progress: bool = True, desc: str = "train") -> dict:
    """Trains `model` to step `recipe["steps"]` (or `until`, saved to be resumed) and returns the run's state:
    step, seconds (of training, over every session), losses (one per step) and log (what `on_step` appended).
    on_step(done, state) runs after each step (probes append records to state["log"]). meta: keys saved with
    every checkpoint (the recipe's own)."""
    total = recipe["steps"]
    optimizer = _optimizer(model, recipe)
    generator = torch.Generator().manual_seed(seed)
    state = dict(step=0, seconds=0.0, losses=[], log=[])
    saved = checkpoints.read(checkpoint) if resume else None
    if saved is not None:
        unexpected = model.load_state_dict(saved["model"], strict=False).unexpected_keys
        if unexpected:
            raise ValueError(f"{checkpoint} holds weights this model lacks: {unexpected[:4]}")
        optimizer.load_state_dict(saved["optimizer"])
        if saved["generator"] is not None:
            generator.set_state(saved["generator"])
        state = {key: saved[key] for key in state}
    stop = min(total, until or total)
    bar = progress_bar(total=total, initial=state["step"], desc=desc, unit="step", enabled=progress, leave=True,
                       mininterval=5)
    last_save = time.monotonic()
    model.train()
    while state["step"] < stop:
        begin = time.perf_counter()
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(recipe, state["step"])
        loss = step_loss(state["step"], generator)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), recipe.get("clip", 1.0))
        optimizer.step()
        state["step"] += 1
        state["seconds"] += time.perf_counter() - begin
        state["losses"].append(float(loss.detach()))
        bar.update()
        bar.set_postfix(loss=f"{np.mean(state['losses'][-50:]):.4f}")
        if on_step is not None:
            on_step(state["step"], state)
        done = state["step"]
        if (every_steps and done % every_steps == 0) or (every_s is not None and time.monotonic() - last_save > every_s) \
                or done == stop:
            checkpoints.write(checkpoint, dict(**(meta or {}), **state, model=trainable_state(model),
                                               optimizer=optimizer.state_dict(), generator=generator.get_state()))
            last_save = time.monotonic()
    bar.close()
    return state


def trainable_state(model) -> dict:
    """{name: tensor} of the parameters that train (frozen ones, e.g. a verifier's tables, are left out)."""
    names = {n for n, p in model.named_parameters() if p.requires_grad}
    return {n: v.detach().clone() for n, v in model.state_dict().items() if n in names}


def _optimizer(model, recipe: dict) -> torch.optim.AdamW:
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    decay = recipe["weight_decay"]
    if recipe.get("decay_1d", True):
        groups = [{"params": [p for _, p in trainable], "weight_decay": decay}]
    else:
        groups = [{"params": [p for _, p in trainable if p.dim() >= 2], "weight_decay": decay},
                  {"params": [p for _, p in trainable if p.dim() < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=recipe["lr"], betas=tuple(recipe["betas"]))
