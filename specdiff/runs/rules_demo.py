"""Every acceptance rule on a synthetic pair of distributions (`rules_demo`; `specdiff demo --rules`).

What verify() does at one position, without models: for each rule, the first-position acceptance
rate and the distance of what it emits from the verifier, theory beside measurement, and the mean
accepted length of token against block verification over a block of B positions. The figure is
`specdiff.runs.rules_demo_plot.save_tradeoff_plot`.
"""
from __future__ import annotations

MAX_VOCAB = 1 << 16  # --vocab bound: verification reads --samples rows of V tokens per rule
WORK_ELEMENTS = 1 << 24  # default rows x V per rule: seconds per rule at any --vocab
ROW_ELEMENTS = 1 << 21  # rows x (B+1) x V per verify() call: memory stays flat in --samples and --vocab


def rules_demo(vocab: int, samples: int | None = None, block: int = 4, seed: int = 0,
               show_progress: bool = True) -> dict:
    """Each of `demo_rules()` measured on `samples` rows (default `default_samples(vocab)`) of the pair
    `synthetic_pair(vocab, seed)`: {"demo", "vocab", "samples", "block", "tv_p_q", "tv_noise_floor", "rules"}."""
    from specdiff import theory
    from specdiff.progress import progress

    samples = samples if samples is not None else default_samples(vocab)
    p, q = synthetic_pair(vocab, seed)
    rules = list(enumerate(demo_rules()))
    rows = [measure_rule(rule, p, q, samples, block, seed + i)
            for i, rule in (progress(rules, desc="verifying", unit="rule") if show_progress else rules)]
    return {
        "demo": "synthetic",
        "vocab": vocab,
        "samples": samples,
        "block": block,
        "tv_p_q": float(theory.total_variation(p, q)),
        "tv_noise_floor": tv_noise_floor(p, samples),
        "rules": rows,
    }


def default_samples(vocab: int) -> int:
    """Rows per rule when --samples is not given: 100,000, fewer for large V (about 2^24 row-tokens)."""
    return max(1_000, min(100_000, WORK_ELEMENTS // vocab))


def synthetic_pair(vocab: int, seed: int):
    """A peaked verifier p and a flatter, shifted drafter q over `vocab` tokens (float64)."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    base = torch.randn(vocab, generator=generator, dtype=torch.float64)
    p = torch.softmax(2.0 * base, dim=0)
    q = torch.softmax(1.2 * base + 0.8 * torch.randn(vocab, generator=generator, dtype=torch.float64), dim=0)
    return p, q


def demo_rules():
    import specdiff as sd

    return [
        sd.Lossless(),
        sd.Linear(0.2),
        sd.Linear(0.5),
        sd.TVBudget(0.1),
        sd.TVBudget(0.3),
        sd.Cactus(0.005),
        sd.Cactus(0.02),
        sd.Cactus(0.02, solver="taylor"),
    ]


def short_name(rule) -> str:
    """Lossless, Linear(0.2), TVBudget(0.1), Cactus(0.02), Cactus-taylor(0.02)."""
    import dataclasses

    name = type(rule).__name__
    values = [getattr(rule, field.name) for field in dataclasses.fields(rule) if field.name not in ("solver", "support")]
    solver = "-taylor" if getattr(rule, "solver", "newton") == "taylor" else ""
    support = "-untruncated" if getattr(rule, "support", "truncated") == "untruncated" else ""
    if not values:
        return name + support
    return f"{name}{solver}{support}({values[0]:g})"


def rule_target(rule, p, q):
    """What token verification with `rule` emits at one position, [V], in O(V log V).

    Linear-type rules emit p~ = (1 - lam) p + lam q; Cactus emits C (acceptance.cactus_emitted_distribution,
    equal to theory.emitted_distribution's O(V^2) mixture over every draft y, without the V x V tensor).
    """
    from specdiff import theory
    from specdiff.acceptance import Cactus, cactus_emitted_distribution

    if isinstance(rule, Cactus):
        return cactus_emitted_distribution(p.unsqueeze(0), q.unsqueeze(0), rule)[0]
    return theory.emitted_distribution(rule, p, q)


def measure_rule(rule, p, q, samples: int, block_len: int, seed: int) -> dict:
    """verify() on `samples` rows of the same pair at every position, in chunks of rows so that
    no tensor holds more than about ROW_ELEMENTS entries: time O(samples B V), memory O(V)."""
    import torch

    import specdiff as sd
    from specdiff import theory

    vocab = p.shape[0]
    generator = torch.Generator().manual_seed(seed)
    chunk = max(1, ROW_ELEMENTS // ((block_len + 1) * vocab))
    # block verification reads every position densely; 20k rows pin its mean length to ~0.01
    block_rows = min(samples, 20_000)
    emitted = torch.zeros(vocab, dtype=torch.float64)  # [V] first-position token counts
    accepted_first = accepted_token = accepted_block = 0
    for first in range(0, samples, chunk):
        rows = min(chunk, samples - first)
        draft = torch.multinomial(q.expand(rows, vocab), block_len, replacement=True, generator=generator)  # [n, B]
        target_probs = p.expand(rows, block_len + 1, vocab)  # [n, B+1, V]
        draft_probs = q.expand(rows, block_len, vocab)  # [n, B, V]
        token = sd.verify(draft, draft_probs, target_probs, rule=rule, method="token", generator=generator)
        emitted += torch.bincount(token.tokens[:, 0], minlength=vocab).double()
        accepted_first += int((token.num_accepted >= 1).sum())
        in_block = max(0, min(rows, block_rows - first))  # the first block_rows rows also run block
        if in_block:
            accepted_token += int(token.num_accepted[:in_block].sum())
            block = sd.verify(draft[:in_block], draft_probs[:in_block], target_probs[:in_block], rule=rule,
                              method="block", generator=generator)
            accepted_block += int(block.num_accepted.sum())
    emitted /= samples
    target = rule_target(rule, p, q)
    return {
        "rule": short_name(rule),
        "accept_theory": float(theory.acceptance_rate(rule, p, q)),
        "accept_measured": accepted_first / samples,
        "tv_to_verifier_theory": float(theory.total_variation(target, p)),
        "tv_to_verifier_measured": float(theory.total_variation(emitted, p)),
        "tv_to_rule_target": float(theory.total_variation(emitted, target)),
        "mean_accepted_token": accepted_token / block_rows,
        "mean_accepted_block": accepted_block / block_rows,
        "block_rows": block_rows,
    }


def tv_noise_floor(p, samples: int) -> float:
    """Expected TV between p and the histogram of `samples` draws from p, about
    1/2 sum_v sqrt(2 p(v) (1 - p(v)) / (pi N)) for large N: the measured TV of a lossless rule."""
    import math

    return float(0.5 * (2.0 * p * (1.0 - p) / (math.pi * samples)).sqrt().sum())
