"""Run-to-run and sample statistics shared by the benches and the sweeps.

- `run_to_run_spread`: the prediction interval of one more run from m runs (Student t).
- `binomial_stderr`: sqrt(acc (1 - acc) / n), the standard error of an accuracy (the first paper's
  Table 1 reports accuracy with one standard error).
- `paired_lead` / `unpaired_lead`: how far one configuration's accuracy leads another's, and whether
  the lead exceeds the noise (McNemar on the same problems, so that problem difficulty cancels).
"""
from __future__ import annotations

import math
import statistics
from typing import Sequence


def run_to_run_spread(values: list[float], level: float = 0.95) -> list[float]:
    """The `level` prediction interval for ONE more run from m runs, mean +- t_{(1+level)/2, m-1} sd
    sqrt(1 + 1/m) (Student t).

    A method "within DDPM's spread" is then one whose FD a fresh DDPM run would reach with
    probability `level`. Narrower rules reject DDPM itself far more often: the bare range of 3 runs
    holds a 4th run only half of the time, and mean +- 2 sd of 3 runs about 77% of the time."""
    if len(values) < 2:
        return [values[0], values[0]]
    from scipy import stats

    m = len(values)
    mean, sd = statistics.fmean(values), statistics.stdev(values)
    half_width = float(stats.t.ppf((1 + level) / 2, m - 1)) * sd * math.sqrt(1 + 1 / m)
    return [mean - half_width, mean + half_width]


def binomial_stderr(accuracy: float, n: int) -> float:
    """sqrt(acc (1 - acc) / n); 0 for n = 0."""
    return math.sqrt(accuracy * (1 - accuracy) / n) if n else 0.0


def mean_stderr(values: Sequence[float]) -> float:
    """The standard error of a mean, sd / sqrt(n) (0 for fewer than two values)."""
    return statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0


def paired_lead(a: Sequence[bool], b: Sequence[bool]) -> dict:
    """How far configuration a's accuracy leads b's on the same problems, and whether that exceeds the
    noise: McNemar's test on the discordant problems (a right and b wrong: n_ab; the reverse: n_ba).
    lead = (n_ab - n_ba) / n; its standard error under "no difference" is sqrt(n_ab + n_ba) / n, and
    z = (n_ab - n_ba) / sqrt(n_ab + n_ba); the lead exceeds the noise when z > 1.96 (two-sided 5%)."""
    if len(a) != len(b) or not a:
        raise ValueError(f"paired_lead needs two equally long non-empty sequences, got {len(a)} and {len(b)}")
    n_ab = sum(bool(x) and not bool(y) for x, y in zip(a, b))
    n_ba = sum(bool(y) and not bool(x) for x, y in zip(a, b))
    n, discordant = len(a), n_ab + n_ba
    z = (n_ab - n_ba) / math.sqrt(discordant) if discordant else 0.0
    return {"lead": (n_ab - n_ba) / n, "lead_se": math.sqrt(discordant) / n, "z": z, "exceeds_noise": z > 1.96,
            "test": "McNemar (paired, same problems)"}


def unpaired_lead(acc_a: float, se_a: float, acc_b: float, se_b: float) -> dict:
    """The same for configurations measured on different problems: z = (acc_a - acc_b) / sqrt(se_a^2 + se_b^2)."""
    se = math.hypot(se_a, se_b)
    z = (acc_a - acc_b) / se if se else 0.0
    return {"lead": acc_a - acc_b, "lead_se": se, "z": z, "exceeds_noise": z > 1.96, "test": "two binomial s.e."}
