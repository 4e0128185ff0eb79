"""Evaluation: the benchmark tasks (`tasks`: arith, gsm8k, humaneval, gpqa, and `get_task`), the
sandbox for generated code (`sandbox.run_program`), and the sweep machinery, given its unit function
by the feature that uses it: `runner` (inline, process-pool and Ray executors, progress), `store` (the
continuous bench's units) and `sweepstore` (a language sweep's rows), `sweepconfig` (TOML checked line
by line), `statistics`, `frontier` (Pareto frontiers, hypervolumes), `figures` and `report` (HTML).
Imports no feature package."""
from specdiff.eval.tasks import (Problem, Score, Task, accuracy, arith_problems, extract_answer, get_task, is_correct,
                                 load_gpqa, load_gsm8k, split_of)

__all__ = ["Problem", "Score", "Task", "get_task", "arith_problems", "split_of", "extract_answer", "is_correct",
           "accuracy", "load_gsm8k", "load_gpqa"]
