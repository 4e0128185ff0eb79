"""Suites: what a bench measures and tunes on, as `runs.prompts.Prompt`s.

Terms:
- Suite: the measured prompts (`test`), the prompts tuning reads (`validation`, disjoint from `test`), and
  `score(text, prompt)`, whether an answer is right (None where the suite has no answers);
- the arith suite: the testbed's arithmetic word problems, validation and test splits, scored like GSM8K;
- a prompts suite: a JSONL prompts file (`--prompts-file`; default the shipped real_test.jsonl) measured, the
  shipped validation prompts tuned on (`validation_file`: real_validation.jsonl, or spec_validation.jsonl for
  the Spec-Bench file); no answers. `--prompts-file` means this on every preset, the testbed's included (issue 52:
  the flag means one thing on every suite, and the report's `tuned_on` names the tuning set).
"""
from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Callable

from specdiff.runs.prompts import Prompt, check_prompts_file, read_prompts, validation_prompts


class Suite:
    """A suite's prompts are read when first asked for (a tuning run never reads the measured ones)."""

    def __init__(self, name: str, test: Callable[[], list[Prompt]], validation: Callable[[], list[Prompt]],
                 score: Callable[[str, Prompt], bool] | None, measured_on: str, tuned_on: str, validation_size: int):
        self.name, self.score, self.measured_on, self.tuned_on = name, score, measured_on, tuned_on
        self.validation_size = validation_size  # known without reading the prompts (the run's estimate)
        self._test, self._validation = test, validation

    @cached_property
    def test(self) -> list[Prompt]:
        return self._test()

    @cached_property
    def validation(self) -> list[Prompt]:
        return self._validation()


def suite(settings, tokenizer) -> Suite:
    """The settings' suite: a prompts file when one is given or the preset's suite is "prompts", else arith."""
    if settings.prompts_file is not None or settings.suite == "prompts":
        return _prompts_suite(settings, tokenizer)
    if settings.suite != "arith":
        raise ValueError(f"unknown suite {settings.suite!r}: expected arith or prompts")
    return _arith_suite(settings, tokenizer)


def _arith_suite(settings, tokenizer) -> Suite:
    from specdiff.bench.settings import ARITH_PROBLEMS, ARITH_TUNE_PROBLEMS
    from specdiff.eval import tasks

    tune_problems = settings.tune_problems or ARITH_TUNE_PROBLEMS

    def prompts(split, first, n):
        problems = tasks.arith_problems(split, first + (n if n is not None else ARITH_PROBLEMS))[first:]
        return [Prompt(ids=list(tokenizer(p.prompt).input_ids), kind="", index=i, source=f"arith {split}",
                       target=p.target) for i, p in enumerate(problems, first)]

    return Suite("arith", lambda: prompts("test", settings.first_problem, settings.problems),
                 lambda: prompts("validation", 0, tune_problems),
                 lambda text, prompt: bool(tasks.is_correct(text, prompt.target)), "arith test", "arith validation",
                 tune_problems)


def _prompts_suite(settings, tokenizer) -> Suite:
    from specdiff.runs.prompts import SPEC_BENCH_FILE, SPEC_VALIDATION_FILE, VALIDATION_FILE

    path = check_prompts_file(settings.prompts_file)
    default = SPEC_VALIDATION_FILE if path.resolve() == SPEC_BENCH_FILE.resolve() else VALIDATION_FILE
    validation = Path(settings.validation_file or default)  # Spec-Bench is tuned on its six kinds' own prompts
    if not validation.is_file():
        raise ValueError(f"validation_file {str(validation)!r} does not exist")
    if validation.resolve() == path.resolve():
        raise ValueError(f"{path} is both measured and tuned on: give another validation_file")
    lines = sum(1 for line in validation.read_text().splitlines() if line.strip())
    return Suite(path.name, lambda: read_prompts(path, tokenizer, settings.first_problem, settings.problems),
                 lambda: validation_prompts(tokenizer, settings.tune_problems, validation), None, str(path),
                 f"{validation.name} (validation, tuning only)", min(lines, settings.tune_problems or lines))
