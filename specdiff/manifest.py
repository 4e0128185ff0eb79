"""Checksums of the shipped weights, so that a command can tell shipped weights from retrained ones.

A manifest is a small JSON file committed next to the weights it describes:

    {"files": {"verifier/model.safetensors": {"sha256": "...", "bytes": 4534264}, ...}}

with paths relative to the manifest's folder. `status(manifest, folder)` compares the files in
`folder` (the shipped one, or a copy such as SPECDIFF_ZOO_DIR) with the recorded checksums.
`record(manifest, folder, names)` rewrites entries: only a maintainer who ships new weights runs it.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

MANIFEST_NAME = "manifest.json"


def sha256_file(path: Path | str, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def read(manifest: Path | str) -> dict:
    """relative path -> {"sha256", "bytes"}; empty when the manifest is missing."""
    manifest = Path(manifest)
    if not manifest.exists():
        return {}
    return json.loads(manifest.read_text())["files"]


def status(manifest: Path | str, folder: Path | str, name: str) -> str:
    """"shipped" (the file matches its recorded checksum), "modified" (it differs: retrained or
    replaced), "missing" (no file), or "unrecorded" (no checksum in the manifest)."""
    path = Path(folder) / name
    if not path.exists():
        return "missing"
    entry = read(manifest).get(name)
    if entry is None:
        return "unrecorded"
    if path.stat().st_size != entry["bytes"]:
        return "modified"
    return "shipped" if sha256_file(path) == entry["sha256"] else "modified"


def record(manifest: Path | str, folder: Path | str, names: list[str]) -> dict:
    """Writes the current checksums of `names` (relative to `folder`) into the manifest; returns it."""
    manifest = Path(manifest)
    files = read(manifest)
    for name in names:
        path = Path(folder) / name
        files[name] = {"sha256": sha256_file(path), "bytes": path.stat().st_size}
    payload = {"comment": "sha256 of the shipped weights (specdiff/manifest.py): a retrained file shows as modified",
               "files": dict(sorted(files.items()))}
    manifest.write_text(json.dumps(payload, indent=1) + "\n")
    return payload
