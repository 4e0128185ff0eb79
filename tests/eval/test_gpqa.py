"""GPQA: a local CSV or JSONL, choices shuffled by a seed, the letter extracted."""
import csv
import json
import re
from collections import Counter

import pytest

from specdiff.eval.tasks import BOXED_INSTRUCTION, DataFileError, MissingDataError, get_task, gpqa, load_gpqa

COLUMNS = ["Record ID", "Question", "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3",
           "Subdomain"]


def rows(n):
    return [{"Record ID": f"rec{i}", "Question": f"Question {i}?\nWith a second line, and \"quotes\".",
             "Correct Answer": f"right {i}", "Incorrect Answer 1": f"wrong {i}a", "Incorrect Answer 2": f"wrong {i}b",
             "Incorrect Answer 3": f"wrong {i}c", "Subdomain": "Physics"} for i in range(n)]


def write_csv(path, records, columns=COLUMNS):
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(records)
    return path


def test_load_csv_and_jsonl_alike(tmp_path):
    records = rows(40)
    from_csv = gpqa.load(path=str(write_csv(tmp_path / "gpqa_diamond.csv", records)))
    jsonl = tmp_path / "gpqa.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert gpqa.load(path=str(jsonl)) == from_csv
    assert len(from_csv) == 40 and from_csv[0].id == "rec0"
    for i, problem in enumerate(from_csv):
        assert f"({problem.target}) right {i}\n" in problem.question  # the correct choice sits at its letter
        assert problem.question.startswith(f"What is the correct answer to this question: Question {i}?\nWith")
        assert sorted(problem.meta["choices"]) == sorted([f"right {i}", f"wrong {i}a", f"wrong {i}b", f"wrong {i}c"])
    assert set(Counter(p.target for p in from_csv)) == set("ABCD")  # shuffled, not always A


def test_shuffle_depends_on_seed_only(tmp_path):
    path = str(write_csv(tmp_path / "g.csv", rows(30)))
    seed0 = gpqa.load(path=path, seed=0)
    assert gpqa.load(path=path, seed=0) == seed0
    assert gpqa.load(5, path=path, seed=0) == seed0[:5]  # a problem's order does not depend on n
    seed1 = gpqa.load(path=path, seed=1)
    assert [p.target for p in seed1] != [p.target for p in seed0]
    assert load_gpqa(path, 3, seed=1) == seed1[:3]


@pytest.mark.parametrize("completion, letter", [
    ("The answer is (B)", "B"),
    ("... so the answer is C.", "C"),
    ("Answer: D", "D"),
    ("answer: (a)", None),                       # letters are upper-case
    ("The final answer is \\boxed{A}.", "A"),
    ("\\boxed{(C)}", "C"),
    ("\\boxed{\\text{D}}", "D"),
    ("The answer is (A). Wait, no: the answer is (D).", "D"),  # the last statement
    ("(A) fails and (B) fails; (C) holds", "C"),
    ("\\boxed{B} although the answer is (C)", "B"),  # \boxed{} first
    ("the answer is an interesting one", None),
    ("I would pick B", None),
    ("", None),
])
def test_extract(completion, letter):
    assert gpqa.extract(completion) == letter


def test_score(tmp_path):
    problems = gpqa.load(path=str(write_csv(tmp_path / "g.csv", rows(3))))
    right = [f"The answer is ({p.target})" for p in problems]
    wrong = ["The answer is (" + "ABCD"[("ABCD".index(p.target) + 1) % 4] + ")" for p in problems]
    assert [s.correct for s in gpqa.score(problems, right)] == [True] * 3
    assert [s.correct for s in gpqa.score(problems, wrong)] == [False] * 3
    assert [s.extracted for s in gpqa.score(problems, ["nothing"] * 3)] == [None] * 3


def test_prompts(tmp_path, chat_tokenizer):
    [problem] = gpqa.load(path=str(write_csv(tmp_path / "g.csv", rows(1))))
    plain = gpqa.build_prompt(problem)
    assert plain == problem.question + gpqa.INSTRUCTION + "\n"
    boxed = gpqa.build_prompt(problem, boxed=True)
    assert boxed.startswith(BOXED_INSTRUCTION + "\n" + problem.question) and gpqa.INSTRUCTION not in boxed
    assert gpqa.build_prompt(problem, chat_tokenizer) == f"<|user|>{problem.question}{gpqa.INSTRUCTION}\n<|assistant|>"


def test_bad_files(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDIFF_DATA_DIR", str(tmp_path))
    expected = re.escape(str(tmp_path / "gpqa" / "gpqa_diamond.csv")) + ".*Correct Answer"
    with pytest.raises(MissingDataError, match=expected):
        gpqa.load()
    records = rows(3)
    records[1]["Incorrect Answer 2"] = ""
    path = write_csv(tmp_path / "blank.csv", records)
    # the header is line 1 and each record spans two lines (its question has a newline): record 2 ends on line 5
    with pytest.raises(DataFileError, match=re.escape(f"{path}:5: no value in column 'Incorrect Answer 2'")):
        gpqa.load(path=str(path))
    path = write_csv(tmp_path / "columns.csv", rows(2), columns=["Question", "Correct Answer"])
    with pytest.raises(DataFileError, match=re.escape(f"{path}:3: no value in column 'Incorrect Answer 1'")):
        gpqa.load(path=str(path))
    jsonl = tmp_path / "bad.jsonl"
    jsonl.write_text(json.dumps(rows(1)[0]) + "\n[1, 2\n")
    with pytest.raises(DataFileError, match=re.escape(f"{jsonl}:2: not valid JSON")):
        gpqa.load(path=str(jsonl))
    with pytest.raises(ValueError, match="positive integer"):
        gpqa.load(0, path=str(jsonl))
    assert get_task("gpqa").load is gpqa.load
