"""One generation configuration, by name: what the demo, `specdiff generate`, `specdiff eval`, the
speed bench, the sweeps and the lm-eval backend share.

A `RunConfig` names the drafter (a kind, a zoo name or a local path; None for plain autoregressive
decoding of the verifier), its effort (K steps or threshold tau), the leniency rule and its
leniency (with Typical's delta, an optional gate on the verifier's top-1 mass or entropy, and the
support the drafts are measured against), the verification method, the proposal mode, the block size B, the batch size, and
optionally the verifier's sampling settings (`sampling`: temperature, top_p, top_k; temperature 0
is greedy). `make_rule` turns a rule's name and leniency into an acceptance rule;
`run_config_from_args` builds a RunConfig from the generation flags, after `check_generation_args`.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

RULES = ("lossless", "linear", "tv", "cactus", "typical")
SUPPORTS = ("truncated", "untruncated")


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
    leniency: float = 0.0  # lam, eps, delta, or Typical's epsilon
    typical_delta: float | None = None  # Typical's delta; None: sqrt(epsilon)
    gate_top: float | None = None  # Gated: the rule only where the verifier's top-1 mass <= this
    gate_entropy: float | None = None  # Gated: ... or where its entropy >= this (nats)
    support: str = "truncated"  # or "untruncated": drafts measured before top-p / top-k
    method: str = "token"
    proposal: str = "marginal"
    block_size: int = 8  # B: with a controller, the longest draft
    batch_size: int = 1
    controller: str | None = None  # a run-time controller's name (`specdiff.engine.controllers`); None: fixed
    tree_budget: int | None = None  # draft trees of at most this many nodes, depth block_size (None: chains)
    extra: dict = field(default_factory=dict)
    sampling: dict = field(default_factory=dict)  # the verifier's temperature / top_p / top_k; empty: its defaults

    def as_dict(self) -> dict:
        return asdict(self)


def make_rule(rule: str, leniency: float = 0.0, typical_delta: float | None = None, gate_top: float | None = None,
              gate_entropy: float | None = None, support: str = "truncated"):
    """"lossless" | "linear" (lam) | "tv" (eps) | "cactus" (delta) | "typical" (epsilon, typical_delta)
    -> an acceptance rule with that support, wrapped in `Gated` when gate_top or gate_entropy is given."""
    from specdiff.acceptance import Cactus, Gated, Linear, Lossless, TVBudget, Typical

    builders = {"lossless": lambda: Lossless(support=support), "linear": lambda: Linear(leniency, support=support),
                "tv": lambda: TVBudget(leniency, support=support), "cactus": lambda: Cactus(leniency, support=support),
                "typical": lambda: Typical(leniency, typical_delta, support=support)}
    if rule not in builders:
        raise ValueError(f"unknown rule {rule!r}: expected one of {RULES}")
    inner = builders[rule]()
    if gate_top is None and gate_entropy is None:
        return inner
    return Gated(inner, max_top=gate_top, min_entropy=gate_entropy)


def config_rule(config: RunConfig):
    """The acceptance rule of a RunConfig."""
    return make_rule(config.rule, config.leniency, config.typical_delta, config.gate_top, config.gate_entropy,
                     config.support)


def check_generation_args(args) -> None:
    """Bad values get an error naming the flag before any model loads. The command line checks counts
    when parsing (`specdiff.argtypes`); the lm-eval backend builds its arguments without argparse, so
    they are checked here too."""
    for flag in ("steps", "block_size", "batch_size", "max_new_tokens"):
        value = getattr(args, flag, 1)
        if value is None and flag == "block_size":  # B unset: the default drafter's, or DEFAULT_BLOCK_SIZE
            continue
        if value < 1:
            raise ValueError(f"--{flag.replace('_', '-')} must be >= 1, got {value}")
    if args.threshold is not None and not 0 < args.threshold <= 1:
        raise ValueError(f"--threshold must be in (0, 1], got {args.threshold}")
    if args.rule == "linear" and not 0 <= args.leniency <= 1:
        raise ValueError(f"--leniency (lam) must be in [0, 1] for the linear rule, got {args.leniency}")
    if args.leniency < 0:
        raise ValueError(f"--leniency must be >= 0, got {args.leniency}")
    gate_top, gate_entropy = getattr(args, "gate_top", None), getattr(args, "gate_entropy", None)
    if gate_top is not None and not 0 <= gate_top <= 1:
        raise ValueError(f"--gate-top must be in [0, 1], got {gate_top}")
    if gate_entropy is not None and gate_entropy < 0:
        raise ValueError(f"--gate-entropy must be >= 0, got {gate_entropy}")
    if getattr(args, "typical_delta", None) is not None and (args.rule != "typical" or args.typical_delta < 0):
        raise ValueError(f"--typical-delta is Typical's delta (>= 0, with --rule typical), got {args.typical_delta}")
    if getattr(args, "support", "truncated") not in SUPPORTS:
        raise ValueError(f"--support must be one of {SUPPORTS}, got {args.support!r}")
    if getattr(args, "controller", None) is not None:
        from specdiff.engine.controllers import parse_controller

        try:
            parse_controller(args.controller)
        except ValueError as error:
            raise ValueError(f"--controller: {error}") from None


DEFAULT_BLOCK_SIZE = 8  # B when neither --block-size nor a recorded default drafter gives one


def run_config_from_args(args, name: str = "cli") -> RunConfig:
    """The RunConfig of the generation flags (`specdiff.flags.add_generation_flags`) or of an
    argparse-like namespace with the same fields."""
    from specdiff.models import default_choice, default_drafter, for_verifier

    prefix_cache = {"off": False}.get(args.prefix_cache, args.prefix_cache)
    drafter = for_verifier(args.drafter, args.verifier) if args.drafter is not None else default_drafter(args.verifier)
    # B: the flag; else the recorded default drafter's own (a real verifier, no --drafter); else DEFAULT_BLOCK_SIZE
    choice = default_choice(args.verifier) if args.drafter is None else None
    block_size = args.block_size or (choice["block_size"] if choice else DEFAULT_BLOCK_SIZE)
    return RunConfig(name, drafter=drafter, verifier=args.verifier, steps=args.steps, threshold=args.threshold,
                     order=args.order, prefix_cache=prefix_cache, rule=args.rule, leniency=args.leniency,
                     method=args.method, proposal=args.proposal, block_size=block_size,
                     batch_size=args.batch_size, typical_delta=getattr(args, "typical_delta", None),
                     gate_top=getattr(args, "gate_top", None), gate_entropy=getattr(args, "gate_entropy", None),
                     support=getattr(args, "support", "truncated"),
                     controller=_controller_name(getattr(args, "controller", None)),
                     tree_budget=getattr(args, "tree_budget", None),
                     extra=dict(choice.get("extra", {})) if choice else {})  # the recorded drafter's options


def _controller_name(spec: str | None) -> str | None:
    """--controller as stored: None for no controller ("none", "fixed", empty)."""
    return None if spec is None or spec.strip() in ("", "none", "fixed") else spec.strip()
