"""Evaluation: tasks (the shipped `arith` generator, GSM8K-style scoring, local GSM8K/GPQA loaders)."""
from specdiff.eval.tasks import (Problem, accuracy, arith_problems, extract_answer, is_correct, load_gpqa,
                                 load_gsm8k, split_of)

__all__ = ["Problem", "arith_problems", "split_of", "extract_answer", "is_correct", "accuracy", "load_gsm8k",
           "load_gpqa"]
