"""Soft targets for distillation (`specdiff distill --target-loss`): the distilled drafters' losses against the
frozen verifier's own next-token distribution instead of (or beside) the token it sampled. One helper, shared by
`dflash`, `next_token` and `masked_diffusion` when their batch sets `target` (default "ce": their own hard
cross-entropy, unchanged) and carries `teacher`, a function (rows [n], columns [n]) -> p [n, V_q]
(`training.data.cached_teacher`: the verifier's output at column c of row r, its distribution of token c + 1).

Terms, per trained position n (weight w_n):
- q = softmax(logits_q) [V_q]: the drafter's distribution over its head's rows (the draft vocabulary d2t, or the
  verifier's full vocabulary); q = 0 outside them;
- p [V_q]: the verifier's probabilities of those rows, softmax over its full vocabulary V (temperature 1);
  m = 1 - sum_i p_i, the verifier's mass outside the draft vocabulary (0 for a full-vocabulary head);
- x: the data's token there as a row of q (-100 outside the draft vocabulary: no cross-entropy term).

    ce:    L = sum_n w_n CE(q_n, x_n) / sum_n w_n            (over positions with x_n a row of q)
    kl:    L = sum_n w_n KL(p~_n || q_n) / sum_n w_n,       p~ = p / (1 - m)
    ce_tv: L = 0.1 ce + 0.9 sum_n w_n TV_n / sum_n w_n,     TV = 0.5 sum_i |p_i - q_i| + 0.5 m

KL over the draft vocabulary: p is renormalised on it (p~), since q is 0 outside and KL(p || q) would be
infinite; the mass outside is not trained by KL (the drafter cannot place any there). TV counts it as it is:
where q = 0, |p - q| = p, so the rows outside add 0.5 m, a constant the gradient does not see. ce_tv is DSpark's
recipe (rasyosef/train-dspark-draft-models). p is the teacher's, never differentiated (detached here too).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

TARGETS = ("ce", "kl", "ce_tv")
CE_SHARE = 0.1  # ce_tv: L = CE_SHARE * ce + (1 - CE_SHARE) * tv


def soft_loss(logits_q: torch.Tensor, p: torch.Tensor | None, target: str, tokens: torch.Tensor | None = None,
              weights: torch.Tensor | None = None) -> torch.Tensor:
    """The module docstring's loss. logits_q [n, V_q] (the drafter's, differentiated); p [n, V_q] the verifier's
    probabilities of the same rows (None for "ce"); tokens [n] the data's rows (-100: none; needed by "ce" and
    "ce_tv"); weights [n] (default 1)."""
    if target not in TARGETS:
        raise ValueError(f"unknown distillation target {target!r}; choose from {', '.join(TARGETS)}")
    logits_q = logits_q.float()
    weights = torch.ones(len(logits_q)) if weights is None else weights.float()  # [n]
    if target == "kl":
        return _mean(kl_divergence(p, logits_q), weights)
    ce = _cross_entropy(logits_q, tokens, weights)
    if target == "ce":
        return ce
    return CE_SHARE * ce + (1 - CE_SHARE) * _mean(total_variation(p, logits_q), weights)


def kl_divergence(p: torch.Tensor, logits_q: torch.Tensor) -> torch.Tensor:
    """[n]: KL(p~ || q), p~ = p renormalised on q's rows (p [n, V_q], logits_q [n, V_q])."""
    p = p.detach().float()
    p = p / p.sum(-1, keepdim=True).clamp(min=torch.finfo(torch.float32).tiny)  # [n, V_q]
    log_q = F.log_softmax(logits_q.float(), dim=-1)  # [n, V_q]
    return (torch.xlogy(p, p) - p * log_q).sum(-1)  # 0 log 0 = 0


def total_variation(p: torch.Tensor, logits_q: torch.Tensor) -> torch.Tensor:
    """[n]: 0.5 sum_i |p_i - q_i| + 0.5 m, m = 1 - sum_i p_i the mass of p outside q's rows."""
    p = p.detach().float()
    q = F.softmax(logits_q.float(), dim=-1)  # [n, V_q]
    outside = (1 - p.sum(-1)).clamp(min=0)  # [n]
    return 0.5 * (p - q).abs().sum(-1) + 0.5 * outside


def _cross_entropy(logits_q: torch.Tensor, tokens: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Weighted mean cross-entropy over the positions whose token is a row of q."""
    ce = F.cross_entropy(logits_q, tokens, ignore_index=-100, reduction="none")  # [n], 0 where ignored
    return _mean(ce, weights * (tokens >= 0))


def _mean(losses: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    return (losses * weights).sum() / weights.sum().clamp(min=torch.finfo(torch.float32).tiny)
