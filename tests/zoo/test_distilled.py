"""The drafters distilled for SmolLM2-135M-Instruct and shipped (issues 31, 32; `specdiff.zoo.distilled`): their
files and checksums, the 20 MB budget for every weight shipped for one real verifier, no weight equal to
the verifier's (embeddings, LM head) stored, and the names `--drafter dflash|ar|masked` and the defaults resolve to.
None of this needs the verifier itself (tests/real loads and runs them)."""
from __future__ import annotations

import json

import pytest

from specdiff import manifest
from specdiff.zoo import distilled

VERIFIER = "smollm2-135m-instruct"
BUDGET_BYTES = 28 * 1000 * 1000  # issue 40 (20 MB in issue 31)


def test_every_kind_is_shipped_with_checksums_and_within_the_budget():
    names = [distilled.shipped_for(VERIFIER, kind) for kind in ("dflash", "ar", "masked")]
    assert names == [f"{VERIFIER}-dflash", f"{VERIFIER}-ar", f"{VERIFIER}-masked"]
    record = distilled.DISTILLED_DIR / manifest.MANIFEST_NAME
    total = 0
    for name in distilled.names():
        weights = f"{name}/model.safetensors"
        assert manifest.status(record, distilled.DISTILLED_DIR, weights) == "shipped", weights
        config = json.loads((distilled.DISTILLED_DIR / name / "config.json").read_text())
        assert config["specdiff_target"] == VERIFIER and len(config["specdiff_target_fingerprint"]) == 16
        if config["specdiff_role"] in ("distilled-dflash", "distilled-masked"):
            assert manifest.status(record, distilled.DISTILLED_DIR, f"{name}/draft_vocab.json") == "shipped"
        if name.startswith(VERIFIER + "-"):
            total += (distilled.DISTILLED_DIR / weights).stat().st_size
    assert total <= BUDGET_BYTES, f"{total} bytes of weights shipped for {VERIFIER}"


@pytest.mark.parametrize("kind", ["dflash", "ar", "masked"])
def test_no_shipped_tensor_is_the_verifiers_embedding_or_head(kind):
    from safetensors import safe_open

    path = distilled.DISTILLED_DIR / f"{VERIFIER}-{kind}" / "model.safetensors"
    with safe_open(str(path), "pt") as handle:
        for name in handle.keys():
            assert "embed_tokens" not in name and "lm_head" not in name, name
            assert handle.get_slice(name).get_dtype() == "F16"


@pytest.mark.parametrize("kind", ["dflash", "masked"])
def test_the_draft_vocabulary_is_a_set_of_distinct_verifier_ids_with_eos(kind):
    d2t = json.loads((distilled.DISTILLED_DIR / f"{VERIFIER}-{kind}" / "draft_vocab.json").read_text())[
        "draft_to_target"]
    assert len(d2t) == len(set(d2t)) == 8192 and 2 in d2t and max(d2t) < 49152  # <|im_end|> = 2


def test_dflash_and_ar_name_the_verifiers_own_drafters_and_dflash_is_its_default():
    from specdiff import models as kinds
    from specdiff.bench import settings, speedup

    def default_drafters(verifier):  # the real preset's drafters for a verifier: its own distilled ones, then the
        # model-free ones (lookup; datastore and hybrid where the verifier has distillation data and a drafter)
        return list(speedup.drafter_references(settings.build("real", {"verifier": verifier})).values())

    assert kinds.default_model_drafter(VERIFIER) == f"{VERIFIER}-dflash"  # the hybrid's model part
    assert kinds.default_drafter(VERIFIER) == kinds.default_choice(VERIFIER)["drafter"]  # the recorded fastest (#51)
    assert kinds.resolve("dflash", VERIFIER) == ("dflash", f"{VERIFIER}-dflash")
    assert kinds.resolve("ar", VERIFIER) == ("ar", f"{VERIFIER}-ar")
    assert kinds.resolve("masked", VERIFIER) == ("masked", f"{VERIFIER}-masked")
    assert kinds.resolve("ar", "verifier") == ("ar", "ar-drafter")  # the testbed keeps its own
    assert kinds.resolve("masked", "verifier") == ("masked", "masked-drafter")
    assert kinds.default_drafter("verifier") == "masked-drafter"
    assert default_drafters(VERIFIER) == [f"{VERIFIER}-dflash", f"{VERIFIER}-ar", f"{VERIFIER}-masked", "lookup",
                                          "datastore", "hybrid"]
    assert default_drafters("some-other-model") == ["lookup"]
    with pytest.raises(ValueError, match=f"{VERIFIER}-dflash or {VERIFIER}-ar"):
        kinds.check_pair("masked-drafter", VERIFIER)  # the refusal names the drafters that do fit
