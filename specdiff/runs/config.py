"""One generation configuration, by name: what the demo, `specdiff generate`, `specdiff eval`, the
speed bench, the sweeps and the lm-eval backend share.

A `RunConfig` names the drafter (a kind, a zoo name or a local path; None for plain autoregressive
decoding of the verifier), its effort (K steps or threshold tau), the leniency rule and its
leniency, the verification method, the proposal mode, the block size B, the batch size, and
optionally the verifier's sampling settings (`sampling`: temperature, top_p, top_k; temperature 0
is greedy). `make_rule` turns a rule's name and leniency into an acceptance rule;
`run_config_from_args` builds a RunConfig from the generation flags, after `check_generation_args`.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

RULES = ("lossless", "linear", "tv", "cactus")


@dataclass
class RunConfig:
    name: str
    drafter: str | None = "masked-drafter"  # None: plain autoregressive decoding of the verifier
    verifier: str = "verifier"
    steps: int = 1
    threshold: float | None = None
    order: str | None = None  # None: the drafter's default
    prefix_cache: bool | str = False
    rule: str = "lossless"
    leniency: float = 0.0  # lam, eps or delta
    method: str = "token"
    proposal: str = "marginal"
    block_size: int = 8
    batch_size: int = 1
    extra: dict = field(default_factory=dict)
    sampling: dict = field(default_factory=dict)  # the verifier's temperature / top_p / top_k; empty: its defaults

    def as_dict(self) -> dict:
        return asdict(self)


def make_rule(rule: str, leniency: float = 0.0):
    """"lossless" | "linear" (lam) | "tv" (eps) | "cactus" (delta) -> an acceptance rule."""
    from specdiff.acceptance import Cactus, Linear, Lossless, TVBudget

    if rule == "lossless":
        return Lossless()
    if rule == "linear":
        return Linear(leniency)
    if rule == "tv":
        return TVBudget(leniency)
    if rule == "cactus":
        return Cactus(leniency)
    raise ValueError(f"unknown rule {rule!r}: expected one of {RULES}")


def check_generation_args(args) -> None:
    """Bad values get an error naming the flag before any model loads. The command line checks counts
    when parsing (`specdiff.argtypes`); the lm-eval backend builds its arguments without argparse, so
    they are checked here too."""
    for flag in ("steps", "block_size", "batch_size", "max_new_tokens"):
        if getattr(args, flag, 1) < 1:
            raise ValueError(f"--{flag.replace('_', '-')} must be >= 1, got {getattr(args, flag)}")
    if args.threshold is not None and not 0 < args.threshold <= 1:
        raise ValueError(f"--threshold must be in (0, 1], got {args.threshold}")
    if args.rule == "linear" and not 0 <= args.leniency <= 1:
        raise ValueError(f"--leniency (lam) must be in [0, 1] for the linear rule, got {args.leniency}")
    if args.leniency < 0:
        raise ValueError(f"--leniency must be >= 0, got {args.leniency}")


def run_config_from_args(args, name: str = "cli") -> RunConfig:
    """The RunConfig of the generation flags (`commands.generate.add_generation_flags`) or of an
    argparse-like namespace with the same fields."""
    prefix_cache = {"off": False}.get(args.prefix_cache, args.prefix_cache)
    return RunConfig(name, drafter=args.drafter, verifier=args.verifier, steps=args.steps, threshold=args.threshold,
                     order=args.order, prefix_cache=prefix_cache, rule=args.rule, leniency=args.leniency,
                     method=args.method, proposal=args.proposal, block_size=args.block_size,
                     batch_size=args.batch_size)
