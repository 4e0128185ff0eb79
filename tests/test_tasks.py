"""The arith task generator, its splits, and GSM8K-style answer extraction and scoring."""
import json
import re

import pytest

from specdiff.eval import tasks


def test_generator_is_deterministic():
    a = tasks.arith_problems("test", 50, seed=0)
    b = tasks.arith_problems("test", 50, seed=0)
    assert a == b
    assert tasks.arith_problems("test", 50, seed=1) != a


def test_splits_are_disjoint():
    questions = {split: {p.question for p in tasks.arith_problems(split, 500)} for split in ("validation", "test")}
    train = {p.question for p in tasks.arith_problems("train", 5000)}
    assert not train & questions["test"]
    assert not train & questions["validation"]
    assert not questions["validation"] & questions["test"]
    assert len(questions["test"]) == 500  # test problems are distinct
    assert all(tasks.split_of(q) == "test" for q in questions["test"])


def test_unknown_split():
    with pytest.raises(ValueError):
        tasks.arith_problems("dev", 1)


def test_reference_answers_are_consistent():
    for problem in tasks.arith_problems("validation", 300):
        assert tasks.is_correct(problem.answer, problem.target)
        assert problem.answer.splitlines()[-1] == f"#### {problem.target}"
        # every chain-of-thought equation is true
        for a, op, b, c in re.findall(r"(\d+) ([-+*/]) (\d+) = (\d+)", problem.answer):
            a, b, c = int(a), int(b), int(c)
            assert {"+": a + b, "-": a - b, "*": a * b, "/": a / b}[op] == c, problem.answer
        assert 3 <= len(problem.answer.splitlines()) - 1 <= 5
        assert problem.prompt.endswith("\n")


def test_problems_use_all_operations():
    answers = "\n".join(p.answer for p in tasks.arith_problems("test", 200))
    for op in (" + ", " - ", " * ", " / "):
        assert op in answers


@pytest.mark.parametrize("text, expected", [
    ("so 3 + 4 = 7.\n#### 7", "7"),
    ("#### 1,234", "1234"),
    ("#### -5", "-5"),
    ("####-5", "-5"),
    ("#### $12.50", "12.5"),
    ("#### 3.0", "3"),
    ("the answer is \\boxed{42}.", "42"),
    ("\\boxed{1,000} then \\boxed{-7}", "-7"),
    ("#### 5 and later #### 6", "5"),
    ("no answer here 12", None),
    ("", None),
    ("#### ", None),
])
def test_extract_answer(text, expected):
    assert tasks.extract_answer(text) == expected


def test_extract_answer_fallback():
    assert tasks.extract_answer("it is 12 then 15.", fallback_last_number=True) == "15"
    assert tasks.extract_answer("nothing", fallback_last_number=True) is None


@pytest.mark.parametrize("completion, target, correct", [
    ("#### 18", "18", True),
    ("#### 18.0", "18", True),
    ("#### 1,800", "1800", True),
    ("#### -0", "0", True),
    ("#### 17", "18", False),
    ("18", "18", False),  # no #### and no \boxed: not extracted
    ("\\boxed{18}", "18", True),
    ("#### 18", "steps\n#### 18", True),  # a full GSM8K solution as the target
    ("#### 0.5", "1/2", True),
])
def test_is_correct(completion, target, correct):
    assert tasks.is_correct(completion, target) is correct


def test_accuracy():
    assert tasks.accuracy(["#### 1", "#### 2"], ["1", "3"]) == 0.5
    assert tasks.accuracy([], []) == 0.0
    with pytest.raises(ValueError):
        tasks.accuracy(["#### 1"], [])


def test_local_loaders(tmp_path):
    gsm = tmp_path / "gsm8k.jsonl"
    gsm.write_text(json.dumps({"question": "2+2?", "answer": "2+2=4\n#### 4"}) + "\n")
    [problem] = tasks.load_gsm8k(gsm)
    assert problem.target == "4" and problem.prompt == "2+2?\n"
    gpqa = tmp_path / "gpqa.jsonl"
    row = {"Question": "Q?", "Correct Answer": "right", "Incorrect Answer 1": "a", "Incorrect Answer 2": "b",
           "Incorrect Answer 3": "c"}
    gpqa.write_text(json.dumps(row) + "\n")
    [mc] = tasks.load_gpqa(gpqa)
    assert f"({mc.target}) right" in mc.question  # GPQA targets are letters now
