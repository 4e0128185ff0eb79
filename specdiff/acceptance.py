"""Target relaxations: how far the accepted distribution may move from the verifier's.

Speculative Diffusion is a Tale of Two Tradeoffs (first paper in shared/seeds), Section 2 and
Appendix E. Each rule turns the verifier distribution p into a relaxed target p~ at every
drafted position, and verification then runs rejection sampling against p~.

Every rule here writes p~ in one affine form, per position (all coefficients are [b, B]):

    p~ = p_coef * p + q_coef * q + onehot_coef * onehot(y)

with y the drafted token and q the proposal. This covers all four rules:

    Lossless      p~ = p
    Linear(lam)   p~ = (1 - lam) p + lam q                       (Theorem 1, Eq. 5)
    TVBudget(eps) Linear with lam = min(1, eps / TV(p, q))       (Theorem 1)
    Cactus(delta) p~(y) = gamma*, p~(v) = (1 - gamma*)/(1 - p(y)) p(v) for v != y   (Eq. 17)

so verification only ever needs p and q at the drafted token, plus whole rows of p and q at the
few positions where it samples a residual. Two more rules read whole rows of p, through their
`RowStats` (top-1 mass and entropy), which are decided before y is looked at:

    Typical(eps, delta)   accept y outright where p(y) > min(eps, delta exp(-H(p))) (Medusa's typical
                          acceptance): p~(y) = max(p(y), q(y)) there; elsewhere p~ = p (Lossless)
    Gated(rule, m, tau)   the inner rule where the verifier is unsure (top-1 mass <= m, or H(p) >= tau),
                          Lossless elsewhere

Support: every rule measures the drafted token against the target as sampled, after top-p / top-k
truncation (support="truncated", the default), or against the verifier's distribution at its
temperature before truncation (support="untruncated"; `verify(..., untruncated_probs=...)`). The
bonus token always comes from the truncated target.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import NamedTuple

import torch


SUPPORTS = ("truncated", "untruncated")


class RowStats(NamedTuple):
    """Whole-row statistics of the target p at each drafted position, read by Typical and Gated. [b, B] each."""

    top: torch.Tensor  # max_v p(v): the top-1 mass
    entropy: torch.Tensor  # H(p) = -sum_v p(v) log p(v), in nats


def row_stats(p_rows: torch.Tensor) -> RowStats:
    """RowStats of rows of probabilities p_rows [..., V]."""
    return RowStats(p_rows.amax(dim=-1), -torch.special.xlogy(p_rows, p_rows).sum(dim=-1))


class Relaxation(NamedTuple):
    """Coefficients of p~ = p_coef * p + q_coef * q + onehot_coef * onehot(y). Each is [b, B]."""

    p_coef: torch.Tensor
    q_coef: torch.Tensor
    onehot_coef: torch.Tensor

    def at_draft(self, p_draft: torch.Tensor, q_draft: torch.Tensor) -> torch.Tensor:
        """p~(y) from p(y) and q(y), each [b, B]; clamped to [0, 1] against rounding."""
        relaxed = self.p_coef * p_draft + self.q_coef * q_draft + self.onehot_coef
        return relaxed.clamp(0.0, 1.0)


@dataclass(frozen=True)
class Lossless:
    """Classic speculative sampling: the target is the verifier p itself (with support="untruncated",
    the verifier's untruncated distribution: lossless against that one, not against the sampled p)."""

    support: str = "truncated"
    needs_tv = False
    needs_stats = False

    def __post_init__(self):
        _check_support(self)

    @property
    def lossless(self) -> bool:
        return self.support == "truncated"

    def relax(self, p_draft, q_draft, tv=None, stats=None) -> Relaxation:
        ones = torch.ones_like(p_draft)
        zeros = torch.zeros_like(p_draft)
        return Relaxation(ones, zeros, zeros)


@dataclass(frozen=True)
class Linear:
    """Linear acceptance: p~ = (1 - lam) p + lam q (Theorem 1, Eq. 5). lam in [0, 1]."""

    lam: float
    support: str = "truncated"
    needs_tv = False
    needs_stats = False

    def __post_init__(self):
        object.__setattr__(self, "lam", _check_number("Linear lam", self.lam))
        if not 0.0 <= self.lam <= 1.0:
            raise ValueError(f"Linear(lam): lam must lie in [0, 1], got {self.lam}")
        _check_support(self)

    @property
    def lossless(self) -> bool:
        return self.lam == 0.0 and self.support == "truncated"

    def relax(self, p_draft, q_draft, tv=None, stats=None) -> Relaxation:
        lam = torch.full_like(p_draft, self.lam)
        return Relaxation(1.0 - lam, lam, torch.zeros_like(p_draft))


@dataclass(frozen=True)
class TVBudget:
    """Best acceptance within a total-variation budget eps (Theorem 1).

    Linear with lam = min(1, eps / TV(p, q)) at each position, and lam = 0 where TV = 0.
    """

    eps: float
    support: str = "truncated"
    needs_tv = True
    needs_stats = False

    def __post_init__(self):
        object.__setattr__(self, "eps", _check_number("TVBudget eps", self.eps))
        if self.eps < 0.0:
            raise ValueError(f"TVBudget(eps): eps must be >= 0, got {self.eps}")
        _check_support(self)

    @property
    def lossless(self) -> bool:
        return self.eps == 0.0 and self.support == "truncated"

    def lam(self, tv: torch.Tensor) -> torch.Tensor:
        """Per-position lam, [b, B], from TV(p, q), [b, B]."""
        safe_tv = torch.where(tv > 0, tv, torch.ones_like(tv))
        return torch.where(tv > 0, (self.eps / safe_tv).clamp(max=1.0), torch.zeros_like(tv))

    def relax(self, p_draft, q_draft, tv=None, stats=None) -> Relaxation:
        if tv is None:
            raise ValueError("TVBudget needs TV(p, q) at every position")
        lam = self.lam(tv)
        return Relaxation(1.0 - lam, lam, torch.zeros_like(p_draft))


@dataclass(frozen=True)
class Cactus:
    """Cactus (Hao and Mou, 2026) as modified in Appendix E: raise p(y) to gamma* within KL delta.

    gamma* is the largest gamma >= p(y) with Phi(gamma) <= delta (Eq. 17). solver="newton" solves
    it exactly; solver="taylor" uses Cactus's closed form min(p + sqrt(2 delta p (1 - p)), 1).
    """

    delta: float
    solver: str = "newton"
    support: str = "truncated"
    needs_tv = False
    needs_stats = False

    def __post_init__(self):
        object.__setattr__(self, "delta", _check_number("Cactus delta", self.delta))
        if self.delta < 0.0:
            raise ValueError(f"Cactus(delta): delta must be >= 0, got {self.delta}")
        if self.solver not in ("newton", "taylor"):
            raise ValueError(f"Cactus solver must be 'newton' or 'taylor', got {self.solver!r}")
        _check_support(self)

    @property
    def lossless(self) -> bool:
        return self.delta == 0.0 and self.support == "truncated"

    def gamma(self, p_draft: torch.Tensor) -> torch.Tensor:
        if self.solver == "taylor":
            return cactus_gamma_taylor(p_draft, self.delta)
        return cactus_gamma(p_draft, self.delta)

    def relax(self, p_draft, q_draft, tv=None, stats=None) -> Relaxation:
        gamma = self.gamma(p_draft).to(p_draft.dtype)
        scale = cactus_scale(p_draft, gamma)
        onehot = gamma - scale * p_draft
        return Relaxation(scale, torch.zeros_like(p_draft), onehot)


@dataclass(frozen=True)
class Typical:
    """Medusa's typical acceptance (Cai et al. 2024, Section 2.3.1): a drafted token y is accepted
    outright where p(y) > min(epsilon, delta exp(-H(p))); elsewhere it is verified as Lossless does
    (accept with min(1, p(y)/q(y)), else draw from norm([p - q]+)).

    In the affine form: p~(y) = p(y) + [q(y) - p(y)]+ = max(p(y), q(y)) where y is typical (so
    p~(y)/q(y) >= 1: accepted), p~ = p elsewhere; a residual is only ever drawn for an atypical y,
    so it is Lossless's. Per position it emits E(v) = q(v) a(v) + r [p(v) - q(v)]+ / TV(p, q), with
    a(v) = 1 for typical v, min(1, p(v)/q(v)) otherwise, and r = sum_v q(v) (1 - a(v)).
    Medusa's defaults are epsilon = 0.09 and delta = sqrt(epsilon) = 0.3.
    """

    epsilon: float
    delta: float | None = None  # None: sqrt(epsilon), as Medusa pairs them
    support: str = "truncated"
    needs_tv = False
    needs_stats = True

    def __post_init__(self):
        object.__setattr__(self, "epsilon", _check_number("Typical epsilon", self.epsilon))
        if self.delta is None:
            object.__setattr__(self, "delta", math.sqrt(max(self.epsilon, 0.0)))
        object.__setattr__(self, "delta", _check_number("Typical delta", self.delta))
        if self.epsilon < 0.0 or self.delta < 0.0:
            raise ValueError(f"Typical(epsilon, delta): both must be >= 0, got {self.epsilon}, {self.delta}")
        _check_support(self)

    @property
    def lossless(self) -> bool:
        return False  # p(y) > min(epsilon, delta e^-H) holds for some y unless both bounds are >= 1

    def threshold(self, stats: RowStats) -> torch.Tensor:
        """min(epsilon, delta exp(-H(p))), [b, B]."""
        return torch.clamp(self.delta * torch.exp(-stats.entropy), max=self.epsilon)

    def relax(self, p_draft, q_draft, tv=None, stats=None) -> Relaxation:
        if stats is None:
            raise ValueError("Typical needs the target's row statistics (RowStats) at every position")
        typical = p_draft > self.threshold(stats).to(p_draft.dtype)
        lift = torch.where(typical, (q_draft - p_draft).clamp(min=0.0), torch.zeros_like(p_draft))
        return Relaxation(torch.ones_like(p_draft), torch.zeros_like(p_draft), lift)


@dataclass(frozen=True)
class Gated:
    """The inner rule only where the verifier is unsure, Lossless elsewhere.

    A position is open when its top-1 mass is <= max_top, or its entropy H(p) >= min_entropy (nats);
    give one or both. The gate reads p alone, before y is seen, so at every position the relaxed
    target is either p or the inner rule's p~, and Theorem 1's view holds position by position: the
    TV budget is spent only where the verifier itself is uncertain. Support is the inner rule's.
    """

    rule: object
    max_top: float | None = None
    min_entropy: float | None = None
    needs_stats = True

    def __post_init__(self):
        if isinstance(self.rule, Gated) or not isinstance(self.rule, RULES):
            raise ValueError(f"Gated(rule): rule must be one of {', '.join(r.__name__ for r in RULES)}, got {self.rule!r}")
        if self.max_top is None and self.min_entropy is None:
            raise ValueError("Gated needs max_top (top-1 mass <= m opens the gate) or min_entropy (H >= tau), or both")
        if self.max_top is not None:
            object.__setattr__(self, "max_top", _check_number("Gated max_top", self.max_top))
            if not 0.0 <= self.max_top <= 1.0:
                raise ValueError(f"Gated max_top must lie in [0, 1], got {self.max_top}")
        if self.min_entropy is not None:
            object.__setattr__(self, "min_entropy", _check_number("Gated min_entropy", self.min_entropy))
            if self.min_entropy < 0.0:
                raise ValueError(f"Gated min_entropy must be >= 0, got {self.min_entropy}")

    @property
    def support(self) -> str:
        return self.rule.support

    @property
    def needs_tv(self) -> bool:
        return self.rule.needs_tv

    @property
    def lossless(self) -> bool:
        return self.rule.lossless

    def gate(self, stats: RowStats) -> torch.Tensor:
        """[b, B] bool: True where the inner rule applies."""
        open_ = torch.zeros_like(stats.top, dtype=torch.bool)
        if self.max_top is not None:
            open_ |= stats.top <= self.max_top
        if self.min_entropy is not None:
            open_ |= stats.entropy >= self.min_entropy
        return open_

    def relax(self, p_draft, q_draft, tv=None, stats=None) -> Relaxation:
        if stats is None:
            raise ValueError("Gated needs the target's row statistics (RowStats) at every position")
        inner = self.rule.relax(p_draft, q_draft, tv, stats)
        gate = self.gate(stats)
        exact = (1.0, 0.0, 0.0)  # Lossless: p~ = p
        return Relaxation(*(torch.where(gate, coef, torch.full_like(coef, base)) for coef, base in zip(inner, exact)))


RULES = (Lossless, Linear, TVBudget, Cactus, Typical)


def check_rule(rule) -> None:
    if not isinstance(rule, RULES + (Gated,)):
        names = ", ".join(r.__name__ for r in RULES + (Gated,))
        raise ValueError(f"unknown rule {rule!r}: expected an instance of one of {names}")


def drafted_token_dependent(rule) -> bool:
    """True for the rules whose p~ depends on the drafted token (Cactus, Typical, either gated): block
    verification with a real proposal needs a fixed target, which only Cactus has (its emitted C)."""
    inner = rule.rule if isinstance(rule, Gated) else rule
    return isinstance(inner, (Cactus, Typical))


def _check_support(rule) -> None:
    if rule.support not in SUPPORTS:
        raise ValueError(f"{type(rule).__name__} support must be one of {SUPPORTS}, got {rule.support!r}")


def _check_number(name: str, value) -> float:
    """A leniency as a Python float: ints, floats, numpy scalars and 0-d tensors; never a bool or NaN."""
    if hasattr(value, "ndim") and getattr(value, "ndim") == 0 and hasattr(value, "item"):
        value = value.item()  # a numpy or torch scalar
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    value = float(value)
    if math.isnan(value):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    return value


# --------------------------------------------------------------------------------------------
# The Cactus solve (Appendix E, Eq. 17)
# --------------------------------------------------------------------------------------------


def bernoulli_kl(gamma: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """Phi(gamma) = gamma log(gamma/p) + (1 - gamma) log((1 - gamma)/(1 - p)) (Eq. 17)."""
    return torch.xlogy(gamma, gamma) - torch.xlogy(gamma, p) + torch.xlogy(1 - gamma, 1 - gamma) - torch.xlogy(
        1 - gamma, 1 - p
    )


def cactus_gamma(p_draft: torch.Tensor, delta: float, max_iters: int = 60, tol: float = 1e-12) -> torch.Tensor:
    """gamma*: the largest gamma in [p, 1] with Phi(gamma) <= delta, by Newton's method (App. E).

    Phi is convex on [p, 1], zero at p and increasing, with Phi(1) = log(1/p). So gamma* = 1 when
    delta >= log(1/p); otherwise gamma* is the root of Phi(gamma) = delta in (p, 1). Newton's
    method started to the right of a convex increasing function's root stays right of it and
    converges monotonically; Pinsker's inequality Phi(gamma) >= 2 (gamma - p)^2 gives such a
    start, gamma_0 = p + sqrt(delta / 2). Solved in float64 for p near 0 and near 1; it takes
    about six steps. On the CPU a handful of values (one per row at a drafted position) are
    solved one by one in plain Python floats, where a step costs far less than a torch dispatch.

    p_draft: [...] verifier probability of the drafted token. Returns gamma*, [...], float64.
    """
    p = p_draft.detach().to(torch.float64).clamp(0.0, 1.0)
    if p.device.type == "cpu" and p.numel() <= 64:
        solved = [_newton_gamma_scalar(value, delta, max_iters, tol) for value in p.reshape(-1).tolist()]
        return torch.tensor(solved, dtype=torch.float64).reshape(p.shape)
    return _newton_gamma_tensor(p, delta, max_iters, tol)


def _newton_gamma_scalar(p: float, delta: float, max_iters: int, tol: float) -> float:
    """cactus_gamma for one float: the same Newton steps, line by line."""
    if delta == 0.0 or p <= 0.0:
        return p  # p(y) = 0: no finite KL lifts it
    if p >= 1.0 or delta >= -math.log(p):
        return 1.0
    log_p, log_rest = math.log(p), math.log1p(-p)
    gamma = max(min(p + math.sqrt(delta / 2.0), 1.0 - 1e-15), p)  # right of the root (Pinsker)
    for _ in range(max_iters):
        log_gamma, log_gamma_rest = math.log(gamma), math.log1p(-gamma)
        # Phi(gamma) - delta, and Phi'(gamma) = log(gamma / p) - log((1 - gamma) / (1 - p))
        gap = gamma * (log_gamma - log_p) + (1.0 - gamma) * (log_gamma_rest - log_rest) - delta
        slope = (log_gamma - log_p) - (log_gamma_rest - log_rest)
        if slope <= 0.0:
            break
        step = gap / slope
        gamma = min(max(gamma - step, p), 1.0)
        if abs(step) <= tol or gamma >= 1.0:
            break
    return gamma


def _newton_gamma_tensor(p: torch.Tensor, delta: float, max_iters: int, tol: float) -> torch.Tensor:
    """cactus_gamma for a float64 tensor of any size, all elements at once."""
    if delta == 0.0:
        return p.clone()
    reaches_one = delta >= -torch.log(p)  # includes p = 1; p = 0 gives +inf and never reaches
    interior = ~reaches_one & (p > 0)
    gamma = torch.maximum((p + math.sqrt(delta / 2.0)).clamp(max=1.0 - 1e-15), p)
    log_p, log_rest = torch.log(p), torch.log1p(-p)
    for _ in range(max_iters):
        log_gamma, log_gamma_rest = torch.log(gamma), torch.log1p(-gamma)
        gap = gamma * (log_gamma - log_p) + torch.xlogy(1.0 - gamma, 1.0 - gamma) - (1.0 - gamma) * log_rest - delta
        slope = (log_gamma - log_p) - (log_gamma_rest - log_rest)
        ok = interior & (slope > 0)
        step = torch.where(ok, gap / torch.where(ok, slope, 1.0), 0.0)
        gamma = torch.maximum(gamma - step, p).clamp(max=1.0)
        if not bool((step.abs() > tol).any()):
            break
    gamma = torch.where(reaches_one, 1.0, gamma)
    return torch.where(p > 0, gamma, 0.0)


def cactus_scale(p_draft: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
    """s = (1 - gamma*) / (1 - p(y)): Cactus's p~(v) = s p(v) for v != y (App. E); 0 where p(y) = 1."""
    rest = 1.0 - p_draft
    return torch.where(rest > 0, (1.0 - gamma) / rest.clamp(min=1e-300), torch.zeros_like(rest))


def cactus_gamma_taylor(p_draft: torch.Tensor, delta: float) -> torch.Tensor:
    """Cactus's closed form from the Taylor expansion (Eq. 18): min(p + sqrt(2 delta p (1-p)), 1)."""
    p = p_draft.to(torch.float64).clamp(0.0, 1.0)
    return torch.clamp(p + torch.sqrt(2.0 * delta * p * (1.0 - p)), max=1.0)


def cactus_emitted_distribution(p: torch.Tensor, q: torch.Tensor, rule: Cactus) -> torch.Tensor:
    """C: the distribution that Cactus token verification emits at one position, rows [n, V] at once
    (see cactus_emitted_off_q). p, q: [n, V]. Returns C, [n, V], a new tensor in p's dtype."""
    emitted = cactus_emitted_off_q(p, q, rule)
    return q.clone() if emitted is None else emitted


def cactus_emitted_off_q(p: torch.Tensor, q: torch.Tensor, rule: Cactus) -> torch.Tensor | None:
    """C, the distribution Cactus token verification emits, or None where C = q (no draft in any row
    can be rejected), so that a caller can skip a copy of q.

    For a draft y ~ q, Cactus accepts with a(y) = min(1, gamma*(y)/q(y)), else draws from
    norm([p~_y - q]+) with p~_y(v) = s_y p(v) (v != y), s_y = (1 - gamma*(y))/(1 - p(y)) (App. E).
    Only the drafts in R = {y : q(y) > gamma*(y)} can be rejected. With r(v) = q(v)/p(v):

        C(v) = min(q(v), gamma*(v)) + p(v) G(r(v)),   G(t) = sum_{y in R} w_y [s_y - t]+,
        w_y = (q(y) - gamma*(y)) / Z_y,   Z_y = F(s_y) = sum_u p(u) [s_y - r(u)]+.

    For y in R, r(y) > 1 >= s_y, so y's own term in Z_y and in C(y) vanishes: C(y) = gamma*(y).
    Z_y >= q(y) - gamma*(y) (the sum over u != y of s_y p(u) - q(u)), so w_y <= 1 and a residual is
    never empty (w_y = 0 where both vanish).

    Cost, a few passes over [n, V] and no sort over the vocabulary: R is found without solving
    Eq. 17 at every token: y is in R iff q(y) > p(y) and KL(q(y) || p(y)) > delta, and
    KL <= chi^2 = (q - p)^2 / (p (1 - p)), so only tokens with (q - p)^2 > delta p (1 - p) / 2 (half:
    a margin for rounding) are candidates, and gamma* is solved (float64) for those alone. F and G
    are piecewise linear with kinks at the |R| values s_y: one sort of those, one bucketing of every
    r(v) among them (searchsorted), and bucket sums give F(s_y) and G(r(v)). The passes over the
    vocabulary run in the inputs' precision (float32 for float32 inputs: F and G are continuous, so
    a ratio rounded across a kink moves them by rounding only); the |R|-sized parts in float64.
    p, q: [n, V] target and proposal rows. Returns C, [n, V], in p's dtype, or None (C = q).
    """
    n = p.shape[0]
    device, dtype, float64 = p.device, p.dtype, torch.float64
    gap = (q - p).clamp_(min=0).square_()  # [n, V] ((q - p)+)^2
    threshold = torch.addcmul(p, p, p, value=-1.0).mul_(0.5 * rule.delta)  # [n, V] delta p (1 - p) / 2
    rows, cols = gap.gt_(threshold).nonzero(as_tuple=True)  # candidates: a superset of R
    del gap, threshold
    p_c, q_c = p[rows, cols].to(float64), q[rows, cols].to(float64)
    gamma_c = rule.gamma(p_c).to(float64)
    keep = q_c > gamma_c  # a(y) < 1
    rows, cols, p_c, q_c, gamma_c = rows[keep], cols[keep], p_c[keep], q_c[keep], gamma_c[keep]
    if rows.numel() == 0:  # nothing is ever rejected: C = q
        return None
    counts = torch.bincount(rows, minlength=n)  # [n] |R| per row
    width = int(counts.max())
    slot = torch.arange(rows.numel(), device=device) - (torch.cumsum(counts, 0) - counts)[rows]  # rank within row
    scale = torch.zeros((n, width), dtype=float64, device=device)  # [n, k] s_y; 0: padding
    scale[rows, slot] = cactus_scale(p_c, gamma_c)
    rejected = torch.zeros((n, width), dtype=float64, device=device)  # [n, k] q(y) (1 - a(y))
    rejected[rows, slot] = q_c - gamma_c
    if width <= HINGE_KINKS:
        emitted = _emitted_by_hinges(p, q, scale, rejected)
    else:
        emitted = _emitted_by_buckets(p, q, scale, rejected)
    emitted[rows, cols] = gamma_c.to(dtype)
    return emitted


HINGE_KINKS = 12  # up to this many rejectable drafts in a row, C is built from one hinge per draft


def _finish_weights(mass: torch.Tensor, rejected: torch.Tensor) -> torch.Tensor:
    """w_y = (q(y) - gamma*(y)) / Z_y, 0 where Z_y = 0 (then q(y) - gamma*(y) = 0 too). [n, k] float64."""
    spread = mass > 0
    return torch.where(spread, rejected / torch.where(spread, mass, 1.0), 0.0)


def _emitted_by_hinges(p, q, scale, rejected) -> torch.Tensor:
    """C = q + sum_y w_y [s_y p - q]+ and Z_y = sum [s_y p - q]+ (p G(r) = sum_y w_y [s_y p - q]+):
    four passes over [n, V] per column of the [n, k] kinks (padding: s = 0, an empty hinge).
    p, q: [n, V]; scale, rejected: [n, k] float64. Returns C off R, [n, V] in p's dtype."""
    width = scale.shape[1]
    hinges = []  # -[s_y p - q]+ = min(q - s_y p, 0), [n, V] each
    mass = torch.empty_like(scale)
    for m in range(width):
        hinge = torch.addcmul(q, p, scale[:, m : m + 1].to(p.dtype), value=-1.0).clamp_(max=0.0)
        mass[:, m] = -hinge.sum(dim=-1).to(torch.float64)  # cascade summation in the inputs' precision
        hinges.append(hinge)
    weight = _finish_weights(mass, rejected).to(p.dtype)
    emitted = q.clone()
    for m, hinge in enumerate(hinges):
        emitted.addcmul_(hinge, weight[:, m : m + 1], value=-1.0)
    return emitted


def _emitted_by_buckets(p, q, scale, rejected) -> torch.Tensor:
    """C = q + p G(r) for many kinks: r(v) is bucketed among the sorted s_y (searchsorted), and bucket
    sums give F(s_y) and G(r(v)) in O(V log k). Padding: s = 2 (> any s, never reached by r <= 2).
    p, q: [n, V]; scale, rejected: [n, k] float64. Returns C off R, [n, V] in p's dtype."""
    n, width = scale.shape
    device, dtype, float64 = p.device, p.dtype, torch.float64
    scale = torch.where(scale > 0, scale, 2.0)
    scale, order = scale.sort(dim=-1)
    rejected = rejected.gather(-1, order)
    real = scale < 2.0
    scale_real = torch.where(real, scale, 0.0)
    ratio = torch.div(q, p).nan_to_num_(nan=2.0, posinf=2.0).clamp_(max=2.0)  # [n, V] r(v); >= 2 acts as 2
    bucket = torch.searchsorted(scale.to(dtype), ratio, right=True)  # [n, V] #{y : s_y <= r(v)}
    # F(s) at the sorted kinks: sum over u with r(u) < s_(m), i.e. bucket(u) <= m
    p_below = torch.zeros((n, width + 1), dtype=dtype, device=device).scatter_add_(-1, bucket, p)
    q_below = torch.zeros((n, width + 1), dtype=dtype, device=device).scatter_add_(-1, bucket, q)
    p_below, q_below = p_below.to(float64).cumsum(-1)[:, :width], q_below.to(float64).cumsum(-1)[:, :width]
    weight = _finish_weights(torch.where(real, scale_real * p_below - q_below, 0.0), rejected)
    # G(t) = sum_{s_y > t} w_y s_y - t sum_{s_y > t} w_y: suffix sums from bucket(v) on
    zero = torch.zeros((n, 1), dtype=float64, device=device)
    ws_suffix = torch.cat([(weight * scale_real).flip(-1).cumsum(-1).flip(-1), zero], dim=-1).to(dtype)
    w_suffix = torch.cat([weight.flip(-1).cumsum(-1).flip(-1), zero], dim=-1).to(dtype)
    g = ws_suffix.gather(-1, bucket)
    g.sub_(ratio.mul_(w_suffix.gather(-1, bucket))).clamp_(min=0)  # [n, V] G(r(v))
    del bucket, ratio
    return torch.addcmul(q, p, g)
