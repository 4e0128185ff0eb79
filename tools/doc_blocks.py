"""What the table generators of tools/ share: a generated block of a markdown file, between the lines
`<!-- NAME: begin -->` and `<!-- NAME: end -->`, written (`--update`) or compared (`--check`), and a whole
generated file written or compared. A check prints a unified diff and returns 1 when the committed text
differs from what the generator would write (tests/test_tools_check.py runs every generator's check).
"""
from __future__ import annotations

import difflib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}: begin -->", f"<!-- {name}: end -->"


def block(doc: Path, name: str) -> str:
    """The text between NAME's markers in doc (an error naming them when absent)."""
    begin, end = markers(name)
    text = Path(doc).read_text()
    if begin not in text or end not in text:
        raise SystemExit(f"{doc} has no {begin} ... {end} block")
    return text.split(begin, 1)[1].split(end, 1)[0].removeprefix("\n")


def update(doc: Path, name: str, text: str) -> None:
    """Replace NAME's block of doc by text (ending with a newline)."""
    begin, end = markers(name)
    block(doc, name)  # present
    head, rest = Path(doc).read_text().split(begin, 1)
    tail = rest.split(end, 1)[1]
    Path(doc).write_text(f"{head}{begin}\n{text}{end}{tail}")


def compare(committed: str, generated: str, label: str) -> int:
    """0 when equal; else print a unified diff (committed -> generated) and return 1."""
    if committed == generated:
        print(f"{label}: up to date")
        return 0
    sys.stdout.writelines(difflib.unified_diff(committed.splitlines(True), generated.splitlines(True),
                                               f"{label} (committed)", f"{label} (generated)"))
    print(f"\n{label}: differs from what the generator writes", file=sys.stderr)
    return 1


def check_block(doc: Path, name: str, text: str) -> int:
    return compare(block(doc, name), text, f"{doc} [{name}]")


def check_file(path: Path, text: str | bytes) -> int:
    """Compare a whole generated file (bytes are compared as bytes: figures)."""
    path = Path(path)
    if isinstance(text, bytes):
        same = path.is_file() and path.read_bytes() == text
        print(f"{path}: {'up to date' if same else 'differs from what the generator writes'}",
              file=sys.stdout if same else sys.stderr)
        return 0 if same else 1
    return compare(path.read_text() if path.is_file() else "", text, str(path))


def write_or_check(doc: Path, name: str, text: str, check: bool, update_doc: bool) -> int:
    """The common tail of a block generator: --check compares, --update writes, else print."""
    if check:
        return check_block(doc, name, text)
    if update_doc:
        update(doc, name, text)
        return 0
    sys.stdout.write(text)
    return 0
