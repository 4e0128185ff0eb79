"""The first paper's throughput model (Section 3.3, Eq. 6 and 7, Proposition 1), pure maths.

    c_d(K) = a + b K                       drafter seconds per round (fit_draft_cost)
    alpha_K(lam) = 1 - (1 - lam) d_K       expected acceptance under Linear(lam)     (Eq. 6)
    agreement_K(lam) = 1 - lam d_K         1 - TV(p, p~): the verifier agreement     (Eq. 6)
    N(alpha) = sum_{j=0}^{B} alpha^j       expected tokens per round                 (Prop. 1, Eq. 9)
    T(K, alpha) = N(alpha) / (c_d(K) + c_v)  throughput                              (Eq. 7)

c_v is the verifier's side of a round; `predict` adds to it the prefill amortised over a problem's
rounds when given the generated tokens per problem (measured apart, documented in docs/frontier.md).
d_K is the mean TV(p, q_K) over prefixes (`specdiff.engine.profile` measures it).

Each model of acceptance is a survival curve s_n = P(the first n drafts of a round are accepted),
n = 0..B, from which `predict` derives tokens per round and throughput: `iid_survival` is the
paper's (Eq. 6 and Proposition 1: s_n = alpha^n); `positional_survival` (one d_K per drafted
position) and `per_draft_survival` (the sampled drafts themselves) drop Proposition 1's
assumptions one at a time, to show what its error comes from. `compare` puts a prediction beside
the measurement of a sweep's configuration, `summarize_errors` gives the median relative errors.
Nothing here touches models.
"""
from __future__ import annotations

import statistics
from collections.abc import Sequence

import numpy as np


def fit_draft_cost(steps: Sequence[float], seconds: Sequence[float]) -> dict:
    """Least-squares fit of c_d(K) = a + b K (Section 3.3: "empirically c_d(K) ~ a + bK").

    Returns a, b, R^2 and the residuals (measured - fitted) at each K. With one K, b = 0."""
    k, y = np.asarray(steps, dtype=float), np.asarray(seconds, dtype=float)
    if k.size == 0 or k.size != y.size:
        raise ValueError(f"need as many costs as efforts (got {k.size} efforts, {y.size} costs), at least one")
    if np.unique(k).size < 2:
        a, b = float(y.mean()), 0.0
    else:
        b, a = (float(v) for v in np.polyfit(k, y, 1))
    fitted = a + b * k
    total = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float(((y - fitted) ** 2).sum()) / total if total > 0 else 1.0
    return {"a": a, "b": b, "r2": r2, "residuals": [float(r) for r in y - fitted]}


def draft_cost(fit: dict, steps: float) -> float:
    """c_d(K) = a + b K from `fit_draft_cost`."""
    return fit["a"] + fit["b"] * steps


def expected_acceptance(tv_distance: float, lam: float) -> float:
    """alpha_K(lam) = 1 - (1 - lam) d_K: the expected acceptance rate under Linear(lam) (Eq. 6, left)."""
    return 1.0 - (1.0 - lam) * tv_distance


def verifier_agreement(tv_distance: float, lam: float) -> float:
    """1 - TV(p, p~) = 1 - lam d_K: how close the relaxed target stays to the verifier (Eq. 6, right)."""
    return 1.0 - lam * tv_distance


def expected_tokens_per_round(acceptance: float, block_size: int) -> float:
    """sum_{j=0}^{B} alpha^j: the expected tokens a round emits, accepted drafts plus the one
    correction or bonus, when each position is accepted independently with mean probability
    alpha (Proposition 1, Eq. 9)."""
    return float(sum(acceptance ** j for j in range(block_size + 1)))


def expected_accepted_per_round(acceptance: float, block_size: int) -> float:
    """sum_{j=1}^{B} alpha^j: the accepted drafted tokens per round (Proposition 1, Eq. 10)."""
    return expected_tokens_per_round(acceptance, block_size) - 1.0


def throughput(acceptance: float, block_size: int, draft_seconds: float, verify_seconds: float) -> float:
    """T(K, alpha) = sum_{j=0}^{B} alpha^j / (c_d(K) + c_v), tokens per second (Eq. 7)."""
    return expected_tokens_per_round(acceptance, block_size) / (draft_seconds + verify_seconds)


def per_position_acceptance(accepted: Sequence[int], block_size: int) -> float:
    """The measured acceptance rate per drafted position: accepted / tried, where a round that
    accepted k < B tokens tried k + 1 positions (the maximum-likelihood alpha of Prop. 1's model)."""
    tried = sum(min(k + 1, block_size) for k in accepted)
    return sum(accepted) / tried if tried else float("nan")


def relative_error(predicted: float, measured: float) -> float:
    """(predicted - measured) / measured (nan when nothing was measured)."""
    return (predicted - measured) / measured if measured else float("nan")


def iid_survival(acceptance: float, block_size: int) -> np.ndarray:
    """P(the first n drafts are all accepted), n = 0..B, when each is accepted independently with
    mean probability alpha: alpha^n (Proposition 1, Eq. 12)."""
    return acceptance ** np.arange(block_size + 1, dtype=float)


def positional_survival(tv_per_position: Sequence[float], lam: float) -> np.ndarray:
    """P(the first n drafts are all accepted), n = 0..B, when position i is accepted independently
    with its own mean 1 - (1 - lam) d_{K,i}: Proposition 1's proof (Eq. 10-11) without its last
    step's assumption that the P_i are identically distributed."""
    rates = [expected_acceptance(float(d), lam) for d in tv_per_position]
    return np.concatenate([[1.0], np.cumprod(rates)])


def per_draft_survival(target_prob, draft_prob, lam: float) -> np.ndarray:
    """P(the first n drafts are all accepted), n = 0..B, averaged over sampled drafts [drafts, B]:
    given a draft, position i is accepted with min(1, p~_i(y_i) / q_i(y_i)), p~ = (1 - lam) p + lam q
    (Theorem 1), independently (Eq. 11 conditional on the draft); no assumption across positions."""
    p, q = np.asarray(target_prob, dtype=float), np.asarray(draft_prob, dtype=float)
    accept = np.minimum(1.0, (1.0 - lam) * p / np.maximum(q, 1e-300) + lam)
    survival = np.cumprod(accept, axis=-1).mean(axis=0) if accept.size else np.zeros(accept.shape[-1])
    return np.concatenate([[1.0], survival])


def amortised_prefill(prefill_seconds: float, tokens_per_round: float, tokens_per_problem: float) -> float:
    """The verifier's prefill, paid once per problem, spread over its rounds: prefill x N / L, with N
    tokens per round and L generated tokens per problem (L / N rounds). Outside Eq. 7; see `predict`."""
    return prefill_seconds * tokens_per_round / tokens_per_problem if tokens_per_problem else 0.0


def predict(survival: Sequence[float], steps: int, fit: dict, verify_seconds: float, prefill_seconds: float = 0.0,
            tokens_per_problem: float | None = None) -> dict:
    """What a survival curve s_n = P(first n drafts accepted), n = 0..B, says of one configuration:
    tokens per round N = sum_n s_n (Prop. 1, Eq. 10), the per-position acceptance accepted / tried
    (= alpha for alpha^n), the round's seconds and the throughput N / round (Eq. 7). The round costs
    c_d(K) + c_v, plus the amortised prefill when `tokens_per_problem` is given (a measured overhead
    term added to c_v: wall time, which throughput divides by, includes the prefill)."""
    s = np.asarray(survival, dtype=float)
    tokens = float(s.sum())
    prefill = amortised_prefill(prefill_seconds, tokens, tokens_per_problem)
    round_seconds = draft_cost(fit, steps) + verify_seconds + prefill
    tried = float(s[:-1].sum())
    return {"acceptance": float(s[1:].sum()) / tried if tried else float("nan"),
            "accepted_per_round": tokens - 1.0, "tokens_per_round": tokens, "prefill_ms_per_round": 1000 * prefill,
            "round_ms": 1000 * round_seconds, "throughput": tokens / round_seconds}


COMPARED = ("acceptance", "tokens_per_round", "round_ms", "throughput")


def compare(prediction: dict, measured: dict) -> dict:
    """Relative errors of the prediction for each quantity both dicts hold (COMPARED)."""
    return {key: relative_error(prediction[key], measured[key]) for key in COMPARED
            if key in prediction and measured.get(key) is not None}


def summarize_errors(errors: Sequence[dict]) -> dict:
    """median |relative error| over configurations, per quantity: `median_rel_error_<quantity>`."""
    out = {}
    for key in COMPARED:
        values = [abs(e[key]) for e in errors if key in e and e[key] == e[key]]
        out[f"median_rel_error_{key}"] = statistics.median(values) if values else None
    return out
