"""What the table generators of tools/ share: a generated block of a markdown file, between the lines
`<!-- NAME: begin -->` and `<!-- NAME: end -->`, written (`--update`) or compared (`--check`), and a whole
generated file written or compared. A check prints a unified diff and returns 1 when the committed text
differs from what the generator would write (tests/test_tools_check.py runs every generator's check).
"""
from __future__ import annotations

import contextlib
import difflib
import lzma
import sys
import tempfile
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


@contextlib.contextmanager
def readable_store(path):
    """A committed SQLite store by its documented name: `X.sqlite` itself when decompressed, else a temporary
    copy of the committed `X.sqlite.xz` (removed afterwards), so that a check needs no `xz -dk` first."""
    path = Path(path)
    packed = path.with_name(path.name + ".xz")
    if path.is_file() or not packed.is_file():
        yield path
        return
    with tempfile.TemporaryDirectory() as folder:
        copy = Path(folder) / path.name
        copy.write_bytes(lzma.decompress(packed.read_bytes()))
        yield copy


def check_figure(path: Path, data: bytes) -> int:
    """A generated PNG against the committed one, byte for byte when both were drawn by this matplotlib version
    (its `Software` text chunk); drawn by another version, the pixels may differ by rasterisation alone, so a
    difference is reported and not counted (regenerate the figure with --update to compare again)."""
    path = Path(path)
    committed = path.read_bytes() if path.is_file() else b""
    if committed == data:
        print(f"{path}: up to date")
        return 0
    mine, theirs = _software(data), _software(committed)
    if committed and mine != theirs:
        print(f"{path}: differs, but it was drawn by {theirs or 'an unknown writer'} and this is {mine}: not compared")
        return 0
    print(f"{path}: differs from what the generator draws", file=sys.stderr)
    return 1


def _software(png: bytes) -> str | None:
    """The `Software` tEXt chunk of a PNG (matplotlib writes its version there)."""
    at = png.find(b"tEXtSoftware\x00")
    if at < 0:
        return None
    length = int.from_bytes(png[at - 4:at], "big")
    return png[at + 13:at + 4 + length].decode("latin-1")
