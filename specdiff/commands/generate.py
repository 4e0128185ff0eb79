"""`specdiff generate`: speculative generation with any drafter and verifier (zoo names or local
checkpoints), prompts from arguments or a file, every knob a flag; prints the texts and the
statistics (`--json` for scripts)."""
from __future__ import annotations

import json
import os

from specdiff.argtypes import positive_int
from specdiff.runs.config import check_generation_args, run_config_from_args


def add_generation_flags(parser) -> None:
    """The flags of one generation configuration (shared with `specdiff eval` and the bench)."""
    parser.add_argument("--drafter", default="masked-drafter",
                        help="a drafter kind (masked, ar, uniform, block, dflash: its zoo model), a zoo name or a "
                             "local path (default masked-drafter)")
    parser.add_argument("--verifier", default="verifier", help="zoo name or local path (default verifier)")
    parser.add_argument("--steps", "-K", type=positive_int, default=1,
                        help="denoising steps K per round: masked, block and uniform drafters (default 1)")
    parser.add_argument("--threshold", "--tau", type=float, default=None,
                        help="confidence threshold tau in (0, 1]: dynamic unmasking instead of K steps (masked and "
                             "block drafters; dflash drafts in one step and takes neither)")
    parser.add_argument("--order", default=None,
                        help="unmasking order: entropy, confidence, margin, random, left_to_right (default: the drafter's)")
    parser.add_argument("--prefix-cache", choices=["off", "round", "persistent"], default="off",
                        help="masked drafter's prefix cache (default off; see docs/engine.md)")
    parser.add_argument("--block-size", "-B", type=positive_int, default=8, help="drafted tokens per round B (default 8)")
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
    parser.add_argument("--device", default=None, help="torch device for both models, e.g. cuda (default cpu)")


def register(subparsers) -> None:
    generate = subparsers.add_parser(
        "generate", help="speculative generation with your own drafter and verifier",
        description="Draft with --drafter, verify with --verifier (zoo names or local transformers checkpoints), "
                    "and print each generation with its statistics.")
    generate.add_argument("prompts", nargs="*", help="prompts (or use --prompts-file); a literal \\n is a newline")
    generate.add_argument("--prompts-file", default=None, help="a text file, one prompt per line, or JSONL with 'prompt'")
    add_generation_flags(generate)
    generate.add_argument("--max-new-tokens", type=positive_int, default=128)
    generate.add_argument("--seed", type=int, default=0)
    generate.add_argument("--threads", type=positive_int, default=None, help="torch threads (default: torch's)")
    generate.add_argument("--router", default=None, metavar="FILE",
                          help="a router of `specdiff route fit`: each prompt gets the configuration of its "
                               "features' cell (the configuration flags are then ignored)")
    generate.add_argument("--json", action="store_true", help="print JSON")
    generate.set_defaults(handler=run)


def read_prompts(args) -> list[str]:
    prompts = [p.replace("\\n", "\n") for p in args.prompts]  # a literal \n in an argument is a newline
    if args.prompts_file:
        if not os.path.isfile(args.prompts_file):
            raise ValueError(f"--prompts-file {args.prompts_file!r} does not exist")
        with open(args.prompts_file) as handle:
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                if args.prompts_file.endswith(".jsonl"):
                    try:
                        prompts.append(json.loads(line)["prompt"])
                    except (json.JSONDecodeError, KeyError, TypeError) as error:
                        raise ValueError(f"{args.prompts_file}:{number}: expected a JSON object with 'prompt' "
                                         f"({error})") from None
                else:
                    prompts.append(line.rstrip("\n").replace("\\n", "\n"))
    if not prompts:
        raise ValueError("no prompts: give them as arguments or with --prompts-file")
    return prompts


def run(args) -> int:
    check_generation_args(args)
    prompts = read_prompts(args)
    import torch

    from specdiff.runs.model_cache import quiet_transformers
    from specdiff.runs import ModelCache, build_generator

    quiet_transformers()
    if args.threads:
        torch.set_num_threads(args.threads)
    cache = ModelCache(device=args.device)
    if args.router is not None:
        result, summary = _routed(args, prompts, cache)
    else:
        config = run_config_from_args(args)
        if config.drafter is None:
            raise ValueError("--drafter is required")
        generator = build_generator(config, cache)
        out = generator.generate(prompts, max_new_tokens=args.max_new_tokens, progress=not args.json,
                                 generator=torch.Generator(device=generator.verifier.device).manual_seed(args.seed))
        result = {"config": config.as_dict(), "exact": generator.exact, "summary": out.summary.as_dict(),
                  "generations": [{"prompt": p, "text": t, "token_ids": ids, "stats": s.as_dict()}
                                  for p, t, ids, s in zip(prompts, out.texts, out.token_ids, out.stats)]}
        summary = out.summary
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    for generation in result["generations"]:
        stats = generation["stats"]
        print(f"--- {generation['prompt'].strip()}")
        print(generation["text"])
        print(f"    [{stats['new_tokens']} tokens in {stats['rounds']} rounds, accepted per round {stats['accepted']}, "
              f"{1000 * stats['wall_s']:.0f} ms]")
    print(f"acceptance rate {summary.acceptance_rate:.3f}, {summary.tokens_per_round:.2f} tokens/round, "
          f"{summary.tokens_per_s:.0f} tokens/s, latency {1000 * summary.latency_s:.0f} ms, "
          f"exact: {'yes (lossless)' if summary.exact else 'no'}")
    return 0


def _routed(args, prompts: list[str], cache):
    """Each prompt generated under its router's configuration (`specdiff.runs.routing`); prompts sharing a
    configuration run together. Returns (the JSON result, a summary over all prompts)."""
    import torch

    from specdiff.engine.stats import summarize
    from specdiff.runs import build_generator
    from specdiff.runs.routing import load_router, routed_configs

    router = load_router(args.router)
    configs = routed_configs(router, prompts, cache)
    generations, stats, totals = [None] * len(prompts), [None] * len(prompts), dict.fromkeys(
        ("wall_s", "draft_s", "verify_s", "forward_s"), 0.0)
    exact = True
    for name in dict.fromkeys(c.name for c in configs):
        rows = [i for i, c in enumerate(configs) if c.name == name]
        generator = build_generator(configs[rows[0]], cache)
        out = generator.generate([prompts[i] for i in rows], max_new_tokens=args.max_new_tokens,
                                 generator=torch.Generator(device=generator.verifier.device).manual_seed(args.seed))
        exact = exact and generator.exact
        for key in totals:
            totals[key] += getattr(out.summary, key)
        for i, text, ids, s in zip(rows, out.texts, out.token_ids, out.stats):
            generations[i] = {"prompt": prompts[i], "text": text, "token_ids": ids, "stats": s.as_dict(),
                              "config": configs[i].as_dict()}
            stats[i] = s
    summary = summarize(stats, **totals)
    return {"router": args.router, "exact": exact, "summary": summary.as_dict(), "generations": generations}, summary
