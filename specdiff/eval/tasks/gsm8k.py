"""The `gsm8k` task: GSM8K from a local JSONL file, scored exactly as lm-evaluation-harness scores it.

Data: the test split of openai/gsm8k as JSONL, one problem per line, `{"question": ..., "answer": ...}`,
the answer a solution ending in `#### <number>` (a bare number is accepted too). Default place:
`data_dir()/gsm8k/test.jsonl` (see `base.data_dir`). Nothing is downloaded.

Extraction and scoring copy the harness's `gsm8k` task (lm_eval/tasks/gsm8k/gsm8k.yaml, version 3.0):
- the number after the first `#### ` (its "strict-match" filter, regex `#### (\\-?[0-9\\.\\,]+)`);
- else the last number-like run (its "flexible-extract" filter, regex `(-?[$0-9.,]{2,})|(-?[0-9]+)`);
- then, on both the extracted answer and the reference, its exact_match settings: the regexes
  `,`, `\\$`, `(?s).*#### ` and `\\.$` are deleted, case is ignored, and the strings must be equal.
So `1,234` = `1234` and `$5` = `5`, but `18.0` != `18`, as in the harness.
"""
from __future__ import annotations

import json
import re
from typing import Any, Sequence

from specdiff.eval.tasks.base import (DataFileError, Problem, Score, Task, chat_prompt, check_lengths, check_n,
                                      require_file, truncate)

STRICT = re.compile(r"#### (\-?[0-9\.\,]+)")
FLEXIBLE = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")
IGNORE = (",", r"\$", r"(?s).*#### ", r"\.$")
STOP = ("Question:", "</s>", "<|im_end|>")
FORMAT = ('JSONL, one problem per line: {"question": "...", "answer": "... #### 72"} '
          "(the test split of openai/gsm8k, 1319 lines)")
DEFAULT_FILE = "gsm8k/test.jsonl"


def normalize(text: str) -> str:
    """The harness's exact_match normalisation: delete IGNORE's regexes in order, lower-case."""
    for pattern in IGNORE:
        text = re.sub(pattern, "", text)
    return text.lower()


def extract(completion: str) -> str | None:
    """The answer string the harness extracts (before normalisation): strict match, else the last
    flexible match; None where the harness would say `[invalid]`."""
    strict = STRICT.findall(completion)
    if strict:
        return strict[0].strip()
    flexible = FLEXIBLE.findall(completion)
    if flexible:
        groups = [g for g in flexible[-1] if g]
        return groups[0].strip() if groups else None
    return None


def is_correct(completion: str, reference: str) -> bool:
    """The harness's verdict: normalised extracted answer == normalised reference (a full solution
    with `#### n`, or the bare answer)."""
    answer = extract(completion)
    return answer is not None and normalize(answer) == normalize(reference)


def load(n: int | None = None, path: str | None = None) -> list[Problem]:
    """The first `n` problems (all if None) of a local GSM8K JSONL; `target` is the normalised answer."""
    check_n(n)
    file = require_file(path, DEFAULT_FILE, "GSM8K", FORMAT)
    problems = []
    with open(file, encoding="utf-8") as f:
        for line_number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                raise DataFileError(file, line_number, f"not valid JSON ({error.msg}); expected {FORMAT}") from None
            for key in ("question", "answer"):
                if not isinstance(row, dict) or not isinstance(row.get(key), str):
                    raise DataFileError(file, line_number, f"no string field {key!r}; expected {FORMAT}")
            answer = row["answer"]
            if "#### " not in answer and not re.fullmatch(r"\s*-?[$0-9.,]+\s*", answer):
                raise DataFileError(file, line_number, "the answer has no '#### <number>' line and is not a number")
            problems.append(Problem(question=row["question"], answer=answer, target=normalize(answer).strip(),
                                    id=str(row.get("id", len(problems)))))
            if n is not None and len(problems) == n:
                return problems
    check_n(n, len(problems), f"problems in {file}")
    if not problems:
        raise DataFileError(file, None, f"no problems in the file; expected {FORMAT}")
    return problems


def build_prompt(problem: Problem, tokenizer: Any = None, boxed: bool = False) -> str:
    """The question in the tokenizer's chat template (the paper's setting), else the harness's
    zero-shot `Question: ...\\nAnswer:`. `boxed` prepends the \\boxed{} instruction."""
    return chat_prompt(problem.question, tokenizer, boxed=boxed, plain=f"Question: {problem.question}\nAnswer:")


def score(problems: Sequence[Problem], completions: Sequence[str]) -> list[Score]:
    """The harness's verdict on each completion, cut at the stop strings first."""
    check_lengths(problems, completions)
    out = []
    for problem, completion in zip(problems, completions):
        completion = truncate(completion, STOP)
        answer = extract(completion)
        out.append(Score(is_correct(completion, problem.answer), None if answer is None else normalize(answer)))
    return out


TASK = Task("gsm8k", load, build_prompt, score, stop=STOP,
            description=f"GSM8K from a local JSONL ({DEFAULT_FILE} under the data folder)")
