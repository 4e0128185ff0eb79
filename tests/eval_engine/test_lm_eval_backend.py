"""The lm-evaluation-harness backend (`--model specdiff`), offline: a local task YAML over a local JSONL
of testbed arith problems, run from the harness's own command line, gives the same generations and
the same accuracy as `specdiff eval` on the same problems (same seed, sampling and batch layout; no
stop strings on either side, as the arith task has none: `task.stop == ()`, `until: []`).
Skipped only where lm-eval is not installed (`pip install 'specdiff[lmeval]'`)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("lm_eval")

from specdiff.cli import main  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PROBLEMS, BATCH = 4, 2
CONFIG = {"drafter": "masked-drafter", "verifier": "verifier", "steps": 2, "rule": "linear", "lam": 0.2,
          "prefix_cache": "persistent", "threads": 2, "seed": 0}
EVAL_FLAGS = ["--drafter", "masked-drafter", "--verifier", "verifier", "-K", "2", "--rule", "linear", "--leniency",
              "0.2", "--prefix-cache", "persistent", "--threads", "2", "--seed", "0", "--batch-size", str(BATCH)]
TASK_YAML = """\
task: specdiff_arith
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: {output_type}
doc_to_text: prompt
doc_to_target: target
{extra}
"""
GENERATE = """\
generation_kwargs:
  until: []
  do_sample: true
  max_gen_toks: 96
filter_list:
  - name: strict-match
    filter:
      - function: regex
        regex_pattern: "#### (\\\\-?[0-9\\\\.\\\\,]+)"
      - function: take_first
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
"""
MULTIPLE_CHOICE = """\
doc_to_choice: ["1", "2"]
metric_list:
  - metric: acc
"""


def _environment(tmp_path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "LMEVAL"))}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HOME=str(tmp_path / "hf"),
               PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""), TOKENIZERS_PARALLELISM="false")
    return env


def _write_task(tmp_path, output_type: str, extra: str) -> Path:
    """The first PROBLEMS arith test problems as JSONL (prompt = the task's own prompt), and a task YAML."""
    from specdiff.eval.tasks import get_task

    task = get_task("arith")
    data = tmp_path / "arith.jsonl"
    data.write_text("".join(json.dumps({"prompt": task.build_prompt(p), "target": p.target}) + "\n"
                            for p in task.load(PROBLEMS)))
    folder = tmp_path / "tasks"
    folder.mkdir(exist_ok=True)
    (folder / "specdiff_arith.yaml").write_text(TASK_YAML.format(data=data, output_type=output_type, extra=extra))
    return folder


def _harness(tmp_path, folder: Path, model_args: dict, batch_size: int) -> subprocess.CompletedProcess:
    """lm-eval's command line (the `lm_eval` console script's own entry), with the backend registered."""
    args = ",".join(f"{k}={v}" for k, v in model_args.items())
    command = [sys.executable, "-m", "specdiff.integrations.lm_eval", "--model", "specdiff", "--model_args", args,
               "--tasks", "specdiff_arith", "--include_path", str(folder), "--batch_size", str(batch_size),
               "--output_path", str(tmp_path / "out"), "--log_samples", "--device", "cpu"]
    return subprocess.run(command, cwd=tmp_path, env=_environment(tmp_path), capture_output=True, text=True,
                          timeout=600)


def test_harness_accuracy_equals_specdiff_eval(tmp_path, capsys):
    folder = _write_task(tmp_path, "generate_until", GENERATE)
    run = _harness(tmp_path, folder, CONFIG, BATCH)
    assert run.returncode == 0, run.stderr[-3000:]
    results = json.loads(next((tmp_path / "out").rglob("results_*.json")).read_text())
    harness_accuracy = results["results"]["specdiff_arith"]["exact_match,strict-match"]
    assert results["config"]["specdiff_config"]["batch_size"] == BATCH
    samples = [json.loads(line) for line in next((tmp_path / "out").rglob("samples_*.jsonl")).read_text().splitlines()]
    samples.sort(key=lambda sample: sample["doc_id"])
    assert len(samples) == PROBLEMS

    assert main(["eval", "arith", "-n", str(PROBLEMS), *EVAL_FLAGS, "--max-new-tokens", "96", "--json"]) == 0
    ours = json.loads(capsys.readouterr().out)
    # the same prompts, the same generations, the same verdicts, the same accuracy
    for sample, record in zip(samples, ours["records"]):
        assert sample["arguments"]["gen_args_0"]["arg_0"] == sample["doc"]["prompt"]
        assert sample["resps"][0][0] == record["text"]
        assert bool(sample["exact_match"]) == record["correct"]
    assert harness_accuracy == ours["accuracy"]
    assert 0 < harness_accuracy < 1  # a comparison that could fail either way (0.25 here)
    # the engine's figures, logged by the backend, are specdiff eval's
    assert f"accepted/round {ours['mean_accepted']:.2f}" in run.stderr


def test_loglikelihood_tasks_are_refused(tmp_path):
    folder = _write_task(tmp_path, "multiple_choice", MULTIPLE_CHOICE)
    run = _harness(tmp_path, folder, {"steps": 1}, 1)
    assert run.returncode != 0
    assert "LogLikelihoodUnsupported" in run.stderr and "implements generate_until only" in run.stderr


def _instances(prompts, gen_kwargs):
    from lm_eval.api.instance import Instance

    return [Instance(request_type="generate_until", doc={}, arguments=(p, dict(gen_kwargs)), idx=0) for p in prompts]


def test_greedy_requests_give_the_verifiers_greedy_decoding():
    """do_sample=False: the verifier at temperature 0; lossless verification then returns exactly the
    verifier's plain greedy decoding, whatever the drafter proposed, batched or not; `until` cuts it."""
    from specdiff.models import ModelCache
    from specdiff.runs import RunConfig, run_config
    from specdiff.eval.tasks import arith_problems
    from specdiff.integrations.lm_eval import SpecDiffLM

    prompts = [p.prompt for p in arith_problems("test", 3)]
    plain = run_config(RunConfig("greedy", drafter=None, sampling={"temperature": 0.0}), prompts, None, ModelCache(),
                       40)
    greedy = [record["text"] for record in plain["records"]]
    lm = SpecDiffLM(steps=2, block_size=8, batch_size=2, prefix_cache="persistent", seed=7)
    texts = lm.generate_until(_instances(prompts, {"until": [], "do_sample": False, "max_gen_toks": 40}),
                              disable_tqdm=True)
    assert texts == greedy
    assert lm.summaries[-1]["sampling"] == {"temperature": 0.0}
    cut = lm.generate_until(_instances(prompts, {"until": ["=", "\n"], "temperature": 0, "max_gen_toks": 40}),
                            disable_tqdm=True)
    assert cut == [text.split("\n")[0].split("=")[0] for text in greedy]
    assert all("=" in text for text in greedy)  # the stop string did occur


def test_in_process_loglikelihood_refuses():
    from specdiff.integrations.lm_eval import LogLikelihoodUnsupported, SpecDiffLM

    lm = SpecDiffLM()
    with pytest.raises(LogLikelihoodUnsupported, match="generate_until only.*--model hf"):
        lm.loglikelihood([])
    with pytest.raises(LogLikelihoodUnsupported, match="loglikelihood_rolling"):
        lm.loglikelihood_rolling([])


@pytest.mark.parametrize("model_args, message", [
    ({"temp": 1}, "unknown model_args temp"),
    ({"rule": "tv", "lam": 0.2}, "lam is the leniency of rule=linear"),
    ({"lam": 0.2}, "needs a lenient rule"),
    ({"rule": "linear", "lam": 0.2, "eps": 0.1}, "give one leniency"),
    ({"rule": "linear", "lam": 1.5}, "leniency (lam) must be in [0, 1]"),
    ({"steps": 0}, "steps must be >= 1"),
    ({"block_size": 0}, "block_size must be >= 1"),
    ({"threshold": 2.0}, "threshold must be in (0, 1]"),
    ({"rule": "fancy"}, "rule='fancy' is not one of"),
    ({"batch_size": "auto"}, "'auto' is not supported"),
    ({"drafter": "none"}, "a drafter is required"),
    ({"verifier": "no-such-model"}, "unknown model 'no-such-model'"),
])
def test_bad_model_args_fail_before_weights_load(model_args, message, monkeypatch):
    from specdiff import models
    from specdiff.integrations.lm_eval import SpecDiffLM

    def no_loading(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(models, "load_model", no_loading)
    with pytest.raises(ValueError) as error:
        SpecDiffLM(**model_args)
    assert message in str(error.value)


def test_registration_keeps_the_harness_models():
    import specdiff.integrations.lm_eval as backend
    from lm_eval.api.registry import get_model

    assert get_model("specdiff") is backend.SpecDiffLM
    assert get_model("dummy").__name__ == "DummyLM"  # the harness's own models still resolve
