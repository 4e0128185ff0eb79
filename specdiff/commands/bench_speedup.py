"""`specdiff bench speedup` and `specdiff bench tune` (the bench: `specdiff.bench`): parse, call, print.

Every option means the same on every suite; its help and default come from `specdiff.bench.settings.Settings`
and the shipped presets. Flags that left the help keep working as deprecated aliases (`ALIASES`): each warns,
naming its replacement.
"""
from __future__ import annotations

import argparse
import json
import sys
import warnings

from specdiff.argtypes import nonnegative_int, positive_int, threshold

# old flag -> (nargs, type, the setting it sets, how its value becomes that setting's)
ALIASES = {
    "--steps": ("+", positive_int, "steps", None), "--blocks": ("+", positive_int, "blocks", None),
    "--caches": ("+", str, "caches", None), "--block-steps": ("+", positive_int, "kinds.block.steps", None),
    "--block-taus": ("+", threshold, "kinds.block.thresholds", None),
    "--uniform-steps": ("+", positive_int, "kinds.uniform.steps", None),
    "--controllers": ("+", str, "controllers", "none"), "--kind-controllers": ("+", str, "kind_controllers", "none"),
    "--adaptive-steps": ("+", positive_int, "adaptive_steps", None),
    "--adaptive-blocks": ("+", positive_int, "adaptive_blocks", None),
    "--tradeoff-steps": ("*", positive_int, "tradeoff_steps", None), "--leniency": ("*", str, "leniency", None),
    "--leniency-steps": ("+", positive_int, "leniency_steps", None),
    "--tune-problems": (None, positive_int, "tune_problems", None),
    "--tune-max-new-tokens": (None, positive_int, "tune_max_new_tokens", None),
    "--tune-repeats": (None, positive_int, "tune_repeats", None),
    "--lookup-ngrams": ("+", positive_int, "ngrams", None),
    "--hf-lookup-tokens": ("+", positive_int, "hf_lookup_tokens", None),
    "--hf-assistant": (None, str, "hf_assistant", None),
    "--temperature": (None, float, "sampling.temperature", None), "--top-p": (None, float, "sampling.top_p", None),
    "--top-k": (None, int, "sampling.top_k", None),
}
FLAG_TYPES = {"problems": positive_int, "first_problem": nonnegative_int,
              "repeats": positive_int, "max_new_tokens": positive_int, "threads": positive_int, "seed": int}


def register(which) -> None:
    for name, helptext in (("speedup", "speculative diffusion vs plain, HF and HF-assisted decoding on the testbed "
                                       "or a real verifier (JSON)"),
                           ("tune", "choose the bench's configurations on validation prompts and write them")):
        parser = which.add_parser(name, help=helptext, description=helptext, epilog=_epilog(),
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
        _arguments(parser, tune=name == "tune")
        parser.set_defaults(handler=run_tune if name == "tune" else run)


def run(args) -> int:
    from specdiff.bench import speedup, tuner

    settings = _settings(args)
    tuning = tuner.read(args.tuning, settings.verifier) if args.tuning else None
    print(json.dumps(speedup.speedup(settings, tuning, _say), indent=1))
    return 0


def run_tune(args) -> int:
    from specdiff.bench import speedup, tuner

    settings = _settings(args)
    tuning = speedup.tune(settings, _say)
    tuner.write(tuning, args.out)
    _say(f"wrote {args.out}: {', '.join(sorted(tuning['chosen']))}")
    if args.json:
        print(json.dumps(tuning["chosen"], indent=1))
    return 0


def _say(*parts) -> None:
    print(*parts, file=sys.stderr, flush=True)


def _arguments(parser, tune: bool) -> None:
    from specdiff.bench.settings import defaults_text, settings_fields

    parser.add_argument("--json", action="store_true", help="print only the JSON result (progress goes to stderr)")
    for field in settings_fields(flag=True):
        flag = "--" + field.name.replace("_", "-")
        help_text = f"{field.metadata['help']} ({defaults_text(field.name)})"
        if field.name == "drafters":
            parser.add_argument(flag, action="append", metavar=field.metadata["metavar"], help=help_text)
        elif field.name == "sampling":
            parser.add_argument(flag, metavar=field.metadata["metavar"], help=help_text)
        elif field.name == "dtype":
            parser.add_argument(flag, choices=("float32", "bfloat16"), metavar=field.metadata["metavar"], help=help_text)
        else:
            parser.add_argument(flag, type=FLAG_TYPES.get(field.name, str), metavar=field.metadata["metavar"],
                                help=help_text)
    parser.add_argument("--preset", metavar="NAME|PATH",
                        help="grids and sizes: a shipped preset (testbed, real) or a TOML file (default: real for a "
                             "real verifier, else testbed)")
    if tune:
        parser.add_argument("--out", default="bench_tuning.json", metavar="FILE",
                            help="where the tuning is written (default bench_tuning.json)")
    else:
        parser.add_argument("--tuning", metavar="FILE", help="measure the configurations of a `specdiff bench tune` "
                                                             "file (no tuning); default: tune first, on validation")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="any other setting (listed below), VALUE in TOML: --set blocks=[4,8] --set "
                             "kinds.block.steps=[2,4]")
    for flag, (nargs, kind, _, _) in ALIASES.items():
        parser.add_argument(flag, nargs=nargs, type=kind, default=None, dest="alias_" + flag[2:].replace("-", "_"),
                            help=argparse.SUPPRESS)


def _epilog() -> str:
    from specdiff.bench.settings import defaults_text, settings_fields

    lines = ["settings (--set KEY=VALUE; presets in specdiff/bench/presets):"]
    for field in settings_fields(flag=False):
        lines.append(f"  {field.name}: {field.metadata['help']} ({defaults_text(field.name)})")
    lines.append("deprecated flags (each warns and names its --set replacement): " + " ".join(ALIASES))
    return "\n".join(lines)


def _settings(args):
    """The flags, --set values and deprecated aliases -> `Settings` (the preset under them)."""
    from specdiff import models
    from specdiff.bench import settings as settings_

    given = {}
    for field in settings_.settings_fields(flag=True):
        value = getattr(args, field.name)
        if value is None:
            continue
        if field.name == "drafters":
            value = [part for entry in value for part in entry.split(",") if part.strip()]
        elif field.name == "sampling":
            value = _pairs(value)
        given[field.name] = value
    for entry in args.set:
        key, sep, text = entry.partition("=")
        if not sep:
            raise ValueError(f"--set {entry!r}: expected KEY=VALUE")
        _put(given, key.strip(), settings_.parse_value(text.strip()))
    for flag, (_, _, key, none) in ALIASES.items():
        value = getattr(args, "alias_" + flag[2:].replace("-", "_"))
        if value is None:
            continue
        if none is not None and value == [none]:
            value = []
        replacement = (f"--sampling {key.split('.')[1]}={value}" if key.startswith("sampling.")
                       else f"--set {key}={json.dumps(value, separators=(',', ':'))}")
        warnings.warn(f"{flag} is deprecated; use {replacement}", FutureWarning, stacklevel=2)
        _put(given, key, value)
    preset = args.preset or ("real" if models.is_real(given.get("verifier", "verifier")) else "testbed")
    return settings_.build(preset, given)


def _put(given: dict, key: str, value) -> None:
    """Sets a (dotted) setting: "blocks", "sampling.top_p", "kinds.block.steps"."""
    head, *rest = key.split(".")
    if not rest:
        given[head] = value
        return
    target = given.setdefault(head, {})
    for part in rest[:-1]:
        target = target.setdefault(part, {})
    target[rest[-1]] = value


def _pairs(text: str) -> dict:
    from specdiff.bench.settings import parse_value

    out = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep:
            raise ValueError(f"--sampling {text!r}: expected KEY=VALUE pairs (temperature=0.7,top_p=0.9)")
        out[key.strip()] = parse_value(value.strip())
    return out
