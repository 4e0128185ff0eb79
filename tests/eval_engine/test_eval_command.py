"""`specdiff eval TASK` on the shipped testbed: it reproduces `specdiff demo`'s numbers for the same
configuration, scores HumanEval in the sandbox, and refuses bad input before any model loads."""
from __future__ import annotations

import json
import os

import pytest

from specdiff.cli import main

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

PROBLEMS = 4  # the first 4 arith test problems, max_new_tokens 96, seed 0, batch 1: the demo's setting
# demo row -> the `specdiff eval` flags of the same configuration (the demo's masked rows use the persistent cache)
SAME_CONFIG = {
    "masked K=2 B=8 Linear(0.2)": ["-K", "2", "-B", "8", "--rule", "linear", "--leniency", "0.2",
                                   "--prefix-cache", "persistent"],
    "masked K=4 B=16": ["-K", "4", "-B", "16", "--prefix-cache", "persistent"],
    "AR drafter, B=8": ["--drafter", "ar-drafter", "-B", "8"],
    "autoregressive (verifier)": ["--drafter", "none"],
}


def _eval(capsys, *argv) -> dict:
    assert main(["eval", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def demo_rows():
    """`specdiff demo --json` once (all eight configurations, 4 problems, its default 96 new tokens)."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["demo", "--json", "--problems", str(PROBLEMS), "--plot", ""]) == 0
    result = json.loads(out.getvalue())
    assert result["max_new_tokens"] == 96 and result["seed"] == 0
    return {row["config"]: row for row in result["rows"]}


@pytest.mark.parametrize("row", sorted(SAME_CONFIG))
def test_eval_arith_reproduces_the_demo(row, demo_rows, capsys):
    out = _eval(capsys, "arith", "-n", str(PROBLEMS), *SAME_CONFIG[row])
    demo = demo_rows[row]
    assert out["max_new_tokens"] == 96 and out["config"]["batch_size"] == 1 and out["seed"] == 0
    assert out["accuracy"] == demo["accuracy"] and out["accuracy_stderr"] == demo["accuracy_stderr"]
    assert out["exact"] == demo["exact"] and out["new_tokens"] == demo["new_tokens"]
    if "mean_accepted" in demo:
        assert out["mean_accepted"] == demo["mean_accepted"] and out["rounds"] == demo["rounds"]
    else:
        assert "mean_accepted" not in out
    assert len(out["records"]) == PROBLEMS
    assert sum(r["correct"] for r in out["records"]) == out["correct"] == round(out["accuracy"] * PROBLEMS)
    assert out["tokens_per_s"] > 0 and out["latency_s"] > 0


def test_eval_prints_the_figures(capsys):
    assert main(["eval", "arith", "-n", "2", "--max-new-tokens", "24", "-K", "2"]) == 0
    text = capsys.readouterr().out
    for label in ("accuracy", "±", "tokens/s", "latency/problem", "accepted/round", "exact"):
        assert label in text


def test_eval_humaneval_scores_in_the_sandbox(tmp_path, capsys):
    from specdiff.eval import sandbox

    if sandbox.unavailable_reason() is not None:
        pytest.skip("the sandbox is unavailable here")
    data = tmp_path / "he.jsonl"  # short prompts: the testbed's context is small
    rows = [{"task_id": "T/0", "prompt": "def add(a, b):\n", "canonical_solution": "    return a + b\n",
             "test": "def check(f):\n    assert f(1, 2) == 3\n", "entry_point": "add"},
            {"task_id": "T/1", "prompt": "def ten():\n", "canonical_solution": "    return 10\n",
             "test": "def check(f):\n    assert f() == 10\n", "entry_point": "ten"}]
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    out = _eval(capsys, "humaneval", "-n", "2", "--data", str(data), "--max-new-tokens", "16")
    assert [r["id"] for r in out["records"]] == ["T/0", "T/1"]
    for record in out["records"]:  # the arithmetic testbed writes no Python: each program fails, with its status
        assert record["correct"] is False and record["extracted"] in ("error", "timeout", "killed", "memory")
    assert out["accuracy"] == 0.0


@pytest.mark.parametrize("argv, message", [
    (["eval", "nosuchtask"], "unknown task 'nosuchtask'"),
    (["eval", "arith", "-n", "0"], "-n/--problems must be >= 1"),
    (["eval", "arith", "-n", "-3"], "-n/--problems must be >= 1"),
    (["eval", "gsm8k", "-n", "2"], "GSM8K data not found"),
    (["eval", "gsm8k", "--data", "BAD"], "BAD:1:"),
    (["eval", "arith", "--data", "x.jsonl"], "--data does not apply to arith"),
    (["eval", "humaneval", "--boxed"], "--boxed does not apply to humaneval"),
    (["eval", "arith", "-K", "0"], "--steps"),
    (["eval", "arith", "--max-new-tokens", "0"], "--max-new-tokens"),
    (["eval", "arith", "--temperature", "-1"], "--temperature"),
    (["eval", "arith", "--top-p", "0"], "--top-p"),
    (["eval", "arith", "--rule", "linear", "--leniency", "2"], "leniency"),
    (["eval", "arith", "--verifier", "no-such-model"], "unknown model 'no-such-model'"),
    (["eval", "arith", "--drafter", "no-such-model"], "unknown model 'no-such-model'"),
])
def test_bad_input_fails_before_models_load(argv, message, capsys, monkeypatch, tmp_path):
    from specdiff import models

    def no_loading(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(models, "load_model", no_loading)
    monkeypatch.setenv("SPECDIFF_DATA_DIR", str(tmp_path))  # no gsm8k file there
    monkeypatch.chdir(tmp_path)
    (tmp_path / "BAD").write_text("not json\n")
    try:
        code = main(argv)
    except SystemExit as exit_info:  # counts are refused by argparse
        code = exit_info.code
    assert code == 2
    assert message in capsys.readouterr().err
