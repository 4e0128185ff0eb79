"""What every task shares: the Problem and Score records, the Task bundle, chat prompts, and the
errors for data files.

A **task** is a benchmark made of three free functions: `load` (the problems), `build_prompt`
(the text a model sees) and `score` (a verdict per completion). A **completion** is the text a
model generated after the prompt, without the prompt. **Accuracy** is the mean verdict; its
**standard error** is the binomial one, sqrt(acc (1 - acc) / n), as the paper's Table 1 reports.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

BOXED_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."


class DataFileError(ValueError):
    """A benchmark file that exists but cannot be read: the message starts with `path:line:`."""

    def __init__(self, path: str | Path, line: int | None, problem: str):
        self.path, self.line = str(path), line
        super().__init__(f"{path}:{line}: {problem}" if line is not None else f"{path}: {problem}")


class MissingDataError(FileNotFoundError):
    """A benchmark's local file is absent; the message says where to put it and in what format."""


@dataclass(frozen=True)
class Problem:
    """One task instance: `question` the problem text, `answer` the reference solution (a chain of
    thought, code, or the letter), `target` what scoring compares against, `id` a stable name when
    the benchmark has one, `meta` anything else the task needs to score (HumanEval's tests)."""

    question: str
    answer: str
    target: str
    id: str = ""
    meta: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def prompt(self) -> str:
        """The testbed's plain prompt (the question, then a newline); tasks build real prompts with
        their `build_prompt`."""
        return self.question + "\n"


@dataclass(frozen=True)
class Score:
    """The verdict on one completion: `correct`, what was `extracted` from it (the final answer, or
    the sandbox status for code), and a `detail` (why it failed, when known)."""

    correct: bool
    extracted: str | None
    detail: str = ""


@dataclass(frozen=True)
class Task:
    """A benchmark: `load(n=None, **options)` -> problems; `build_prompt(problem, tokenizer=None,
    boxed=False)` -> str; `score(problems, completions)` -> one Score per completion; `stop`: the
    strings at which generation should stop (the completion is cut there before scoring anyway)."""

    name: str
    load: Callable[..., list[Problem]]
    build_prompt: Callable[..., str]
    score: Callable[[Sequence[Problem], Sequence[str]], list[Score]]
    stop: tuple[str, ...] = ()
    description: str = ""


def chat_prompt(text: str, tokenizer: Any = None, *, boxed: bool = False, plain: str | None = None,
                assistant_prefix: str = "") -> str:
    """The prompt for `text` (one user turn). With a tokenizer that has a chat template, the template
    applied with a generation prompt (thinking disabled where the template knows the switch), then
    `assistant_prefix`; without one, `plain` (default: `text` and a newline), then `assistant_prefix`.
    `boxed` prepends BOXED_INSTRUCTION to the user turn, as the paper does for Gemma and Qwen3."""
    content = f"{BOXED_INSTRUCTION}\n{text}" if boxed else text
    if tokenizer is not None and getattr(tokenizer, "chat_template", None):
        rendered = tokenizer.apply_chat_template([{"role": "user", "content": content}], tokenize=False,
                                                 add_generation_prompt=True, enable_thinking=False)
        return rendered + assistant_prefix
    if plain is None:
        plain = content + "\n"
    elif boxed:
        plain = f"{BOXED_INSTRUCTION}\n{plain}"
    return plain + assistant_prefix


def truncate(completion: str, stop: Sequence[str]) -> str:
    """`completion` up to the first occurrence of any stop string."""
    cut = len(completion)
    for s in stop:
        if s:
            i = completion.find(s)
            if i != -1:
                cut = min(cut, i)
    return completion[:cut]


def check_n(n: int | None, available: int | None = None, what: str = "problems") -> None:
    """Raises ValueError unless n is None or an integer in 1..available."""
    if n is None:
        return
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive integer (the number of {what}), not {n!r}")
    if available is not None and n > available:
        raise ValueError(f"n={n} but there are only {available} {what}")


def check_lengths(problems: Sequence[Problem], completions: Sequence[str]) -> None:
    """Raises ValueError unless there is one completion (a str) per problem."""
    if len(problems) != len(completions):
        raise ValueError(f"{len(completions)} completions for {len(problems)} problems")
    for i, c in enumerate(completions):
        if not isinstance(c, str):
            raise ValueError(f"completion {i} is a {type(c).__name__}, not a str")


def summarize(scores: Sequence[Score]) -> dict:
    """Accuracy, its binomial standard error, and the counts."""
    n = len(scores)
    correct = sum(s.correct for s in scores)
    acc = correct / n if n else 0.0
    return {"n": n, "correct": correct, "accuracy": acc, "stderr": math.sqrt(acc * (1 - acc) / n) if n else 0.0}


def data_dir() -> Path:
    """Where benchmark files a user provides live: $SPECDIFF_DATA_DIR, else ~/.cache/specdiff/data."""
    return Path(os.environ.get("SPECDIFF_DATA_DIR") or Path.home() / ".cache" / "specdiff" / "data")


def require_file(path: str | Path | None, default: str, benchmark: str, fmt: str) -> Path:
    """The data file to read: `path`, else data_dir()/default. MissingDataError if it is not there."""
    chosen = Path(path) if path is not None else data_dir() / default
    if not chosen.is_file():
        raise MissingDataError(
            f"{benchmark} data not found at {chosen}. Nothing is downloaded: put the file there "
            f"(or pass path=..., or set SPECDIFF_DATA_DIR to the folder holding {default}). Format: {fmt}")
    return chosen
