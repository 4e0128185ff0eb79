"""`specdiff generate`: speculative generation with any drafter and verifier (zoo names, fetched real
checkpoints or local ones), prompts from arguments, `--chat` conversations or a file, every knob a flag;
prints the texts and the statistics (`--json` for scripts), or streams the text as rounds are accepted."""
from __future__ import annotations

import argparse
import json
import os
import sys

from specdiff.argtypes import positive_int
from specdiff.lm import precision
# add_generation_flags and sampling_of live in specdiff.flags; sampling_of stays importable from here for
# commands/bench_speedup.py until its owner imports it from specdiff.flags
from specdiff.flags import add_generation_flags, sampling_of  # noqa: F401
from specdiff.runs.config import check_generation_args, run_config_from_args


def register(subparsers) -> None:
    generate = subparsers.add_parser(
        "generate", help="speculative generation with your own drafter and verifier",
        description="Draft with --drafter, verify with --verifier (zoo names or local transformers checkpoints), "
                    "and print each generation with its statistics.")
    generate.add_argument("prompts", nargs="*", help="prompts (or use --prompts-file); a literal \\n is a newline")
    generate.add_argument("--prompts-file", default=None,
                          help="a text file, one prompt per line, or JSONL with {\"prompt\": str} or {\"messages\": "
                               "[...]} per line (other keys are carried into the results)")
    generate.add_argument("--chat", action="append", default=None, metavar="MESSAGE",
                          help="a user message, sent through the verifier's chat template (one conversation per "
                               "--chat; repeatable)")
    generate.add_argument("--stream", action="store_true", help="print the text as rounds are accepted (one prompt "
                          "at a time)")
    add_generation_flags(generate)
    generate.add_argument("--max-new-tokens", type=positive_int, default=128)
    generate.add_argument("--seed", type=int, default=0)
    generate.add_argument("--threads", type=positive_int, default=None, help="torch threads (default: torch's)")
    generate.add_argument("--router", default=None, metavar="FILE",
                          help="a router of `specdiff route fit`: each prompt gets the configuration of its "
                               "features' cell (the configuration flags are then ignored)")
    generate.add_argument("--compile", action=argparse.BooleanOptionalAction, default=False,
                          help="run the verifier's rounds as compiled graphs over a static cache (docs/engine.md, "
                               "\"Speed\"; the first compile takes minutes, later runs load it from the cache; "
                               "hybrid verifiers are refused; default --no-compile)")
    generate.add_argument("--json", action="store_true", help="print JSON")
    generate.set_defaults(handler=run)


def read_prompts(args) -> list:
    """The prompts of the arguments, --chat and --prompts-file, in that order: strings and conversations
    (lists of {role, content}). `args.prompt_extras` gets each prompt's carried JSONL keys ({} otherwise)."""
    prompts = [p.replace("\\n", "\n") for p in args.prompts]  # a literal \n in an argument is a newline
    prompts += [[{"role": "user", "content": m.replace("\\n", "\n")}] for m in getattr(args, "chat", None) or []]
    extras = [{} for _ in prompts]
    if args.prompts_file:
        if not os.path.isfile(args.prompts_file):
            raise ValueError(f"--prompts-file {args.prompts_file!r} does not exist")
        if args.prompts_file.endswith(".jsonl"):
            from specdiff.eval.tasks import prompts as prompts_task

            for problem in prompts_task.read(args.prompts_file):  # DataFileError names the bad line
                prompts.append(list(problem.meta["messages"]) if prompts_task.is_conversation(problem)
                               else problem.question)
                extras.append({k: v for k, v in problem.meta.items() if k != "messages"})
        else:
            with open(args.prompts_file) as handle:
                for line in handle:
                    if line.strip():
                        prompts.append(line.rstrip("\n").replace("\\n", "\n"))
                        extras.append({})
    if not prompts:
        raise ValueError("no prompts: give them as arguments, with --chat or with --prompts-file")
    args.prompt_extras = extras
    return prompts


def run(args) -> int:
    check_generation_args(args)
    if args.compile and (args.router is not None or args.tree_budget is not None):
        raise ValueError("--compile takes chains of drafts with one configuration: run --router and --tree-budget "
                         "with --no-compile")
    prompts = read_prompts(args)
    sampling = sampling_of(args)
    import torch

    from specdiff.models import ModelCache, quiet_transformers
    from specdiff.runs import build_generator

    quiet_transformers()
    if args.threads:
        torch.set_num_threads(args.threads)
    cache = ModelCache(device=args.device, dtype=args.dtype)
    if args.router is not None:
        from specdiff.runs.routing import generate_routed

        result, summary = generate_routed(args.router, prompts, cache, args.max_new_tokens, args.seed)
    else:
        config = run_config_from_args(args)
        config.sampling = sampling
        generator = build_generator(config, cache)
        if args.compile:  # the same model and sampling, its rounds compiled (`engine.compiled`)
            from specdiff.engine.compiled import CompiledVerifier

            generator.verifier = CompiledVerifier.of(generator.verifier, progress=not args.json)
        seed = torch.Generator(device=generator.verifier.device).manual_seed(args.seed)
        if args.stream and not args.json:
            from specdiff.runs.streaming import generate_streamed

            out = generate_streamed(generator, prompts, args.max_new_tokens, seed,
                                    on_prompt=lambda prompt: print(f"--- {_shown(prompt)}", flush=True),
                                    on_text=_write)
        else:
            out = generator.generate(prompts, max_new_tokens=args.max_new_tokens, progress=not args.json,
                                     generator=seed)
        result = {"config": config.as_dict(), "exact": generator.exact, "summary": out.summary.as_dict(),
                  "drafter_choice": _drafter_choice(args, config),
                  "dtype": precision.of_model(generator.verifier.model),
                  "generations": [{"prompt": p, **extra, "text": t, "token_ids": ids, "stats": s.as_dict()}
                                  for p, extra, t, ids, s in zip(prompts, args.prompt_extras, out.texts,
                                                                 out.token_ids, out.stats)]}
        summary = out.summary
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    if "dtype" in result:
        print(f"dtype: {precision.describe(result['dtype'], args.dtype, args.device or 'cpu')}")
    if result.get("drafter_choice"):
        print(f"drafter: {result['drafter_choice']}")
    for generation in result["generations"]:
        stats = generation["stats"]
        if not (args.stream and args.router is None):
            print(f"--- {_shown(generation['prompt'])}")
            print(generation["text"])
        print(f"    [{stats['new_tokens']} tokens in {stats['rounds']} rounds, accepted per round {stats['accepted']}, "
              f"{1000 * stats['wall_s']:.0f} ms]")
    print(f"acceptance rate {summary.acceptance_rate:.3f}, {summary.tokens_per_round:.2f} tokens/round, "
          f"{summary.tokens_per_s:.0f} tokens/s, latency {1000 * summary.latency_s:.0f} ms, "
          f"exact: {'yes (lossless)' if summary.exact else 'no'}")
    return 0


def _shown(prompt) -> str:
    """A prompt as printed: a string stripped, a conversation as its last user message."""
    if isinstance(prompt, str):
        return prompt.strip()
    return [m["content"] for m in prompt if m["role"] == "user"][-1].strip()


def _write(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def _drafter_choice(args, config) -> str:
    """Which drafter runs and why (the output's "drafter:" line)."""
    from specdiff.models import default_choice

    named = f"{config.drafter} B={config.block_size}"
    if args.drafter is not None:
        return f"{named} (--drafter)"
    choice = default_choice(args.verifier)
    if choice is None:
        return f"{named} (the default drafter of {args.verifier})"
    return (f"{named} (the default for {args.verifier}: the fastest lossless proposer on its validation prompts, "
            f"{choice['validation_tokens_per_s']} tokens/s there; specdiff/zoo/distilled/default_drafters.json)")
