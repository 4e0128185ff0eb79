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


@pytest.mark.numerics  # kernel-dependent (issue 54): run again under other kernels by scripts/numerics_kernels.sh
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


@pytest.mark.parametrize("argv", [["generate", "x"], ["eval"], ["sweep", "c.toml", "--store", "s.sqlite"],
                                  ["distill", "--verifier", "v", "--kind", "ar", "--out", "o"],
                                  ["distill", "data", "--verifier", "v", "--shards", "1"], ["bench", "speedup"],
                                  ["bench", "vllm"]])
def test_every_command_that_loads_a_real_model_takes_a_dtype(argv):
    from specdiff.cli import build_parser

    parser = build_parser()
    assert parser.parse_args([*argv, "--dtype", "bfloat16"]).dtype == "bfloat16"
    assert parser.parse_args(argv).dtype is None  # the default rule, applied where the models load
    with pytest.raises(SystemExit):
        parser.parse_args([*argv, "--dtype", "float16"])


def test_the_output_says_which_dtype_and_why(monkeypatch):
    assert precision.describe("bfloat16", "bfloat16") == "bfloat16 (--dtype)"
    assert precision.describe("float32", "bfloat16").startswith("float32 (the testbed's models")
    monkeypatch.setattr(precision, "cpu_flags", lambda cpuinfo="": {"avx2"})
    assert precision.describe("float32", None).startswith("float32 (default: this CPU has no native bfloat16")
    monkeypatch.setattr(precision, "cpu_flags", lambda cpuinfo="": {"avx512_bf16"})
    assert precision.describe("bfloat16", None).startswith("bfloat16 (default: this CPU has native bfloat16")
    assert precision.describe("float32", None).startswith("float32 (the testbed's models")


def test_the_testbed_stays_float32_whatever_is_asked(capsys):
    from specdiff.cli import main

    prompt = "Tom has 4 bags of coins with 3 coins in each. How many coins does Tom have now?"
    assert main(["generate", prompt, "--max-new-tokens", "8", "--dtype", "bfloat16", "--json"]) == 0
    import json

    assert json.loads(capsys.readouterr().out)["dtype"] == "float32"
    assert main(["generate", prompt, "--max-new-tokens", "8", "--dtype", "bfloat16"]) == 0
    assert "dtype: float32 (the testbed's models always run in float32)" in capsys.readouterr().out


@pytest.mark.numerics  # kernel-dependent (issue 54): run again under other kernels by scripts/numerics_kernels.sh
def test_generate_runs_the_real_verifier_in_the_dtype_asked_and_says_so(fetched, capsys):
    import json

    from specdiff.cli import main

    for dtype in ("bfloat16", "float32"):
        assert main(["generate", "--chat", "Name three colours.", "--verifier", fetched, "--drafter", "lookup",
                     "--max-new-tokens", "6", "--temperature", "0", "--dtype", dtype, "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["dtype"] == dtype and out["generations"][0]["stats"]["new_tokens"] > 0
    assert main(["generate", "--chat", "Name three colours.", "--verifier", fetched, "--drafter", "lookup",
                 "--max-new-tokens", "6", "--temperature", "0"]) == 0
    assert f"dtype: {precision.describe_default('cpu')}" in capsys.readouterr().out
