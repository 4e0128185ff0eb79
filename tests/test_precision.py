"""Issue 41, item 1: precision as a setting. The default dtype's detection (CPU flags mocked, so CI passes on a
machine without native bfloat16), a forced dtype reaching the verifier and its drafters, a distilled drafter
loading beside its verifier in either dtype (the fingerprint does not depend on dtype), and a refusal that never
names the same verifier twice."""
from __future__ import annotations

import pytest
import torch

from specdiff.lm import precision

VERIFIER = "smollm2-135m-instruct"


def test_the_default_is_bfloat16_only_where_the_hardware_computes_it(tmp_path):
    assert precision.default_dtype("cpu", {"avx2", "fma"}) == "float32"
    assert precision.default_dtype("cpu", {"avx512f", "avx512_bf16"}) == "bfloat16"
    assert precision.default_dtype("cpu", {"amx_bf16"}) == "bfloat16"
    assert precision.default_dtype("cuda:0", set()) == "bfloat16"
    assert "no native bfloat16" in precision.describe_default("cpu", {"avx2"})
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512_bf16\n")
    assert precision.cpu_flags(cpuinfo) == {"fpu", "avx2", "avx512_bf16"}
    assert precision.cpu_flags(tmp_path / "missing") == set()
    with pytest.raises(ValueError, match="unknown dtype 'fp8'"):
        precision.resolve("fp8")


@pytest.fixture(scope="module")
def fetched():
    from specdiff.checkpoints import fetched_dir

    if fetched_dir(VERIFIER) is None:
        pytest.skip(f"{VERIFIER} is not fetched (`specdiff models fetch {VERIFIER}`; CI fetches it)")
    return VERIFIER


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_drafters_follow_the_verifiers_dtype_and_distilled_ones_load_in_either(fetched, dtype):
    from specdiff import models

    verifier = models.load(fetched, dtype=dtype)
    assert next(verifier.model.parameters()).dtype == getattr(torch, dtype)
    for kind in ("dflash", "masked", "ar"):
        drafter = models.load(f"{fetched}-{kind}", role="drafter", verifier=verifier)
        assert next(drafter.model.parameters()).dtype == getattr(torch, dtype), kind


def test_the_fingerprint_is_the_same_in_both_dtypes_and_a_refusal_names_two_things(fetched):
    from specdiff import models
    from specdiff.zoo import distilled

    verifier = models.load(fetched, dtype="float32")
    assert distilled.fingerprint(verifier.model) == distilled.fingerprint(verifier.model.to(torch.bfloat16))
    verifier = models.load(fetched, dtype="float32")
    with torch.no_grad():
        verifier.model.get_input_embeddings().weight.mul_(1.5)  # another checkpoint under the same name
    with pytest.raises(distilled.WrongVerifier) as refusal:
        models.load(f"{fetched}-dflash", role="drafter", verifier=verifier)
    message = str(refusal.value)
    assert message.count(repr(fetched)) == 1 and "a different checkpoint under the same name" in message
