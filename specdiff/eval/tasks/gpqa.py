"""The `gpqa` task: GPQA (Diamond) multiple choice from a local CSV or JSONL, answer letters A-D.

Data: the rows of Idavidrein/gpqa (e.g. `gpqa_diamond.csv`, 198 rows) with the columns
`Question`, `Correct Answer`, `Incorrect Answer 1`, `Incorrect Answer 2`, `Incorrect Answer 3`
(other columns are ignored), as CSV with a header or as JSONL objects. Default place:
`data_dir()/gpqa/gpqa_diamond.csv`. Nothing is downloaded.

The four choices of each problem are shuffled by `seed` and the question's text (so a problem's
order does not depend on `n` or its position), and lettered A-D; `target` is the correct letter.
The prompt is lm-evaluation-harness's zero-shot GPQA text. The **extracted** letter is the last
`\\boxed{X}`, else the last "answer is (X)" / "Answer: X", else the last "(X)"; X in A-D.
"""
from __future__ import annotations

import csv
import json
import random
import re
from pathlib import Path
from typing import Any, Sequence

from specdiff.eval.tasks.base import (DataFileError, Problem, Score, Task, chat_prompt, check_lengths, check_n,
                                      require_file)

LETTERS = "ABCD"
COLUMNS = ("Question", "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3")
FORMAT = ("CSV with a header row (or JSONL objects) holding the columns " + ", ".join(repr(c) for c in COLUMNS)
          + ", as in Idavidrein/gpqa's gpqa_diamond.csv")
DEFAULT_FILE = "gpqa/gpqa_diamond.csv"
INSTRUCTION = 'Answer with the letter of the correct choice, ending with "The answer is (X)".'

_BOXED = re.compile(r"\\boxed\s*\{\s*(?:\\text\s*\{\s*)?\(?([A-D])\)?\s*\}?\s*\}")
_STATED = re.compile(r"(?i:answer\s*(?:is|:))\s*:?\s*\(?\s*([A-D])\s*\)?(?![A-Za-z])")
_PAREN = re.compile(r"\(([A-D])\)")


def extract(completion: str) -> str | None:
    """The chosen letter (see the module docstring), or None."""
    for pattern in (_BOXED, _STATED, _PAREN):
        found = pattern.findall(completion)
        if found:
            return found[-1].upper()
    return None


def _rows(file: Path):
    """(line number, row dict) for each row of a CSV or JSONL file."""
    if file.suffix.lower() == ".csv":
        with open(file, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            try:
                for row in reader:
                    yield reader.line_num, row
            except csv.Error as error:
                raise DataFileError(file, reader.line_num, f"not valid CSV ({error})") from None
        return
    with open(file, encoding="utf-8") as f:
        for line_number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield line_number, json.loads(line)
            except json.JSONDecodeError as error:
                raise DataFileError(file, line_number, f"not valid JSON ({error.msg}); expected {FORMAT}") from None


def _clean(text: str) -> str:
    """The harness's preprocessing of a choice: strip, ' [title]' -> '. ', double spaces -> one."""
    return text.strip().replace(" [title]", ". ").replace("  ", " ")


def make_problem(row: dict, seed: int, index: int) -> Problem:
    """One lettered problem from a GPQA row (choices shuffled by seed and the question)."""
    question = row["Question"].strip()
    choices = [_clean(row["Correct Answer"])] + [_clean(row[f"Incorrect Answer {i}"]) for i in (1, 2, 3)]
    order = list(range(4))
    random.Random(f"gpqa:{seed}:{question}").shuffle(order)
    letter = LETTERS[order.index(0)]
    text = (f"What is the correct answer to this question: {question}\nChoices:\n"
            + "".join(f"({LETTERS[i]}) {choices[j]}\n" for i, j in enumerate(order)))
    return Problem(question=text, answer=f"The answer is ({letter})", target=letter,
                   id=str(row.get("Record ID") or index), meta={"choices": [choices[j] for j in order]})


def load(n: int | None = None, path: str | None = None, seed: int = 0) -> list[Problem]:
    """The first `n` problems (all if None) of a local GPQA file, choices shuffled by `seed`."""
    check_n(n)
    file = require_file(path, DEFAULT_FILE, "GPQA", FORMAT)
    problems = []
    for line_number, row in _rows(file):
        for column in COLUMNS:
            if not isinstance(row, dict) or not isinstance(row.get(column), str) or not row[column].strip():
                raise DataFileError(file, line_number, f"no value in column {column!r}; expected {FORMAT}")
        problems.append(make_problem(row, seed, len(problems)))
        if n is not None and len(problems) == n:
            return problems
    check_n(n, len(problems), f"problems in {file}")
    if not problems:
        raise DataFileError(file, None, f"no problems in the file; expected {FORMAT}")
    return problems


def build_prompt(problem: Problem, tokenizer: Any = None, boxed: bool = False) -> str:
    """The question and lettered choices, then the answer-format instruction (replaced by the \\boxed{}
    one if `boxed`), in the chat template if the tokenizer has one."""
    text = problem.question + ("" if boxed else INSTRUCTION)
    return chat_prompt(text, tokenizer, boxed=boxed, plain=text + "\n")


def score(problems: Sequence[Problem], completions: Sequence[str]) -> list[Score]:
    """Exact match of the extracted letter with the correct one."""
    check_lengths(problems, completions)
    return [Score(extract(c) == p.target, extract(c)) for p, c in zip(problems, completions)]


TASK = Task("gpqa", load, build_prompt, score,
            description=f"GPQA multiple choice from a local CSV/JSONL ({DEFAULT_FILE} under the data folder)")
