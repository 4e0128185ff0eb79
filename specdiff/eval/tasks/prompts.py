"""`prompts`: a user's own prompts from a JSONL file, for real chat models.

One JSON object per line, either
    {"prompt": "text"}                                   used as it is (no chat template), or
    {"messages": [{"role": "user", "content": "..."}]}   put through the tokenizer's chat template,
with any other keys carried into the results (`Problem.meta`, e.g. a "kind" of prompt). A line may give
a reference answer as "target": it is then scored as correct when the completion contains the target
(whitespace-normalised). A file without targets is not scored: `has_references` is False, and the
commands report speed and acceptance only, saying that nothing was scored.

Bad lines are refused with their line number (`DataFileError`): not JSON, neither "prompt" nor
"messages", a message without string "role" and "content", or a conversation without a user turn.
"""
from __future__ import annotations

import json
from pathlib import Path

from specdiff.eval.tasks.base import DataFileError, MissingDataError, Problem, Score, Task, check_lengths, check_n

TEXT_KEYS = ("prompt", "messages", "target")


def load(n: int | None = None, path: str | Path | None = None) -> list[Problem]:
    """The first n prompts of the JSONL file at `path` (all of them when it holds fewer)."""
    if path is None:
        raise MissingDataError("the prompts task needs a file: path=FILE.jsonl (one {\"prompt\"} or "
                               "{\"messages\"} object per line)")
    problems = read(path)
    check_n(n, None, "prompts")
    return problems if n is None else problems[:n]


def read(path: str | Path) -> list[Problem]:
    """Every prompt of the file, in order; DataFileError naming the line of the first bad one."""
    path = Path(path)
    if not path.is_file():
        raise MissingDataError(f"no prompts file at {path}")
    problems = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise DataFileError(path, number, f"not a JSON object ({error.msg})") from None
            problems.append(_problem(record, path, number))
    if not problems:
        raise DataFileError(path, None, "no prompts in the file")
    return problems


def is_conversation(problem: Problem) -> bool:
    return "messages" in problem.meta


def has_references(problems) -> bool:
    """Whether every problem carries a reference answer ("target"), so that it can be scored."""
    return bool(problems) and all(p.target for p in problems)


def build_prompt(problem: Problem, tokenizer=None, boxed: bool = False) -> str:
    """The text the model continues: a conversation through the chat template (assistant turn opened), or
    the raw prompt. Without a chat template a conversation is its messages' contents, one per line."""
    if boxed:
        raise ValueError("--boxed does not apply to a prompts file: write the instruction into the prompts")
    if not is_conversation(problem):
        return problem.question
    messages = problem.meta["messages"]
    if tokenizer is not None and getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
    return "\n".join(m["content"] for m in messages) + "\n"


def score(problems, completions) -> list[Score]:
    """Correct when the completion contains the reference ("target"), whitespace-normalised; unscored lines
    (no target) are never correct."""
    check_lengths(problems, completions)
    scores = []
    for problem, completion in zip(problems, completions):
        if not problem.target:
            scores.append(Score(False, None, "no reference answer"))
            continue
        found = " ".join(problem.target.split()) in " ".join(completion.split())
        scores.append(Score(found, problem.target if found else None))
    return scores


def _problem(record, path: Path, number: int) -> Problem:
    if not isinstance(record, dict) or ("prompt" in record) == ("messages" in record):
        raise DataFileError(path, number, "expected a JSON object with either 'prompt' (a string) or 'messages' "
                                          "(a list of {role, content})")
    extra = {k: v for k, v in record.items() if k not in TEXT_KEYS}
    target = record.get("target", "")
    if not isinstance(target, str):
        raise DataFileError(path, number, "'target' must be a string")
    if "prompt" in record:
        if not isinstance(record["prompt"], str) or not record["prompt"]:
            raise DataFileError(path, number, "'prompt' must be a non-empty string")
        return Problem(question=record["prompt"], answer=target, target=target, id=str(record.get("id", "")),
                       meta=extra)
    messages = record["messages"]
    if not isinstance(messages, list) or not messages:
        raise DataFileError(path, number, "'messages' must be a non-empty list of {role, content}")
    for message in messages:
        if not (isinstance(message, dict) and isinstance(message.get("role"), str)
                and isinstance(message.get("content"), str)):
            raise DataFileError(path, number, f"each message needs string 'role' and 'content', got {message!r}")
    if not any(m["role"] == "user" for m in messages):
        raise DataFileError(path, number, f"the conversation has no user turn (roles: {[m['role'] for m in messages]})")
    last_user = [m["content"] for m in messages if m["role"] == "user"][-1]
    return Problem(question=last_user, answer=target, target=target, id=str(record.get("id", "")),
                   meta={**extra, "messages": messages})


TASK = Task(name="prompts", load=load, build_prompt=build_prompt, score=score,
            description="your own prompts from a JSONL file ({\"prompt\"} or {\"messages\"} per line), for speed "
                        "and acceptance; scored only where lines give a \"target\"")
