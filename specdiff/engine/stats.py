"""Statistics of speculative generation: one `SequenceStats` per sequence, and their `Summary`.

Terms: a round is one draft + one verifier forward; `accepted[i]` is how many drafted tokens round
i accepted (0..B); each round then adds one correction or bonus token, so a round emits
accepted + 1 tokens, fewer when EOS or max_new_tokens cuts it. Times are seconds of the batch the
sequence ran in: draft_s the drafter's proposals, verify_s the verifier's forward and the
acceptance rule (Algorithm 1, lines 5-12), of the rounds it took part in; wall_s from the batch's
start (prefill included) to its last token.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class SequenceStats:
    rounds: int = 0
    accepted: list[int] = field(default_factory=list)  # accepted drafted tokens per round
    drafted: list[int] = field(default_factory=list)  # drafted tokens per round (B, or L_r with a controller)
    new_tokens: int = 0
    draft_s: float = 0.0
    verify_s: float = 0.0
    wall_s: float = 0.0
    exact: bool = False  # the configuration is proven lossless
    block_size: int = 0

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class Summary:
    sequences: int
    new_tokens: int
    rounds: int
    acceptance_rate: float  # accepted drafted tokens / drafted tokens
    mean_accepted: float  # accepted drafted tokens per round
    tokens_per_round: float  # new tokens per round
    tokens_per_s: float  # new tokens / wall seconds of all batches
    latency_s: float  # mean wall seconds per sequence
    draft_s: float  # total over batches: the drafter's proposals
    verify_s: float  # total over batches: the verifier's forward and the acceptance rule
    forward_s: float  # total over batches: the verifier's forward alone
    wall_s: float  # total over batches: everything, prefill and bookkeeping included
    exact: bool
    # hybrid models (specdiff.lm.state): {"verifier": counts, "drafter": counts} of the state rollbacks, summed
    # over batches: rewinds, replays (chunked kernel replayed), replay_skipped (every row kept everything),
    # checkpoint_rewinds, rewind_s, stepwise_forwards (a model fed one token per forward: Jamba); else None
    state_rollback: dict | None = None
    prefill_s: float = 0.0  # total over batches: both prefills (the verifier's and the drafter's start)

    def as_dict(self) -> dict:
        return asdict(self)


def summarize(stats: list[SequenceStats], wall_s: float, draft_s: float, verify_s: float, forward_s: float,
              prefill_s: float = 0.0) -> Summary:
    """Aggregates per-sequence statistics; the seconds are totals over all batches."""
    rounds = sum(s.rounds for s in stats)
    accepted = sum(sum(s.accepted) for s in stats)
    drafted = sum(sum(s.drafted) if s.drafted else s.rounds * s.block_size for s in stats)
    new_tokens = sum(s.new_tokens for s in stats)
    return Summary(
        sequences=len(stats), new_tokens=new_tokens, rounds=rounds,
        acceptance_rate=accepted / drafted if drafted else 0.0,
        mean_accepted=accepted / rounds if rounds else 0.0,
        tokens_per_round=new_tokens / rounds if rounds else 0.0,
        tokens_per_s=new_tokens / wall_s if wall_s > 0 else 0.0,
        latency_s=sum(s.wall_s for s in stats) / len(stats) if stats else 0.0,
        draft_s=draft_s, verify_s=verify_s, forward_s=forward_s, wall_s=wall_s,
        exact=all(s.exact for s in stats), prefill_s=prefill_s,
    )
