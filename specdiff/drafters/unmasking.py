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
"""
from __future__ import annotations

import torch

from specdiff.lm.sampling import check_finite, sample_rows, sampling_probs

ORDERS = ("entropy", "confidence", "margin", "random", "left_to_right")


def unmask_canvas(step_logits, canvas: torch.Tensor, mask_token_id: int, steps: int, threshold: float | None,
                  order: str, temperature: float, top_p: float, top_k: int,
                  generator: torch.Generator | None = None,
                  vocab_size: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Masked diffusion sampling of a canvas [b, B] (all masks) in `steps` steps or by threshold.

    step_logits: canvas [b, B] -> logits [b, B, V] of every canvas position. Returns (tokens [b, B],
    probs [b, B, V]): probs[r, i] is the filtered distribution token i was sampled from at the step it
    was unmasked. vocab_size, if given, keeps only the first vocab_size logits (`drafters.vocab`)."""
    batch, block = canvas.shape
    still_masked = torch.ones(batch, block, dtype=torch.bool, device=canvas.device)  # [b, B]
    probs_out = None
    counts = None if threshold is not None else positions_per_step(block, steps)
    step = 0
    while probs_out is None or bool(still_masked.any()):
        logits = step_logits(canvas).float()  # [b, B, V]
        check_finite(logits, "drafter")
        logits = logits[..., :vocab_size] if vocab_size else logits  # drop rows the verifier lacks (drafters.vocab)
        if mask_token_id < logits.shape[-1]:
            logits[..., mask_token_id] = float("-inf")  # never propose the mask token
        probs = sampling_probs(logits, temperature, top_p, top_k)  # [b, B, V]
        sampled = sample_rows(probs, generator)  # [b, B]
        score = order_score(order, logits, sampled, generator).masked_fill(~still_masked, float("-inf"))
        if threshold is None:
            chosen = score.topk(counts[step], dim=-1).indices  # [b, k]
            unmask = torch.zeros_like(still_masked).scatter_(1, chosen, True)
        else:
            confident = probs.gather(-1, sampled[..., None]).squeeze(-1) > threshold  # [b, B]
            best = score.argmax(-1, keepdim=True)  # [b, 1]: at least one position per step
            unmask = confident | torch.zeros_like(still_masked).scatter_(1, best, True)
        unmask &= still_masked
        canvas = torch.where(unmask, sampled, canvas)
        probs_out = probs if probs_out is None else torch.where(unmask[..., None], probs, probs_out)
        still_masked &= ~unmask
        step += 1
    return canvas, probs_out


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
