"""Closed forms for one position: what each rule should accept and emit.

Used by `specdiff demo` to put theory beside measurement, and by the tests as the reference.
Inputs are single distributions p (verifier) and q (proposal), [V], or batches [..., V].
"""
from __future__ import annotations

import torch

from specdiff.acceptance import Cactus, Gated, Linear, Lossless, TVBudget, Typical, cactus_scale, row_stats


def total_variation(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """D_TV(p, q) = 1/2 sum_v |p(v) - q(v)| (Eq. 2)."""
    return 0.5 * (p - q).abs().sum(dim=-1)


def linear_lambda(rule, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """The interpolation weight lam of Linear or TVBudget at this position, [...]."""
    if isinstance(rule, Linear):
        return torch.full(p.shape[:-1], float(rule.lam), dtype=p.dtype)
    if isinstance(rule, TVBudget):
        return rule.lam(total_variation(p, q))
    if isinstance(rule, Lossless):
        return torch.zeros(p.shape[:-1], dtype=p.dtype)
    raise ValueError(f"{type(rule).__name__} has no single lam")


def acceptance_rate(rule, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Probability that a token drawn from q is accepted at this position.

    Lossless 1 - TV (Eq. 1); Linear 1 - (1 - lam) TV (Theorem 1); TVBudget 1 - max(TV - eps, 0);
    Cactus E_{y~q}[min(1, gamma*(y) / q(y))]; Typical and Gated by enumerating the drafted token.
    """
    if isinstance(rule, (Typical, Gated)):
        accept, _ = _by_drafted_token(rule, p, q)
        return (q * accept).sum(dim=-1)
    if isinstance(rule, Cactus):
        gamma = rule.gamma(p).to(p.dtype)  # gamma*(v) for every candidate v
        safe_q = torch.where(q > 0, q, torch.ones_like(q))
        return (q * torch.clamp(gamma / safe_q, max=1.0)).sum(dim=-1)
    tv = total_variation(p, q)
    return 1.0 - (1.0 - linear_lambda(rule, p, q)) * tv


def emitted_distribution(rule, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Distribution of the token that token verification emits at this position, [..., V].

    Linear-type rules emit their target p~ = (1 - lam) p + lam q exactly. Cactus's target depends
    on the drafted token y, so what it emits is the mixture over y ~ q of "accept y with
    probability min(1, gamma*(y)/q(y)), else draw from norm([p~_y - q]+)". Typical and Gated are
    enumerated the same way over y (_by_drafted_token).
    """
    if isinstance(rule, Typical):
        return _typical_emitted(rule, p, q)
    if isinstance(rule, Gated):
        accept, residual = _by_drafted_token(rule, p, q)
        return q * accept + ((q * (1 - accept)).unsqueeze(-1) * residual).sum(dim=-2)
    if not isinstance(rule, Cactus):
        lam = linear_lambda(rule, p, q).unsqueeze(-1)
        return (1.0 - lam) * p + lam * q
    vocab = p.shape[-1]
    gamma = rule.gamma(p).to(p.dtype)  # [..., V] gamma*(y) for each possible draft y
    scale = cactus_scale(p, gamma)  # [..., V]
    # relaxed[..., y, v]: p~_y(v)
    relaxed = scale.unsqueeze(-1) * p.unsqueeze(-2)
    eye = torch.eye(vocab, dtype=p.dtype)
    relaxed = relaxed * (1 - eye) + eye * gamma.unsqueeze(-1)
    residual = (relaxed - q.unsqueeze(-2)).clamp(min=0)
    mass = residual.sum(dim=-1, keepdim=True)
    residual = torch.where(mass > 1e-12, residual / mass.clamp(min=1e-300), relaxed)
    safe_q = torch.where(q > 0, q, torch.ones_like(q))
    accept = torch.clamp(gamma / safe_q, max=1.0)  # [..., V]
    accepted_part = q * accept
    rejected_part = ((q * (1 - accept)).unsqueeze(-1) * residual).sum(dim=-2)
    return accepted_part + rejected_part


def _typical_emitted(rule: Typical, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Typical's emitted law in O(V) (its docstring): E(v) = q(v) a(v) + r [p(v) - q(v)]+ / TV(p, q), with
    a(v) = 1 for typical v, min(1, p(v)/q(v)) otherwise, and r = sum_v q(v) (1 - a(v)). [..., V]"""
    typical = p > rule.threshold(row_stats(p)).unsqueeze(-1)  # [..., V]
    safe_q = torch.where(q > 0, q, torch.ones_like(q))
    accept = torch.where(typical, torch.ones_like(p), torch.clamp(p / safe_q, max=1.0))
    rejected = (q * (1 - accept)).sum(dim=-1, keepdim=True)  # r
    excess = (p - q).clamp(min=0)
    mass = excess.sum(dim=-1, keepdim=True)  # TV(p, q)
    return q * accept + torch.where(mass > 1e-12, rejected * excess / mass.clamp(min=1e-300), torch.zeros_like(p))


def _by_drafted_token(rule, p: torch.Tensor, q: torch.Tensor):
    """For every possible draft y: the acceptance min(1, p~_y(y)/q(y)), [..., V], and the residual
    norm([p~_y - q]+) drawn on its rejection, [..., V(y), V], from the rule's affine form (acceptance.py)."""
    vocab = p.shape[-1]
    stats = row_stats(p)  # [...]: the same for every y
    expand = lambda t: t.unsqueeze(-1).expand(*t.shape, vocab)  # noqa: E731  [...] -> [..., V]
    tv = total_variation(p, q)
    relax = rule.relax(p, q, expand(tv), type(stats)(*(expand(t) for t in stats)))  # [..., V] per y
    safe_q = torch.where(q > 0, q, torch.ones_like(q))
    accept = torch.clamp(relax.at_draft(p, q) / safe_q, max=1.0)
    eye = torch.eye(vocab, dtype=p.dtype)
    relaxed = (relax.p_coef.unsqueeze(-1) * p.unsqueeze(-2) + relax.q_coef.unsqueeze(-1) * q.unsqueeze(-2)
               + relax.onehot_coef.unsqueeze(-1) * eye)  # [..., y, v] p~_y(v)
    residual = (relaxed - q.unsqueeze(-2)).clamp(min=0)
    mass = residual.sum(dim=-1, keepdim=True)
    residual = torch.where(mass > 1e-12, residual / mass.clamp(min=1e-300), relaxed.clamp(min=0))
    return accept, residual
