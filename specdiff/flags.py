"""The flags of one generation configuration, shared by `specdiff generate`, `specdiff eval` and the
bench (`add_generation_flags`), and the verifier's sampling flags that were given (`sampling_of`).

A utility at the bottom of the package, beside `specdiff.argtypes`, the one specdiff module it imports.
`specdiff.runs.config.run_config_from_args` turns the parsed flags into a RunConfig.
"""
from __future__ import annotations

from specdiff.argtypes import positive_int


def add_generation_flags(parser) -> None:
    """The flags of one generation configuration (shared with `specdiff eval` and the bench)."""
    parser.add_argument("--drafter", default=None,
                        help="a drafter kind (masked, ar, uniform, block, dflash: its zoo model; lookup: prompt "
                             "lookup, no model), a zoo name or a local path (default: masked-drafter for the "
                             "testbed's verifier, lookup for a real one)")
    parser.add_argument("--verifier", default="verifier",
                        help="zoo name, fetched name (specdiff models list), local folder or .gguf file (default verifier)")
    parser.add_argument("--temperature", type=float, default=None, help="the verifier's temperature (0: greedy; "
                        "default: the verifier's own, e.g. a fetched checkpoint's model-card settings)")
    parser.add_argument("--top-p", type=float, default=None, help="the verifier's top-p (default: its own)")
    parser.add_argument("--top-k", type=int, default=None, help="the verifier's top-k, 0 for off (default: its own)")
    parser.add_argument("--steps", "-K", type=positive_int, default=1,
                        help="denoising steps K per round: masked, block and uniform drafters (default 1)")
    parser.add_argument("--threshold", "--tau", type=float, default=None,
                        help="confidence threshold tau in (0, 1]: dynamic unmasking instead of K steps (masked and "
                             "block drafters; dflash drafts in one step and takes neither)")
    parser.add_argument("--order", default=None,
                        help="unmasking order: entropy, confidence, margin, random, left_to_right (default: the drafter's)")
    parser.add_argument("--prefix-cache", choices=["off", "round", "persistent"], default="off",
                        help="masked drafter's prefix cache (default off; see docs/engine.md)")
    parser.add_argument("--block-size", "-B", type=positive_int, default=None,
                        help="drafted tokens per round B (default 8; for a real verifier without --drafter, its "
                             "recorded default drafter's B)")
    parser.add_argument("--rule", choices=["lossless", "linear", "tv", "cactus", "typical"], default="lossless")
    parser.add_argument("--leniency", type=float, default=0.0,
                        help="lam (linear), eps (tv), delta (cactus) or epsilon (typical)")
    parser.add_argument("--typical-delta", type=float, default=None,
                        help="Typical's delta: accept y where p(y) > min(epsilon, delta exp(-H(p))) (default sqrt(epsilon))")
    parser.add_argument("--gate-top", type=float, default=None, metavar="M",
                        help="Gated: apply the rule only where the verifier's top-1 mass is <= M (Lossless elsewhere)")
    parser.add_argument("--gate-entropy", type=float, default=None, metavar="TAU",
                        help="Gated: ... or where the verifier's entropy is >= TAU nats")
    parser.add_argument("--support", choices=["truncated", "untruncated"], default="truncated",
                        help="measure drafts against the verifier after top-p/top-k (default) or before (untruncated)")
    parser.add_argument("--method", choices=["token", "block"], default="token")
    parser.add_argument("--proposal", choices=["marginal", "point_mass"], default="marginal")
    parser.add_argument("--controller", default=None, metavar="NAME",
                        help="run-time controller of effort and draft length per row and round (docs/adaptive.md): "
                             "confidence, acceptance, effort, joined with '+', parameters after ':' "
                             "(e.g. confidence:finish=0.9); -B is then the longest draft (default: none, fixed K and B)")
    parser.add_argument("--batch-size", type=positive_int, default=1, help="sequences per batch (default 1)")
    parser.add_argument("--tree-budget", type=positive_int, default=None, metavar="N",
                        help="draft trees of at most N nodes, -B deep, verified in one forward (docs/engine.md; "
                             "batch 1, lossless; default: chains)")
    parser.add_argument("--device", default=None, help="torch device for both models, e.g. cuda (default cpu)")
    parser.add_argument("--dtype", choices=("auto", "float32", "bfloat16"), default=None,
                        help="a real verifier's dtype, its drafter following (default auto: bfloat16 on CUDA or a CPU "
                             "with native bfloat16, else float32; the testbed's models always run in float32)")


def sampling_of(args) -> dict:
    """The verifier's sampling flags that were given (the rest stay the verifier's own defaults)."""
    if getattr(args, "temperature", None) is not None and not args.temperature >= 0:
        raise ValueError(f"--temperature must be >= 0, got {args.temperature}")
    if getattr(args, "top_p", None) is not None and not 0 < args.top_p <= 1:
        raise ValueError(f"--top-p must be in (0, 1], got {args.top_p}")
    if getattr(args, "top_k", None) is not None and args.top_k < 0:
        raise ValueError(f"--top-k must be >= 0 (0: off), got {args.top_k}")
    return {key: value for key, value in (("temperature", getattr(args, "temperature", None)),
                                          ("top_p", getattr(args, "top_p", None)),
                                          ("top_k", getattr(args, "top_k", None))) if value is not None}
