"""argparse `type=` validators shared by the subcommands: a bad value is refused when the arguments
are parsed, before any model loads, by an error that names the flag.

    parser.add_argument("-n", type=positive_int)            # "argument -n: must be an integer >= 1, got '0'"
    parser.add_argument("--plot", type=output_file(".png"))  # parent folder must exist and be writable
    parser.add_argument("--out-dir", type=output_dir)        # a folder, or a new one in an existing folder

argparse prefixes each message with the flag ("argument --steps: ..."), prints the usage line and
exits with status 2. Counts come as `positive_int` (>= 1) or `nonnegative_int` (>= 0); fractions
in a closed interval as `unit_interval`. Paths are checked, not created: the commands write them
at the end, and here only learn early that they could.
"""
from __future__ import annotations

import argparse
import math
import os
from pathlib import Path

__all__ = ["positive_int", "nonnegative_int", "unit_interval", "positive_float", "output_file", "output_dir"]


def _integer(text: str) -> int:
    try:
        return int(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None


def positive_int(text: str) -> int:
    """A count that must be at least 1 (samples, steps, repeats, batch size, threads, workers...)."""
    value = _integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
    return value


def nonnegative_int(text: str) -> int:
    """A count that may be 0 (e.g. `--fd-samples 0`: skip the Frechet distance)."""
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text!r}")
    return value


def _real(text: str) -> float:
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0 (a temperature, a learning rate)."""
    value = _real(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text!r}")
    return value


def unit_interval(text: str) -> float:
    """A finite number in [0, 1] (a churn, a decay, a leniency)."""
    value = _real(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must lie in [0, 1], got {text!r}")
    return value


def threshold(text: str) -> float:
    """A confidence threshold tau in (0, 1]."""
    value = _real(text)
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"must lie in (0, 1], got {text!r}")
    return value


def _writable_folder(folder: Path, text: str) -> None:
    if not folder.exists():
        raise argparse.ArgumentTypeError(f"folder {str(folder)!r} of {text!r} does not exist (create it first)")
    if not folder.is_dir():
        raise argparse.ArgumentTypeError(f"{str(folder)!r} in {text!r} is not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"folder {str(folder)!r} of {text!r} is not writable")


def output_file(*suffixes: str):
    """A `type=` for a file the command will write: its folder exists and is writable, it is not a
    folder itself, and (if `suffixes` are given) it ends in one of them, e.g. output_file(".png")."""

    def check(text: str) -> str:
        if not text or text.endswith(("/", os.sep)) or Path(text).is_dir():
            raise argparse.ArgumentTypeError(f"{text!r} is a folder; give a file name")
        path = Path(text).expanduser()
        if suffixes and path.suffix.lower() not in suffixes:
            raise argparse.ArgumentTypeError(f"{text!r} must end in {' or '.join(suffixes)}")
        _writable_folder(path.parent if str(path.parent) else Path("."), text)
        return str(path)

    check.__name__ = "output_file"  # argparse names the type in some messages
    return check


def output_dir(text: str) -> str:
    """A `type=` for a folder the command will write into: it exists and is writable, or it does not
    exist yet and its parent is a writable folder (the command creates the last level only)."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path is not a folder")
    path = Path(text).expanduser()
    if path.exists():
        if not path.is_dir():
            raise argparse.ArgumentTypeError(f"{text!r} exists and is not a folder")
        _writable_folder(path, text)
    else:
        _writable_folder(path.parent, text)
    return str(path)
