"""Issue 52, item 1: a model name or path is resolved once, where it enters, into a frozen `ModelRef`; everything
below takes the resolved value. Resolution reads no weights."""
from __future__ import annotations

import dataclasses

import pytest

from specdiff import models
from specdiff.models import ModelCache, ModelRef, pair, ref


def test_a_kind_names_its_zoo_model_and_a_zoo_name_its_kind():
    masked = ref("masked")
    assert (masked.role, masked.source, masked.kind, masked.reference, masked.dtype) == (
        "drafter", "zoo", "masked", "masked-drafter", "float32")
    assert ref("masked-drafter").kind == "masked" and ref("masked-drafter").reference == "masked-drafter"
    assert masked.testbed and not masked.real and masked.needs_model
    assert masked.path.name == "masked-drafter"


def test_a_model_free_kind_and_a_verifier():
    lookup = ref("lookup")
    assert (lookup.source, lookup.kind, lookup.reference, lookup.path) == ("modelless", "lookup", "lookup", None)
    assert not lookup.needs_model
    verifier = ref("verifier", "verifier")
    assert (verifier.role, verifier.source, verifier.kind, verifier.reference) == ("verifier", "zoo", None, "verifier")
    folder = ref("/no/such/folder", "verifier")  # a verifier's folder is checked where it is loaded
    assert folder.source == "folder" and folder.real


def test_the_reference_is_frozen_and_passes_through():
    masked = ref("masked")
    with pytest.raises(dataclasses.FrozenInstanceError):
        masked.kind = "block"
    assert ref(masked) is masked and str(masked) == "masked"
    assert models.resolve("masked") == ("masked", "masked-drafter")  # the old tuple, from the reference


def test_an_unknown_drafter_is_refused_naming_what_it_is_not():
    with pytest.raises(ValueError, match="unknown drafter 'no-such-drafter' .*not a kind"):
        ref("no-such-drafter")
    with pytest.raises(ValueError, match="unknown role"):
        ref("masked", "teacher")


def test_the_zoo_verifier_is_no_drafter():
    """As before issue 52's refs work: the testbed's verifier named as a drafter is refused (it used to be taken as
    an AR drafter once names were resolved by `ref`), while it stays a verifier and a tokenizer's name."""
    with pytest.raises(models.UnknownDrafter, match=r"^unknown drafter 'verifier' \(unknown model\): not a kind"):
        ref("verifier")
    assert ref("verifier", "verifier").testbed


def test_a_pair_refuses_a_testbed_drafter_for_a_real_verifier_before_any_weights(tmp_path):
    (tmp_path / "config.json").write_text('{"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3"}')
    with pytest.raises(ValueError, match="do not fit the vocabulary of the real verifier"):
        pair("masked", str(tmp_path))
    drafter, verifier = pair("lookup", str(tmp_path))
    assert drafter.kind == "lookup" and verifier.given == str(tmp_path) and drafter.target == str(tmp_path)
    drafter, verifier = pair("masked", "verifier")
    assert drafter.reference == "masked-drafter" and verifier.testbed


def test_a_cache_resolves_each_name_once(monkeypatch):
    cache, calls = ModelCache(dtype="float32"), []
    real = models.ref

    def counting(name, role="drafter", verifier=None):
        calls.append((name, role))
        return real(name, role, verifier)
    monkeypatch.setattr(models, "ref", counting)
    first = cache.ref("masked")
    assert cache.ref("masked") is first and cache.kind("masked") == "masked" and calls == [("masked", "drafter")]
    assert isinstance(first, ModelRef)
