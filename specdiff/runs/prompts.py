"""Prompt files as token ids: the shipped real-prompt files and any JSONL prompts file (`eval.tasks.prompts`).

Terms:
- Prompt: one prompt's token ids (a conversation through the tokenizer's chat template with the assistant's
  turn opened; a raw prompt as it is), its "kind" (the JSONL "kind" key, "" when absent), its line index in
  its file, the file, and the reference answer where one is known (`target`; None for prompt files);
- VALIDATION_FILE: prompts for tuning only, never a measured set; TEST_FILE: the held-out prompts measured by
  default (chat, code, math, summarisation and rewriting; disjoint from each other and from training data).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "eval" / "tasks" / "data"
VALIDATION_FILE = DATA / "real_validation.jsonl"  # tuning only: never a measured set
TEST_FILE = DATA / "real_test.jsonl"  # the held-out prompts the docs' figures are measured on
SPEC_VALIDATION_FILE = DATA / "spec_validation.jsonl"  # tuning only: Spec-Bench's six kinds, written for specdiff
SPEC_BENCH_FILE = DATA / "spec_bench" / "spec_bench48.jsonl"  # measured only: 48 Spec-Bench first turns
VALIDATION_FILES = (VALIDATION_FILE, SPEC_VALIDATION_FILE)


@dataclass
class Prompt:
    ids: list[int]  # through the chat template, the assistant's turn opened
    kind: str  # the JSONL "kind" ("" when absent)
    index: int  # line order in its file (after first_problem)
    source: str  # the file it was read from
    target: str | None = None  # the reference answer, where the task scores answers


def read_prompts(path, tokenizer, first: int = 0, n: int | None = None) -> list[Prompt]:
    """Prompts [first, first + n) of a prompts JSONL file, as token ids."""
    from specdiff.engine.generate import chat_ids
    from specdiff.eval.tasks import prompts as prompts_task

    problems = prompts_task.read(path)[first:]
    problems = problems if n is None else problems[:n]
    if not problems:
        raise ValueError(f"{path}: no prompts from prompt {first} on")
    out = []
    for index, problem in enumerate(problems, first):
        if prompts_task.is_conversation(problem):
            ids = chat_ids(tokenizer, list(problem.meta["messages"]), index)
        else:
            ids = list(tokenizer(problem.question).input_ids)
        out.append(Prompt(ids=ids, kind=str(problem.meta.get("kind", "")), index=index, source=str(path)))
    return out


def validation_prompts(tokenizer, n: int | None = None, path: str | Path | None = None) -> list[Prompt]:
    """Validation prompts (default the shipped VALIDATION_FILE): the only prompts a prompt-file tuning reads."""
    return read_prompts(Path(path) if path is not None else VALIDATION_FILE, tokenizer, 0, n)


def check_prompts_file(path) -> Path:
    """The measured prompts file (default TEST_FILE); the validation file is refused (it is tuned on)."""
    path = Path(path) if path is not None else TEST_FILE
    if not path.is_file() and not path.is_absolute() and (DATA.parents[3] / path).is_file():
        path = DATA.parents[3] / path  # a path from the source tree's root, as the presets give them
    if not path.is_file():
        raise ValueError(f"--prompts-file {str(path)!r} does not exist")
    if any(path.resolve() == shipped.resolve() for shipped in VALIDATION_FILES):
        raise ValueError(f"--prompts-file {path} is one of the bench's validation sets, which it tunes on; measure "
                         f"on other prompts (default {TEST_FILE.name})")
    return path
