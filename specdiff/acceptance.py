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
few positions where it samples a residual.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import NamedTuple

import torch


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
    """Classic speculative sampling: the target is the verifier p itself."""

    needs_tv = False
    lossless = True

    def relax(self, p_draft, q_draft, tv=None) -> Relaxation:
        ones = torch.ones_like(p_draft)
        zeros = torch.zeros_like(p_draft)
        return Relaxation(ones, zeros, zeros)


@dataclass(frozen=True)
class Linear:
    """Linear acceptance: p~ = (1 - lam) p + lam q (Theorem 1, Eq. 5). lam in [0, 1]."""

    lam: float
    needs_tv = False

    def __post_init__(self):
        object.__setattr__(self, "lam", _check_number("Linear lam", self.lam))
        if not 0.0 <= self.lam <= 1.0:
            raise ValueError(f"Linear(lam): lam must lie in [0, 1], got {self.lam}")

    @property
    def lossless(self) -> bool:
        return self.lam == 0.0

    def relax(self, p_draft, q_draft, tv=None) -> Relaxation:
        lam = torch.full_like(p_draft, self.lam)
        return Relaxation(1.0 - lam, lam, torch.zeros_like(p_draft))


@dataclass(frozen=True)
class TVBudget:
    """Best acceptance within a total-variation budget eps (Theorem 1).

    Linear with lam = min(1, eps / TV(p, q)) at each position, and lam = 0 where TV = 0.
    """

    eps: float
    needs_tv = True

    def __post_init__(self):
        object.__setattr__(self, "eps", _check_number("TVBudget eps", self.eps))
        if self.eps < 0.0:
            raise ValueError(f"TVBudget(eps): eps must be >= 0, got {self.eps}")

    @property
    def lossless(self) -> bool:
        return self.eps == 0.0

    def lam(self, tv: torch.Tensor) -> torch.Tensor:
        """Per-position lam, [b, B], from TV(p, q), [b, B]."""
        safe_tv = torch.where(tv > 0, tv, torch.ones_like(tv))
        return torch.where(tv > 0, (self.eps / safe_tv).clamp(max=1.0), torch.zeros_like(tv))

    def relax(self, p_draft, q_draft, tv=None) -> Relaxation:
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
    needs_tv = False

    def __post_init__(self):
        object.__setattr__(self, "delta", _check_number("Cactus delta", self.delta))
        if self.delta < 0.0:
            raise ValueError(f"Cactus(delta): delta must be >= 0, got {self.delta}")
        if self.solver not in ("newton", "taylor"):
            raise ValueError(f"Cactus solver must be 'newton' or 'taylor', got {self.solver!r}")

    @property
    def lossless(self) -> bool:
        return self.delta == 0.0

    def gamma(self, p_draft: torch.Tensor) -> torch.Tensor:
        if self.solver == "taylor":
            return cactus_gamma_taylor(p_draft, self.delta)
        return cactus_gamma(p_draft, self.delta)

    def relax(self, p_draft, q_draft, tv=None) -> Relaxation:
        gamma = self.gamma(p_draft).to(p_draft.dtype)
        scale = cactus_scale(p_draft, gamma)
        onehot = gamma - scale * p_draft
        return Relaxation(scale, torch.zeros_like(p_draft), onehot)


RULES = (Lossless, Linear, TVBudget, Cactus)


def check_rule(rule) -> None:
    if not isinstance(rule, RULES):
        names = ", ".join(r.__name__ for r in RULES)
        raise ValueError(f"unknown rule {rule!r}: expected an instance of one of {names}")


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


def cactus_emitted_distribution(p: torch.Tensor, q: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
    """C: the distribution that Cactus token verification emits at one position, in O(V log V).

    For a draft y ~ q, Cactus accepts with a(y) = min(1, gamma*(y)/q(y)), else draws from
    norm([p~_y - q]+) with p~_y(v) = s_y p(v) (v != y), s_y = (1 - gamma*(y))/(1 - p(y)).
    With r(v) = q(v)/p(v), the residual is p(v)[s_y - r(v)]+ / Z_y off y (and 0 at y), so

        C(v) = q(v) a(v) + p(v) (G(r(v)) - w_v [s_v - r(v)]+),   G(t) = sum_y w_y [s_y - t]+,
        w_y = q(y) (1 - a(y)) / Z_y,   Z_y = F(s_y) - p(y)[s_y - r(y)]+,   F(s) = sum_v p(v)[s - r(v)]+.

    F and G are piecewise linear and evaluated with sorted prefix sums. Block verification uses C
    as Cactus's fixed target (a target that depends on the drafted token breaks block
    verification's guarantee; C is what token-level Cactus produces).
    p, q, gamma: [..., V] (gamma = gamma*(v) for every candidate draft v). Returns [..., V].
    """
    p = p.to(torch.float64)
    q = q.to(torch.float64)
    gamma = gamma.to(torch.float64)
    safe_q = torch.where(q > 0, q, torch.ones_like(q))
    accept = torch.where(q > 0, (gamma / safe_q).clamp(max=1.0), torch.ones_like(q))  # a(v)
    scale = cactus_scale(p, gamma)  # s_v
    ratio = torch.where(p > 0, q / p.clamp(min=1e-300), torch.full_like(p, float("inf")))  # r(v)

    # F(s) = s * sum_{r < s} p - sum_{r < s} q, from r sorted ascending.
    ratio_sorted, order = ratio.sort(dim=-1)
    p_cum = torch.cumsum(p.gather(-1, order), dim=-1)
    q_cum = torch.cumsum(q.gather(-1, order), dim=-1)
    below = torch.searchsorted(ratio_sorted, scale.contiguous(), right=False)  # how many r < s
    p_below = _take_prefix(p_cum, below)
    q_below = _take_prefix(q_cum, below)
    mass_all = scale * p_below - q_below
    own = p * (scale - ratio).clamp(min=0)
    own = torch.where(torch.isfinite(own), own, torch.zeros_like(own))
    residual_mass = (mass_all - own).clamp(min=0)  # Z_v
    rejected = q * (1.0 - accept)
    weight = torch.where(residual_mass > 1e-15, rejected / residual_mass.clamp(min=1e-300), torch.zeros_like(q))

    # G(t) = sum_{s_y > t} w_y s_y - t sum_{s_y > t} w_y, from s sorted ascending (suffix sums).
    scale_sorted, order_s = scale.sort(dim=-1)
    w_sorted = weight.gather(-1, order_s)
    ws_suffix = torch.flip(torch.cumsum(torch.flip(w_sorted * scale_sorted, [-1]), -1), [-1])
    w_suffix = torch.flip(torch.cumsum(torch.flip(w_sorted, [-1]), -1), [-1])
    finite_ratio = torch.where(torch.isfinite(ratio), ratio, torch.full_like(ratio, 1e300))
    above = torch.searchsorted(scale_sorted, finite_ratio.contiguous(), right=True)  # first s_y > t
    ws_above = _take_suffix(ws_suffix, above)
    w_above = _take_suffix(w_suffix, above)
    g_at_r = ws_above - finite_ratio * w_above
    g_at_r = torch.where(torch.isfinite(ratio), g_at_r, torch.zeros_like(g_at_r))
    self_term = weight * own  # w_v [s_v - r(v)]+ p(v)
    emitted = q * accept + p * g_at_r - self_term
    # Rows whose rejected mass could not be spread (empty residual) fall back to p~_y: rare.
    fallback_mass = torch.where(residual_mass > 1e-15, torch.zeros_like(q), rejected)
    if bool((fallback_mass > 0).any()):
        relaxed = scale.unsqueeze(-1) * p.unsqueeze(-2)  # [..., y, v]
        eye = torch.eye(p.shape[-1], dtype=p.dtype, device=p.device)
        relaxed = relaxed * (1 - eye) + eye * gamma.unsqueeze(-1)
        emitted = emitted + (fallback_mass.unsqueeze(-1) * relaxed).sum(-2)
    emitted = emitted.clamp(min=0)
    return emitted / emitted.sum(dim=-1, keepdim=True)


def _take_prefix(cumulative: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """sum of the first `count` sorted entries, from their inclusive cumulative sums."""
    padded = torch.cat([torch.zeros_like(cumulative[..., :1]), cumulative], dim=-1)
    return padded.gather(-1, count)


def _take_suffix(suffix: torch.Tensor, start: torch.Tensor) -> torch.Tensor:
    """sum of sorted entries from index `start` on, from their inclusive suffix sums."""
    padded = torch.cat([suffix, torch.zeros_like(suffix[..., :1])], dim=-1)
    return padded.gather(-1, start)
