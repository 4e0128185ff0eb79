"""The `specdiff` command.

Each subcommand lives in its own module, which exposes `register(subparsers)`; this file only
collects them. Modules import their heavy dependencies inside their handlers, so `--help`
stays fast.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys

# module path -> registers one or more subcommands
SUBCOMMAND_MODULES = [
    "specdiff.commands.demo",
    "specdiff.commands.generate",
    "specdiff.commands.eval",
    "specdiff.commands.sweep",
    "specdiff.commands.frontier",
    "specdiff.commands.route",
    "specdiff.commands.calibrate",
    "specdiff.commands.report",
    "specdiff.commands.zoo",
    "specdiff.commands.models",
    "specdiff.commands.distill",
    "specdiff.commands.continuous",
]
# command groups: name -> (help, modules that each register one or more of its subcommands)
GROUPS = {
    "bench": ("benchmarks that print JSON (ratios measured side by side)",
              ["specdiff.commands.bench_verify", "specdiff.commands.bench_speedup", "specdiff.commands.bench_stateful",
               "specdiff.commands.bench_leniency", "specdiff.commands.bench_vllm"]),
}


def build_parser() -> argparse.ArgumentParser:
    from specdiff import __version__

    parser = argparse.ArgumentParser(
        prog="specdiff",
        description="Speculative diffusion: draft with a diffusion model, verify with a target model.",
    )
    parser.add_argument("--version", action="version", version=f"specdiff {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in SUBCOMMAND_MODULES[:3]:  # demo, generate, eval first in the help, as before
        _module(module_name).register(subparsers)
    for group, (help_text, module_names) in GROUPS.items():
        command = subparsers.add_parser(group, help=help_text)
        which = command.add_subparsers(dest=f"{group}_target", metavar="TARGET")
        for module_name in module_names:
            _module(module_name).register(which)
        command.set_defaults(handler=lambda args, command=command: (command.print_help(), 0)[1])
    for module_name in SUBCOMMAND_MODULES[3:]:
        _module(module_name).register(subparsers)
    return parser


def _module(module_name: str):
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name == module_name:  # a renamed or deleted module must not drop its subcommands silently
            raise ImportError(f"specdiff: subcommand module {module_name} is listed in specdiff/cli.py "
                              "but does not exist") from error
        raise


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 0 if args.command is None else 2
    try:
        code = int(args.handler(args) or 0)
        sys.stdout.flush()  # a closed pipe shows up here, not at interpreter exit
        return code
    except (ValueError, FileNotFoundError) as error:  # bad input, or a model not trained / not on disk
        print(f"specdiff {args.command}: error: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # `specdiff ... --json | head`: the reader left. Point stdout at /dev/null so that the exit's
        # flush does not raise again, and exit as a process killed by SIGPIPE would (128 + 13).
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
