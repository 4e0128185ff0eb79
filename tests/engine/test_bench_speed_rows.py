"""Issue 53, item 4: llama.cpp's rows, verify(k) and the floor, and the compiled rows, measured side by side in one
`bench speedup` run, and every row named from its `Row` value.

- one testbed run (one prompt, 8 tokens, the prompt-lookup drafter: no drafter weights) asks for llama.cpp rows
  with `llama_cpp` unimportable (`sys.modules["llama_cpp"] = None`, the one stand-in here): it completes, says in
  one line that the rows are skipped and why (naming `pip install "specdiff[llama]"`), and its JSON has
  `skipped.llama_cpp`; the same run's `steps` (verify_ks 1, 2, 4, eager) has its keys, verify(1) = 1 step by
  construction, a floor fraction in (0, 1.5);
- `steps` on a tiny random model measures the step even where 1 is not among the ks;
- a compiled Row's name is its eager row's with `_compiled`, for each form the report writes; a llama.cpp Row's
  is `llama_cpp_<quant>`; the plan the estimate counts holds the compiled and llama.cpp rows;
- no module of specdiff/bench parses a row's name back (`startswith`, `endswith`, `rsplit`, ... on a name), and
  the check finds the test compiled.py had before (`name.startswith("spec_")`);
- the llama.cpp rows themselves (where `llama-cpp-python` is installed and smollm2-135m-instruct fetched): the
  shipped GGUF and q8_0 and q4_0 made from it, timed by the bench's timer on 2 test prompts, 16 tokens.
No model is compiled here (`compile` is off; `compiled_rows` is only built, never called).
"""
from __future__ import annotations

import ast
import contextlib
import io
import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from tiny_models import tiny_qwen3

import specdiff
from specdiff.bench import llama_cpp, steps
from specdiff.bench.rows import Row, hf, plain, spec
from specdiff.bench.rows import llama_cpp as llama_row
from specdiff.cli import main

BENCH = Path(specdiff.__file__).parent / "bench"
RUN = ["bench", "speedup", "--json", "--problems", "1", "--set", "tune_problems=1", "--repeats", "1",
       "--max-new-tokens", "8", "--set", "always_drafters=[]", "--drafters", "lookup", "--set", "blocks=[4]",
       "--set", "steps=[1]", "--set", "ngrams=[3]", "--set", 'caches=["off"]', "--set", "controllers=[]",
       "--set", "batch_sizes=[]", "--set", 'hf_assistant="none"', "--set", 'llama_cpp=["gguf","q8_0","q4_0"]',
       "--set", "verify_ks=[1,2,4]"]


@pytest.fixture(scope="module")
def run():
    """(the JSON report, stderr) of one testbed run asking for llama.cpp rows without llama-cpp-python."""
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(sys.modules, "llama_cpp", None)  # `import llama_cpp` raises ImportError
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            assert main(RUN) == 0
    return json.loads(out.getvalue()), err.getvalue()


def test_missing_llama_cpp_python_skips_the_rows_saying_why(run):
    report, err = run
    assert "pip install \"specdiff[llama]\"" in report["skipped"]["llama_cpp"]
    said = [line for line in err.splitlines() if "skipped" in line]
    assert len(said) == 1 and said[0].startswith("llama_cpp rows skipped: llama-cpp-python is not installed")
    assert 'pip install "specdiff[llama]"' in said[0]
    assert not [name for name in report["rows"] if "llama" in name]
    assert {"ar", "hf", "spec_lookup"} <= set(report["rows"]) and "vs_llama_cpp_q4_1" not in report


def test_the_steps_block_of_the_same_run(run):
    report, _ = run
    block = report["steps"]
    assert block["ks"] == [1, 2, 4] and "compiled" not in block  # compile is off
    assert {"prefix", "repeats", "dtype", "weight_bytes", "bandwidth_gb_s", "floor_ms", "floor_ms_by_dtype",
            "eager"} <= set(block)
    assert set(block["floor_ms_by_dtype"]) == {"bfloat16", "float32"}
    eager = block["eager"]
    assert set(eager["verify_ms"]) == {"1", "2", "4"} and all(ms > 0 for ms in eager["verify_ms"].values())
    assert eager["verify_in_steps"]["1"] == 1.0 and eager["step_ms"] == eager["verify_ms"]["1"]
    assert 0 < eager["floor_fraction"] < 1.5


def test_steps_measures_the_step_where_the_ks_leave_out_one():
    model = tiny_qwen3(vocab=32, layers=1, context=64)
    block = steps.steps(model, [2, 3], prefix=16, repeats=2, bandwidth_mb=16, say=lambda line: None)
    assert block["ks"] == [2, 3] and set(block["eager"]["verify_ms"]) == {"1", "2", "3"}
    assert block["eager"]["verify_in_steps"]["1"] == 1.0 and 0 < block["eager"]["floor_fraction"] < 1.5


def test_a_compiled_row_is_named_from_its_value():
    assert [replace(row, compiled=True).name for row in (plain(), plain(8), spec("masked"), spec("masked", batch=8))] \
        == ["ar_compiled", "ar_batch8_compiled", "spec_masked_compiled", "spec_masked_batch8_compiled"]
    assert [row.name for row in (plain(), plain(8), spec("masked"), spec("masked", batch=8))] \
        == ["ar", "ar_batch8", "spec_masked", "spec_masked_batch8"]  # the eager names are unchanged
    assert llama_row("q4_1") == Row("llama_cpp", quant="q4_1") and llama_row("q4_1").name == "llama_cpp_q4_1"
    assert hf("hf_lookup").name == "hf_lookup"


def test_the_plan_counts_the_compiled_and_llama_cpp_rows():
    from specdiff.bench.settings import build
    from specdiff.bench.speedup import planned_rows

    settings = build("testbed", {"compile": True, "batch_sizes": [8], "controllers": [],
                                 "llama_cpp": ["gguf", "q8_0"], "tradeoff_steps": [2]})
    names = [row.name for row in planned_rows(settings, {"masked": "masked-drafter", "ar": "ar-drafter"})]
    assert {"ar_compiled", "ar_batch8_compiled", "spec_masked_compiled", "spec_ar_compiled",
            "spec_masked_batch8_compiled", "llama_cpp_q8_0"} <= set(names)
    assert "spec_masked K=2" in names and not any("K=2_compiled" in name for name in names)  # effort rows: eager
    assert len(names) == len(set(names))


def test_compiled_rows_are_chosen_from_row_values():
    from specdiff.bench.compiled import compiled_rows
    from specdiff.bench.settings import Settings
    from specdiff.engine.verifier import Verifier
    from specdiff.runs.prompts import Prompt

    verifier = Verifier(tiny_qwen3(vocab=32, layers=1, context=64), temperature=0.0)
    prompts = [Prompt(ids=[1, 2, 3], kind="", index=0, source="test")]
    methods = compiled_rows([plain(), plain(2)], {}, verifier, None, prompts, Settings())  # built, never called
    assert {name: (m.batch, m.config["compiled"]) for name, m in methods.items()} == {
        "ar_compiled": (1, True), "ar_batch2_compiled": (2, True)}


def test_bad_llama_cpp_and_verify_ks_settings_are_refused():
    from specdiff.bench.settings import build

    with pytest.raises(ValueError, match="llama_cpp: expected"):
        build("testbed", {"llama_cpp": ["q3_k"]})
    with pytest.raises(ValueError, match="verify_ks"):
        build("testbed", {"verify_ks": [0]})


PARSES = {"startswith", "endswith", "rsplit", "removesuffix", "removeprefix", "partition", "rpartition"}


def name_parses(root: Path) -> list[str]:
    """'file:line: source' of every `X.startswith(...)` (and the other PARSES) whose X is a row's name: an
    identifier or attribute holding "name" or "row" (`name`, `row`, `config.name`, `row_name`)."""
    found = []  # (file, line, text)
    for path in sorted(root.glob("*.py")):
        source = path.read_text()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in PARSES:
                target = node.func.value
                word = target.id if isinstance(target, ast.Name) else getattr(target, "attr", "")
                if "name" in word.lower() or "row" in word.lower():
                    found.append((path.name, node.lineno, ast.get_source_segment(source, node)))
    return [f"{name}:{line}: {text}" for name, line, text in sorted(found)]


def test_no_bench_module_parses_a_row_name_back():
    assert name_parses(BENCH) == [], "ask the row's Row value or its config, not its name"


def test_the_check_finds_the_name_parse_compiled_py_had(tmp_path):
    (tmp_path / "compiled.py").write_text(
        "def f(configs):\n"
        "    for name, config in configs.items():\n"
        "        if name.startswith(\"spec_\") and config.tree_budget is None and \" \" not in name:\n"
        "            yield name\n"
        "def g(row_name, text):\n    return row_name.rsplit(\"_\", 1), text.startswith(\"x\")\n")
    assert name_parses(tmp_path) == ['compiled.py:3: name.startswith("spec_")',
                                     'compiled.py:6: row_name.rsplit("_", 1)']


def test_compare_puts_each_lossless_row_over_the_shipped_gguf(tmp_path):
    gguf = tmp_path / "source.gguf"
    gguf.write_bytes(b"GGUF" + bytes(12))
    rows = {"ar": {"tokens_per_s": 20.0, "exact": True, "config": {"drafter": None}},
            "hf": {"tokens_per_s": 10.0, "exact": True, "config": {"name": "hf"}},
            "spec_lookup": {"tokens_per_s": 30.0, "exact": True, "config": {"drafter": "lookup"}},
            "spec_lookup linear 0.3": {"tokens_per_s": 60.0, "exact": False, "config": {"drafter": "lookup"}},
            "llama_cpp_q4_1": {"tokens_per_s": 40.0, "exact": False, "config": {"runtime": "llama.cpp"}}}
    planned = [(Row("llama_cpp", quant="q4_1"), gguf)]
    top = llama_cpp.compare(rows, planned, "llama_cpp_q4_1")
    assert top == {"vs_llama_cpp_q4_1": {"ar": 0.5, "spec_lookup": 0.75}}  # not hf, not a lenient row
    assert rows["spec_lookup"]["vs_llama_cpp_q4_1"] == 0.75 and "vs_llama_cpp_q4_1" not in rows["hf"]
    assert rows["llama_cpp_q4_1"]["speedup_vs_ar"] == 2.0  # over the faster of ar and hf
    assert rows["llama_cpp_q4_1"]["quant"] == "q4_1" and rows["llama_cpp_q4_1"]["file_bytes"] == 16


def test_the_llama_cpp_rows_on_the_real_gguf():
    """The real path: the shipped GGUF and two quants made from it, on 2 test prompts, 16 tokens, by the bench's
    timer (where llama-cpp-python is installed and the verifier fetched)."""
    pytest.importorskip("llama_cpp")
    from specdiff.checkpoints import fetched_dir

    if fetched_dir("smollm2-135m-instruct") is None:
        pytest.skip("smollm2-135m-instruct is not fetched (specdiff models fetch smollm2-135m-instruct)")
    from transformers import AutoTokenizer

    from specdiff.bench import suites
    from specdiff.bench.figures import figures
    from specdiff.bench.settings import build
    from specdiff.bench.timer import measure

    settings = build("real", {"verifier": "smollm2-135m-instruct", "problems": 2, "max_new_tokens": 16})
    assert settings.llama_cpp == ["gguf", "q8_0", "q4_0"]  # the real preset's
    tokenizer = AutoTokenizer.from_pretrained(str(fetched_dir("smollm2-135m-instruct")))
    prompts = suites.suite(settings, tokenizer).test
    planned, skipped, shipped = llama_cpp.plan(settings, prompts[0].ids)
    assert skipped == {} and shipped == "llama_cpp_q4_1"
    assert [row.name for row, _ in planned] == ["llama_cpp_q4_1", "llama_cpp_q8_0", "llama_cpp_q4_0"]
    methods = llama_cpp.methods(planned, {tokenizer.convert_tokens_to_ids("<|im_end|>")}, prompts, settings)
    records = measure(methods, prompts, 16, 1, 0)
    for name in methods:
        row = figures(records[name], prompts)
        assert row["new_tokens"] > 0 and row["tokens_per_s"] > 0, name
    assert methods["llama_cpp_q8_0"].config["file_bytes"] > methods["llama_cpp_q4_0"].config["file_bytes"]


def test_the_round_outside_the_forwards_excludes_the_prefill():
    """figures(): round_outside_forwards_ms = (seconds - draft - forward - prefill) / rounds; prefill_ms per prompt."""
    from specdiff.bench.figures import figures
    from specdiff.runs.prompts import Prompt

    records = [{"ids": [1] * 10, "seconds": 1.0, "cpu_s": 1.0, "rounds": 5, "accepted": 5, "draft_s": 0.2,
                "forward_s": 0.5, "verify_s": 0.6, "prefill_s": 0.1} for _ in range(2)]
    prompts = [Prompt(ids=[1], kind="chat", index=i, source="test") for i in range(2)]
    out = figures(records, prompts)
    assert out["prefill_ms"] == pytest.approx(100.0)
    assert out["round_outside_forwards_ms"] == pytest.approx(1000 * (2.0 - 0.4 - 1.0 - 0.2) / 10)
    assert out["overhead_ms"] == pytest.approx(1000 * (2.0 - 0.4 - 1.0) / 10)
