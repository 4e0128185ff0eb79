"""The task registry, the shared prompt builder, and the arith task as a Task."""
import pytest

from specdiff.eval import tasks
from specdiff.eval.tasks import BOXED_INSTRUCTION, TASKS, Score, chat_prompt, get_task, summarize


def test_registry():
    assert sorted(TASKS) == ["arith", "gpqa", "gsm8k", "humaneval", "prompts"]
    for name, task in TASKS.items():
        assert get_task(name) is task and task.name == name and task.description
    for bad in ("GSM8K", "mmlu", "", None):
        with pytest.raises(ValueError, match="unknown task .*known tasks: arith, gpqa, gsm8k, humaneval"):
            get_task(bad)


def test_arith_task(chat_tokenizer):
    task = get_task("arith")
    problems = task.load(20)
    assert problems == tasks.arith_problems("test", 20)
    assert task.build_prompt(problems[0]) == problems[0].prompt == problems[0].question + "\n"
    assert task.build_prompt(problems[0], chat_tokenizer) == f"<|user|>{problems[0].question}\n<|assistant|>"
    scores = task.score(problems[:2], [problems[0].answer, "#### -1"])
    assert [s.correct for s in scores] == [True, False] and scores[0].extracted == problems[0].target
    with pytest.raises(ValueError):
        task.load(0)
    with pytest.raises(ValueError, match="1 completions for 2 problems"):
        task.score(problems[:2], ["#### 1"])
    with pytest.raises(ValueError, match="not a str"):
        task.score(problems[:1], [None])


def test_chat_prompt_without_template():
    from transformers import PreTrainedTokenizerFast
    from pathlib import Path
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(Path(tasks.__file__).parents[2] / "zoo" / "tokenizer.json"))
    assert not tokenizer.chat_template
    assert chat_prompt("Q?", tokenizer) == "Q?\n"
    assert chat_prompt("Q?", tokenizer, boxed=True) == f"{BOXED_INSTRUCTION}\nQ?\n"
    assert chat_prompt("Q?", None, plain="Question: Q?\nAnswer:", assistant_prefix=" A") == "Question: Q?\nAnswer: A"


def test_summarize():
    s = summarize([Score(True, "1")] * 3 + [Score(False, None)])
    assert (s["n"], s["correct"], s["accuracy"]) == (4, 3, 0.75)
    assert s["stderr"] == pytest.approx((0.75 * 0.25 / 4) ** 0.5)
    # the paper's Table 1: 57.3 +- 3.9 on HumanEval's 164 problems
    assert summarize([Score(True, None)] * 94 + [Score(False, None)] * 70)["stderr"] == pytest.approx(0.0386, abs=5e-4)
    assert summarize([]) == {"n": 0, "correct": 0, "accuracy": 0.0, "stderr": 0.0}
