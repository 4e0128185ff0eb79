"""Unmasking orders and the masked-diffusion sampling loop shared by the masked (Dream, LLaDA) and
block (SDAR) drafters.

A canvas of B mask tokens is unmasked in K steps, or by a confidence threshold tau (Fast-dLLM's
parallel decoding, SDAR's "dynamic low-confidence remasking": every position whose sampled token has
probability above tau, and at least the best one, per step). Each step samples every masked position
and keeps those the order ranks first:
- "entropy": lowest entropy first (Dream's default); "confidence": highest probability of the sampled
  token (LLaDA's low-confidence remasking, SDAR); "margin": largest gap between the two most likely
  tokens; "random"; "left_to_right": strictly left to right (keeps marginal verification exact).
The distribution a position was sampled from at the step it was unmasked is its q (the first paper's
Section 3.2 and Proposition 2).

A drafter with a reduced draft vocabulary (`DraftIndex`: d2t, `specdiff.drafters.base`) samples among its V_d
rows (q is 0 elsewhere, so the law is the same as over the verifier's V with -inf outside), writes verifier
ids into the canvas, and returns q over the verifier's vocabulary: the per-step work is V_d- not V-sized.
"""
from __future__ import annotations

from typing import NamedTuple

import torch

from specdiff.lm.sampling import check_finite, sample_rows, sampling_probs

ORDERS = ("entropy", "confidence", "margin", "random", "left_to_right")


class DraftIndex(NamedTuple):
    """A reduced draft vocabulary: row i of the drafter's output is verifier id draft_to_target[i]."""

    draft_to_target: torch.Tensor  # [V_d] long, distinct verifier ids
    target_vocab: int  # V, the verifier's vocabulary size
    mask_row: int | None = None  # the row of the mask token, when the index holds it (never proposed)


def unmask_canvas(step_logits, canvas: torch.Tensor, mask_token_id: int, steps: int, threshold: float | None,
                  order: str, temperature: float, top_p: float, top_k: int,
                  generator: torch.Generator | None = None,
                  vocab_size: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Masked diffusion sampling of a canvas [b, B] (all masks) in `steps` steps or by threshold.

    step_logits: canvas [b, B] -> logits [b, B, V] of every canvas position. Returns (tokens [b, B],
    probs [b, B, V]): probs[r, i] is the filtered distribution token i was sampled from at the step it
    was unmasked. vocab_size, if given, keeps only the first vocab_size logits (`drafters.vocab`); a
    `DraftIndex` (a reduced draft vocabulary) samples among its rows (module docstring)."""
    batch, block = canvas.shape
    still_masked = torch.ones(batch, block, dtype=torch.bool, device=canvas.device)  # [b, B]
    probs_out = None
    counts = None if threshold is not None else positions_per_step(block, steps)
    step = 0
    while probs_out is None or bool(still_masked.any()):
        logits = step_logits(canvas).float()  # [b, B, V] (V_d with a draft index)
        check_finite(logits, "drafter")
        logits = _fit(logits, vocab_size, mask_token_id)  # never the mask token; only rows the verifier has
        probs = sampling_probs(logits, temperature, top_p, top_k)  # [b, B, V]
        sampled = sample_rows(probs, generator)  # [b, B] rows of the logits
        score = order_score(order, logits, sampled, generator).masked_fill(~still_masked, float("-inf"))
        drawn = probs.gather(-1, sampled[..., None]).squeeze(-1)  # [b, B]: q of the sampled token
        sampled = _ids(sampled, vocab_size)  # verifier ids
        if threshold is None:
            chosen = score.topk(counts[step], dim=-1).indices  # [b, k]
            unmask = torch.zeros_like(still_masked).scatter_(1, chosen, True)
        else:
            confident = drawn > threshold  # [b, B]
            best = score.argmax(-1, keepdim=True)  # [b, 1]: at least one position per step
            unmask = confident | torch.zeros_like(still_masked).scatter_(1, best, True)
        unmask &= still_masked
        canvas = torch.where(unmask, sampled, canvas)
        probs_out = probs if probs_out is None else torch.where(unmask[..., None], probs, probs_out)
        still_masked &= ~unmask
        step += 1
    return canvas, _target_probs(probs_out, vocab_size)


def order_score(order: str, logits: torch.Tensor, sampled: torch.Tensor, generator) -> torch.Tensor:
    """Higher first. logits [b, B, V] (the mask token at -inf), sampled [b, B]."""
    batch, block = sampled.shape
    if order == "left_to_right":
        return -torch.arange(block, dtype=torch.float, device=sampled.device)[None, :].expand(batch, block)
    if order == "random":
        return torch.rand(batch, block, generator=generator, device=sampled.device)
    plain = torch.softmax(logits, dim=-1)  # [b, B, V]
    if order == "entropy":
        return (plain * torch.log(plain.clamp_min(1e-12))).sum(-1)  # -entropy
    if order == "confidence":
        return plain.gather(-1, sampled[..., None]).squeeze(-1)
    top2 = plain.topk(2, dim=-1).values  # margin
    return top2[..., 0] - top2[..., 1]


def positions_per_step(num_masked: int, steps: int) -> list[int]:
    """How many positions to unmask at each of `steps` steps (nearly equal, summing to num_masked)."""
    steps = max(1, min(steps, num_masked))
    base, extra = divmod(num_masked, steps)
    return [base + (1 if i < extra else 0) for i in range(steps)]


def unmask_planned(step_logits, canvas: torch.Tensor, mask_token_id: int, block_sizes: torch.Tensor,
                   steps: list[int], floors: torch.Tensor | None, threshold: float | None, order: str,
                   temperature: float, top_p: float, top_k: int, generator: torch.Generator | None = None,
                   vocab_size: int | None = None, finish: torch.Tensor | None = None):
    """`unmask_canvas` after a controller's plan (`specdiff.engine.controllers`), row by row.

    canvas [b, W] (all masks), W = max B_r. Row r unmasks its first block_sizes[r] positions in steps[r]
    steps (or by `threshold`): at each step the ceil(masked / steps left) first in the order and, with
    `finish` [b], also every position whose confidence is at least finish[r]. It stops early once its
    unmasked prefix (the positions unmasked from the left without a gap) holds a token whose confidence
    (the largest probability of the untempered output, at the step it was sampled) is below floors[r]:
    its draft then ends with that token. Confidence is read before a token is drawn, so neither the
    finish nor the stop depends on a drawn token. Denoising ends when every row has stopped or unmasked
    its whole plan.

    Returns (tokens [b, W], probs [b, W, V], lengths [b], confidence [b, W]): row r's draft is
    tokens[r, :lengths[r]], each with the q it was sampled from and its confidence when sampled; the
    positions past a row's length hold mask tokens and a valid q (never verified)."""
    width = canvas.shape[1]
    columns = torch.arange(width, device=canvas.device)[None, :]
    still_masked = columns < block_sizes[:, None]  # [b, W]: positions row r still has to unmask
    lengths = block_sizes.clone()  # [b]
    steps_left = torch.tensor(steps, device=canvas.device)  # [b]: K_r
    probs_out = confidence = None
    step = 0
    while True:
        logits = step_logits(canvas).float()  # [b, W, V] (V_d with a draft index)
        check_finite(logits, "drafter")
        logits = _fit(logits, vocab_size, mask_token_id)
        probs = sampling_probs(logits, temperature, top_p, top_k)  # [b, W, V]
        sampled = sample_rows(probs, generator)  # [b, W] rows of the logits
        top = torch.softmax(logits, dim=-1).amax(-1)  # [b, W]: confidence, from the logits only
        score = order_score(order, logits, sampled, generator).masked_fill(~still_masked, float("-inf"))
        drawn = probs.gather(-1, sampled[..., None]).squeeze(-1)  # [b, W]: q of the sampled token
        sampled = _ids(sampled, vocab_size)  # verifier ids
        if threshold is None:
            rank = score.argsort(dim=-1, descending=True).argsort(dim=-1)  # [b, W]: 0 = first in the order
            left = (steps_left - step).clamp(min=1)  # [b]
            due = (still_masked.sum(-1) + left - 1) // left  # [b]: ceil(masked / steps left)
            unmask = rank < due[:, None]
            if finish is not None:  # and every position the drafter is already sure of
                unmask |= top >= finish[:, None]
        else:
            confident = drawn > threshold  # [b, W]
            best = score.argmax(-1, keepdim=True)
            unmask = confident | torch.zeros_like(still_masked).scatter_(1, best, True)
        unmask &= still_masked
        canvas = torch.where(unmask, sampled, canvas)
        probs_out = probs if probs_out is None else torch.where(unmask[..., None], probs, probs_out)
        confidence = top if confidence is None else torch.where(unmask, top, confidence)
        still_masked &= ~unmask
        step += 1
        pending = still_masked.any(-1)  # [b]
        if floors is not None:
            drafted = columns < lengths[:, None]  # [b, W]: in the plan (and not cut yet)
            prefix = (drafted & ~still_masked).int().cumprod(-1).bool()  # [b, W]: the unmasked prefix
            unsure = prefix & (confidence < floors[:, None])  # [b, W]
            cut = unsure.any(-1) & (unsure.int().argmax(-1) + 1 < lengths)  # [b]: an unsure token before the end
            if bool(cut.any()):
                lengths = torch.where(cut, unsure.int().argmax(-1) + 1, lengths)  # the draft ends with it
                still_masked &= columns < lengths[:, None]
                pending = still_masked.any(-1)
        if not bool(pending.any()):
            return canvas, _target_probs(probs_out, vocab_size), lengths, confidence


def _fit(logits: torch.Tensor, vocab, mask_token_id: int) -> torch.Tensor:
    """logits [..., V_model] -> the rows sampled from, the mask token's at -inf: with a `DraftIndex` the draft
    vocabulary's own rows, else the first `vocab` rows (the verifier's ids; None: all)."""
    if isinstance(vocab, DraftIndex):
        if vocab.mask_row is not None:
            logits[..., vocab.mask_row] = float("-inf")
        return logits
    logits = logits[..., :vocab] if vocab else logits
    if mask_token_id < logits.shape[-1]:
        logits[..., mask_token_id] = float("-inf")  # never propose the mask token
    return logits


def _ids(rows: torch.Tensor, vocab) -> torch.Tensor:
    """Sampled rows of the logits -> verifier ids."""
    return vocab.draft_to_target.to(rows.device)[rows] if isinstance(vocab, DraftIndex) else rows


def _target_probs(probs: torch.Tensor, vocab) -> torch.Tensor:
    """q [..., V_d] -> [..., V] over the verifier's ids (0 outside the draft vocabulary)."""
    if not isinstance(vocab, DraftIndex):
        return probs
    full = probs.new_zeros((*probs.shape[:-1], int(vocab.target_vocab)))
    return full.index_copy_(-1, vocab.draft_to_target.to(probs.device), probs)
