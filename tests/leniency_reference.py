"""An independent reference for what token verification emits and accepts at one position under Typical and
Gated (and the inner rules a gate can hold), written from the rules' definitions (docs/leniency.md; Medusa,
Cai et al. 2024, Section 2.3.1; the first paper's Theorem 1 and Appendix E) in numpy, one drafted token at a
time. It imports nothing from specdiff: it is what the library's `relax()` / `threshold()` / `gate()` and
`theory.emitted_distribution` are checked against (tests/test_leniency_reference.py). Not a test module.

Token verification of a draft y ~ q against a target p~_y (which may depend on y): accept y with probability
min(1, p~_y(y) / q(y)); on rejection draw from the residual norm([p~_y - q]+). Point-mass mode verifies y with
the proposal onehot(y) in place of q.
"""
from __future__ import annotations

import math

import numpy as np


def entropy(p) -> float:
    """H(p) = -sum_v p(v) log p(v) in nats, 0 log 0 = 0."""
    p = np.asarray(p, dtype=np.float64)
    nz = p[p > 0]
    return float(-(nz * np.log(nz)).sum())


def typical_tokens(p, epsilon: float, delta: float) -> np.ndarray:
    """Medusa's typical set: the tokens v with p(v) > min(epsilon, delta exp(-H(p))). [V] bool."""
    p = np.asarray(p, dtype=np.float64)
    return p > min(epsilon, delta * math.exp(-entropy(p)))


def _one_draft(target, q, y) -> tuple[float, np.ndarray]:
    """Verification of one draft y against the target p~_y: (acceptance probability, emitted law given y)."""
    q = np.asarray(q, dtype=np.float64)
    target = np.asarray(target, dtype=np.float64)
    accept = min(1.0, target[y] / q[y])
    emitted = np.zeros_like(q)
    emitted[y] += accept
    if accept < 1.0:
        residual = np.maximum(target - q, 0.0)
        emitted += (1.0 - accept) * residual / residual.sum()
    return accept, emitted


def _mixture(p, q, target_for, point_mass: bool) -> tuple[float, np.ndarray]:
    """Acceptance and emitted law over the draft y ~ q: sum_y q(y) [verification of y against target_for(y)];
    point_mass: the proposal handed to verification is onehot(y)."""
    p = np.asarray(p, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    vocab = len(p)
    accepted, law = 0.0, np.zeros(vocab)
    for y in range(vocab):
        if q[y] == 0:
            continue
        proposal = np.eye(vocab)[y] if point_mass else q
        accept, emitted = _one_draft(target_for(y, proposal), proposal, y)
        accepted += q[y] * accept
        law += q[y] * emitted
    return accepted, law


def lossless(p, q, point_mass=False):
    return _mixture(p, q, lambda y, proposal: np.asarray(p, dtype=np.float64), point_mass)


def linear(p, q, lam: float, point_mass=False):
    """Target (1 - lam) p + lam q' with q' the proposal handed to verification."""
    p = np.asarray(p, dtype=np.float64)
    return _mixture(p, q, lambda y, proposal: (1 - lam) * p + lam * proposal, point_mass)


def tv_budget(p, q, eps: float, point_mass=False):
    """Linear with lam = min(1, eps / TV(p, q')) (lam = 0 where TV = 0)."""
    p = np.asarray(p, dtype=np.float64)

    def target(y, proposal):
        tv = 0.5 * np.abs(p - proposal).sum()
        lam = 0.0 if tv == 0 else min(1.0, eps / tv)
        return (1 - lam) * p + lam * proposal

    return _mixture(p, q, target, point_mass)


def cactus_gamma(p_y: float, delta: float) -> float:
    """The largest gamma in [p_y, 1] with KL(Bernoulli(gamma) || Bernoulli(p_y)) <= delta, by bisection."""
    if p_y <= 0.0 or delta == 0.0:
        return p_y
    if p_y >= 1.0 or delta >= -math.log(p_y):
        return 1.0

    def kl(g):
        rest = 0.0 if g >= 1.0 else (1 - g) * math.log((1 - g) / (1 - p_y))
        return g * math.log(g / p_y) + rest

    low, high = p_y, 1.0
    for _ in range(200):
        mid = 0.5 * (low + high)
        low, high = (mid, high) if kl(mid) <= delta else (low, mid)
    return low


def cactus(p, q, delta: float, point_mass=False):
    """p~_y(y) = gamma*(p(y)), p~_y(v) = p(v) (1 - gamma*) / (1 - p(y)) elsewhere."""
    p = np.asarray(p, dtype=np.float64)

    def target(y, proposal):
        gamma = cactus_gamma(float(p[y]), delta)
        out = p * ((1 - gamma) / (1 - p[y]) if p[y] < 1 else 0.0)
        out[y] = gamma
        return out

    return _mixture(p, q, target, point_mass)


def typical(p, q, epsilon: float, delta: float, point_mass=False):
    """Medusa's typical acceptance: a typical y is accepted outright; an atypical one as Lossless (accept with
    min(1, p(y)/q'(y)), else draw from norm([p - q']+)). Written directly, not through a relaxed target."""
    p = np.asarray(p, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    vocab = len(p)
    is_typical = typical_tokens(p, epsilon, delta)
    accepted, law = 0.0, np.zeros(vocab)
    for y in range(vocab):
        if q[y] == 0:
            continue
        proposal = np.eye(vocab)[y] if point_mass else q
        if is_typical[y]:
            accepted += q[y]
            law[y] += q[y]
            continue
        accept = min(1.0, p[y] / proposal[y])
        accepted += q[y] * accept
        law[y] += q[y] * accept
        if accept < 1.0:
            residual = np.maximum(p - proposal, 0.0)
            law += q[y] * (1.0 - accept) * residual / residual.sum()
    return accepted, law


def gate_open(p, max_top: float | None, min_entropy: float | None) -> bool:
    """Gated's gate: open where the verifier is unsure: top-1 mass <= max_top, or H(p) >= min_entropy."""
    p = np.asarray(p, dtype=np.float64)
    return bool((max_top is not None and p.max() <= max_top) or (min_entropy is not None and entropy(p) >= min_entropy))


def gated(p, q, inner, max_top=None, min_entropy=None, point_mass=False):
    """inner(p, q, point_mass) where the gate is open, Lossless where it is closed."""
    if gate_open(p, max_top, min_entropy):
        return inner(p, q, point_mass)
    return lossless(p, q, point_mass)


def draft_acceptance(rule, p, q, y: int) -> float:
    """The probability that verification accepts the drafted token y: min(1, p~_y(y) / q(y)), q the proposal
    handed to verification (onehot(y) in point-mass mode); for Typical 1 where y is typical. p: the rows the
    rule measures drafts against (the untruncated ones for support="untruncated"); the support is not read."""
    kind = type(rule).__name__
    p, q = _numpy(p), _numpy(q)
    if kind == "Gated":
        inner = rule.rule if gate_open(p, rule.max_top, rule.min_entropy) else None
        return min(1.0, p[y] / q[y]) if inner is None else draft_acceptance(inner, p, q, y)
    if kind == "Typical":
        return 1.0 if typical_tokens(p, rule.epsilon, rule.delta)[y] else min(1.0, p[y] / q[y])
    if kind == "Lossless":
        target = p[y]
    elif kind == "Linear":
        target = (1 - rule.lam) * p[y] + rule.lam * q[y]
    elif kind == "TVBudget":
        tv = 0.5 * np.abs(p - q).sum()
        lam = 0.0 if tv == 0 else min(1.0, rule.eps / tv)
        target = (1 - lam) * p[y] + lam * q[y]
    elif kind == "Cactus":
        target = cactus_gamma(float(p[y]), rule.delta)
    else:
        raise ValueError(f"no reference for {rule!r}")
    return min(1.0, target / q[y])


def reference(rule):
    """A rule object (specdiff's, recognised by class name; only its parameters are read) -> the function
    f(p, q, point_mass) = (acceptance, emitted law) above. Support must be "truncated"."""
    kind = type(rule).__name__
    if kind != "Gated":
        assert getattr(rule, "support", "truncated") == "truncated", rule
    if kind == "Lossless":
        return lossless
    if kind == "Linear":
        return lambda p, q, pm: linear(p, q, rule.lam, pm)
    if kind == "TVBudget":
        return lambda p, q, pm: tv_budget(p, q, rule.eps, pm)
    if kind == "Cactus":
        assert rule.solver == "newton", rule
        return lambda p, q, pm: cactus(p, q, rule.delta, pm)
    if kind == "Typical":
        return lambda p, q, pm: typical(p, q, rule.epsilon, rule.delta, pm)
    if kind == "Gated":
        inner = reference(rule.rule)
        return lambda p, q, pm: gated(p, q, inner, rule.max_top, rule.min_entropy, pm)
    raise ValueError(f"no reference for {rule!r}")


def reference_law(rule, p, q, point_mass=False):
    """The emitted law as a float64 torch tensor, from torch rows p, q [V]."""
    import torch

    return torch.from_numpy(reference(rule)(_numpy(p), _numpy(q), point_mass)[1])


def reference_acceptance(rule, p, q, point_mass=False) -> float:
    return float(reference(rule)(_numpy(p), _numpy(q), point_mass)[0])


def _numpy(rows):
    return rows.detach().cpu().double().numpy() if hasattr(rows, "detach") else np.asarray(rows, dtype=np.float64)
