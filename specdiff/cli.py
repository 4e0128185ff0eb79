"""The `specdiff` command.

Each subcommand lives in its own module, which exposes `register(subparsers)`; this file only
collects them. Modules import their heavy dependencies inside their handlers, so `--help`
stays fast.
"""
from __future__ import annotations

import argparse
import importlib
import sys

# module path -> registers one or more subcommands
SUBCOMMAND_MODULES = [
    "specdiff.commands.demo",
    "specdiff.commands.generate",
    "specdiff.commands.eval",
    "specdiff.commands.bench",
    "specdiff.commands.sweep",
    "specdiff.commands.frontier",
    "specdiff.commands.report",
    "specdiff.zoo.cli",
    "specdiff.continuous.cli",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specdiff",
        description="Speculative diffusion: draft with a diffusion model, verify with a target model.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in SUBCOMMAND_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            if error.name == module_name:  # not written yet
                continue
            raise
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 0 if args.command is None else 2
    try:
        return int(args.handler(args) or 0)
    except ValueError as error:
        print(f"specdiff {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
