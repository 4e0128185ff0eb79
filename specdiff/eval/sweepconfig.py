"""Sweep configuration files: TOML checked against a schema, every error naming its line.

A schema maps each section (`[models]`, `[grid]`, dotted `[task.options]`...) to its keys, each a
`Field`: its type, whether it is a list (the grid's axes are), whether it is required, its default,
its allowed choices or numeric range. `check_config` returns the sections with defaults filled in,
or raises `ConfigError` ("CONFIG.toml:7: [grid] lam: 1.5 is outside [0, 1]", then the line itself)
for the first problem found: a TOML syntax error, an unknown section or key, a missing key, a value
of the wrong type or out of range. Nothing has run when it does. `expand_grid` makes every
combination of the grid's lists one configuration.

tomllib gives no positions, so `key_lines` finds them in the text: table headers and `key =` lines
(a multi-line array is reported at the line of its key).
"""
from __future__ import annotations

import itertools
import math
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HEADER = re.compile(r"^\s*\[\s*([A-Za-z0-9_.\-]+)\s*\]\s*(#.*)?$")
KEY = re.compile(r"^\s*([A-Za-z0-9_\-]+)\s*=")


class ConfigError(ValueError):
    """A configuration file that cannot be used: `path:line: problem`, then the offending line."""

    def __init__(self, path: str | Path, line: int | None, problem: str, text: str | None = None):
        self.path, self.line, self.problem = str(path), line, problem
        where = f"{path}:{line}" if line else str(path)
        shown = f"\n    {line}: {text.rstrip()}" if line and text is not None else ""
        super().__init__(f"{where}: {problem}{shown}\nNothing was run.")


@dataclass(frozen=True)
class Field:
    """One key of a section. kind: "str" | "int" | "float" | "bool" | "table"; `many`: a list of
    them (a grid axis); low/high: an inclusive range, `low_open` excludes `low`."""

    kind: str
    help: str = ""
    required: bool = False
    default: Any = None
    many: bool = False
    choices: tuple | None = None
    low: float | None = None
    high: float | None = None
    low_open: bool = False

    def describe_range(self) -> str:
        left = "(" if self.low_open else "["
        high = "inf)" if self.high is None else f"{self.high:g}]"
        return f"{left}{self.low:g}, {high}"


class ConfigText:
    """A TOML file's text and where each of its sections and keys is."""

    def __init__(self, path: str | Path, text: str | None = None):
        self.path = Path(path)
        if text is None:
            try:
                text = self.path.read_text()
            except OSError as error:
                raise ConfigError(path, None, f"cannot read it ({error.strerror or error})") from None
        self.text, self.lines = text, text.splitlines()
        try:
            self.data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as error:
            found = re.search(r"at line (\d+)", str(error))
            line = int(found.group(1)) if found else None
            raise ConfigError(path, line, f"not valid TOML ({error})", self.line_text(line)) from None
        self.positions = key_lines(self.lines)

    def line_text(self, line: int | None) -> str | None:
        return self.lines[line - 1] if line and 0 < line <= len(self.lines) else None

    def line_of(self, section: str, key: str | None = None) -> int | None:
        return (self.positions.get((section, key)) or self.positions.get((f"{section}.{key}", None))
                or self.positions.get((section, None)))

    def error(self, section: str, key: str | None, problem: str) -> ConfigError:
        line = self.line_of(section, key)
        return ConfigError(self.path, line, problem, self.line_text(line))


def key_lines(lines: list[str]) -> dict[tuple[str, str | None], int]:
    """(section, key) -> 1-based line number; (section, None) is the section's header. Keys before any
    header are in section ""."""
    positions, section = {}, ""
    for number, line in enumerate(lines, start=1):
        header = HEADER.match(line)
        if header:
            section = header.group(1)
            positions.setdefault((section, None), number)
            continue
        key = KEY.match(line)
        if key:
            positions.setdefault((section, key.group(1)), number)
    return positions


def _check_value(value: Any, field: Field, where: str) -> Any:
    """The value converted to the field's type (int -> float where a float is asked); ValueError otherwise."""
    kind = field.kind
    if kind == "bool":
        if not isinstance(value, bool):
            raise ValueError(f"{where}: expected true or false, got {value!r}")
        return value
    if kind == "str":
        if not isinstance(value, str):
            raise ValueError(f"{where}: expected a string, got {value!r}")
        if field.choices is not None and value not in field.choices:
            raise ValueError(f"{where}: unknown value {value!r}; expected one of {', '.join(map(repr, field.choices))}")
        return value
    if kind in ("int", "float"):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind == "int" and not isinstance(value, int)):
            raise ValueError(f"{where}: expected {'an integer' if kind == 'int' else 'a number'}, got {value!r}")
        if not math.isfinite(value):
            raise ValueError(f"{where}: expected a finite number, got {value!r}")
        too_low = field.low is not None and (value <= field.low if field.low_open else value < field.low)
        too_high = field.high is not None and value > field.high
        if too_low or too_high:
            raise ValueError(f"{where}: {value!r} is outside {field.describe_range()}")
        return float(value) if kind == "float" else value
    if kind == "table":
        if not isinstance(value, dict):
            raise ValueError(f"{where}: expected a table, got {value!r}")
        return value
    raise AssertionError(f"unknown field kind {kind!r}")


def check_section(config: ConfigText, section: str, values: dict, schema: dict[str, Field]) -> dict:
    """One section's values checked against its fields, defaults filled in."""
    out = {}
    for key in values:
        if key not in schema:
            raise config.error(section, key, f"[{section}] has no key {key!r}; known keys: {', '.join(schema)}")
    for key, field in schema.items():
        where = f"[{section}] {key}"
        if key not in values:
            if field.required:
                raise config.error(section, None, f"{where} is required ({field.help})")
            out[key] = field.default
            continue
        value = values[key]
        try:
            if field.many:
                items = value if isinstance(value, list) else None
                if not items:
                    raise ValueError(f"{where}: expected a non-empty list such as [1, 2], got {value!r}")
                items = [_check_value(item, field, where) for item in items]
                if len(set(map(repr, items))) != len(items):
                    raise ValueError(f"{where}: a value is listed twice in {value!r}")
                out[key] = items
            else:
                out[key] = _check_value(value, field, where)
        except ValueError as error:
            raise config.error(section, key, str(error)) from None
    return out


def check_config(config: ConfigText, schema: dict[str, dict[str, Field]], required_sections=()) -> dict:
    """Every section checked (see the module docstring); returns {section: {key: value}}. Dotted
    sections ("task.options") come back under their dotted name; a section whose schema is None takes
    any keys (its caller checks them)."""
    flat = {}

    def walk(prefix: str, table: dict):
        plain = {}
        for key, value in table.items():
            name = f"{prefix}.{key}" if prefix else key
            if isinstance(value, dict) and name in schema:
                walk(name, value)
            elif isinstance(value, dict) and not prefix:
                raise config.error(key, None, f"unknown section [{key}]; known sections: "
                                              f"{', '.join(s for s in schema if '.' not in s)}")
            else:
                plain[key] = value
        if prefix:
            flat[prefix] = plain
        elif plain:
            key = next(iter(plain))
            raise config.error("", key, f"{key!r} is outside any section; put it under one of "
                                        f"{', '.join(f'[{s}]' for s in schema)}")

    walk("", config.data)
    for section in required_sections:
        if section not in flat:
            raise ConfigError(config.path, None, f"the section [{section}] is missing")
    return {section: dict(flat.get(section, {})) if fields is None else
            check_section(config, section, flat.get(section, {}), fields) for section, fields in schema.items()}


def expand_grid(axes: dict[str, list]) -> list[dict]:
    """Every combination of the axes' values (the last axis varies fastest)."""
    names = list(axes)
    return [dict(zip(names, values)) for values in itertools.product(*(axes[name] for name in names))]
