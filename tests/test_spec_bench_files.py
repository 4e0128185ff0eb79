"""Issue 41, item 6: the Spec-Bench file (48 first turns, 8 per category, `tools/spec_bench_subset.py`) is
measured only, and tuned on the project's own validation prompts of the same six kinds, which share nothing
with it."""
from __future__ import annotations

import json
from collections import Counter

import pytest

from specdiff.bench import settings as settings_
from specdiff.bench import suites
from specdiff.runs import prompts

KINDS = {"mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag"}


def _rows(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_the_files_hold_the_six_kinds_and_share_no_prompt():
    bench, validation = _rows(prompts.SPEC_BENCH_FILE), _rows(prompts.SPEC_VALIDATION_FILE)
    assert Counter(r["kind"] for r in bench) == {kind: 8 for kind in KINDS}
    assert Counter(r["kind"] for r in validation) == {kind: 6 for kind in KINDS}
    texts = {r["messages"][0]["content"] for r in bench}
    assert not texts & {r["messages"][0]["content"] for r in validation}
    assert len({r["id"] for r in bench + validation}) == len(bench) + len(validation)


def test_spec_bench_is_tuned_on_the_six_kinds_validation_prompts_and_they_are_never_measured():
    settings = settings_.build("real", {"verifier": "smollm2-135m-instruct",
                                        "prompts_file": str(prompts.SPEC_BENCH_FILE)})
    suite = suites.suite(settings, tokenizer=None)  # prompts are read when first asked for
    assert suite.tuned_on.startswith("spec_validation.jsonl") and suite.validation_size == 36
    default = suites.suite(settings_.build("real", {"verifier": "smollm2-135m-instruct"}), tokenizer=None)
    assert default.tuned_on.startswith("real_validation.jsonl")
    for shipped in prompts.VALIDATION_FILES:
        with pytest.raises(ValueError, match="validation sets, which it tunes on"):
            prompts.check_prompts_file(shipped)
    same = settings_.build("real", {"verifier": "smollm2-135m-instruct", "prompts_file": str(prompts.SPEC_BENCH_FILE),
                                    "validation_file": str(prompts.SPEC_BENCH_FILE)})
    with pytest.raises(ValueError, match="both measured and tuned on"):
        suites.suite(same, tokenizer=None)


def test_the_spec_bench_preset_measures_the_file_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    settings = settings_.build("spec_bench", {"verifier": "smollm2-135m-instruct"})
    suite = suites.suite(settings, tokenizer=None)
    assert suite.measured_on.endswith("spec_bench48.jsonl") and suite.tuned_on.startswith("spec_validation.jsonl")
    assert settings.trees and settings.repeats == 1 and settings.sampling == {"temperature": 0.0}
