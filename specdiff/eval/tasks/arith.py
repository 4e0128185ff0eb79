"""The `arith` task: the shipped word-problem generator, GSM8K-style answer extraction and
exact-match scoring by value.

`arith` imitates GSM8K in miniature: a short story of 3-4 steps with + - * and exact division,
varied names, objects and phrasing; the reference answer is a chain of thought, one line per step
(`Mia has 4 * 6 = 24 shells.`), ending in `#### <number>` as in GSM8K.

Splits are disjoint by construction: every problem belongs to exactly one split, decided by a hash
of its question text (`split_of`), and each split's stream keeps only its own problems.

Scoring (`is_correct`) compares values, not strings: the number after the first `####`, else the
last `\\boxed{n}`, normalised (`1,800` = `1800`, `18.0` = `18`). The `gsm8k` task instead follows
lm-evaluation-harness to the letter.
"""
from __future__ import annotations

import hashlib
import random
import re
from decimal import Decimal
from fractions import Fraction
from typing import Any, Sequence

from specdiff.eval.tasks.base import Problem, Score, Task, chat_prompt, check_lengths, check_n

SPLITS = ("train", "validation", "test")
SPLIT_SEEDS = {"train": 0, "validation": 1, "test": 2}  # seed offsets: each split has its own stream

# ---------------------------------------------------------------------------------------------
# The `arith` generator
# ---------------------------------------------------------------------------------------------

NAMES = {  # name -> pronoun
    "Mia": "She", "Tom": "He", "Ava": "She", "Leo": "He", "Zoe": "She", "Sam": "He", "Ivy": "She",
    "Max": "He", "Lily": "She", "Ben": "He", "Emma": "She", "Noah": "He", "Ruby": "She", "Jack": "He",
    "Nora": "She", "Owen": "He", "Lucy": "She", "Finn": "He", "Rosa": "She", "Omar": "He",
}
OBJECTS = ["apples", "marbles", "stickers", "cookies", "pencils", "cards", "shells", "coins", "eggs",
           "books", "candies", "stamps", "flowers", "beads", "toys", "rocks", "buttons", "oranges"]
CONTAINERS = ["boxes", "bags", "jars", "packs", "baskets", "crates", "trays", "bowls"]
BUY = ["buys", "finds", "gets", "receives", "picks up", "wins"]
LOSE = ["gives away", "loses", "sells", "eats", "uses", "drops"]
QUESTIONS = ["How many {obj} does {name} have now?", "How many {obj} does {name} end up with?",
             "How many {obj} does {name} have in the end?", "What is the final number of {obj}?"]
SHARE_GROUPS = {  # group word -> question about one share
    "friends": "How many {obj} does each friend get?",
    "groups": "How many {obj} are in each group?",
    "piles": "How many {obj} go in each pile?",
}

MAX_VALUE = 99  # running totals stay in 1..MAX_VALUE


def format_prompt(question: str) -> str:
    """The prompt the models are trained on: the question, then a newline before the answer."""
    return question + "\n"


def _start_step(rng: random.Random, name: str, obj: str) -> tuple[str, str, int]:
    """First step: a product `count * per = total` (containers) or a plain count."""
    if rng.random() < 0.7:
        count, per = rng.randint(2, 9), rng.randint(2, 12)
        container = rng.choice(CONTAINERS)
        total = count * per
        sentence = rng.choice([
            f"{name} has {count} {container} of {obj} with {per} {obj} in each.",
            f"{name} buys {count} {container} of {obj}. Each one holds {per} {obj}.",
            f"There are {per} {obj} in each of the {count} {container} that {name} has.",
        ])
        line = f"{name} has {count} * {per} = {total} {obj}."
        return sentence, line, total
    total = rng.randint(10, 60)
    sentence = rng.choice([f"{name} has {total} {obj}.", f"{name} starts with {total} {obj}."])
    line = f"{name} starts with {total} {obj}."
    return sentence, line, total


def _middle_step(rng: random.Random, pronoun: str, obj: str, value: int) -> tuple[str, str, int] | None:
    """One more step on the running value: add, subtract, add a product, or multiply."""
    kind = rng.choice(["add", "add", "sub", "sub", "add_product", "times"])
    low = pronoun.lower()
    if kind == "add":
        b = rng.randint(2, 40)
        if value + b > MAX_VALUE:
            return None
        verb = rng.choice(BUY)
        return (f"{pronoun} {verb} {b} more {obj}.",
                f"{pronoun} {verb} {b}, so {value} + {b} = {value + b}.", value + b)
    if kind == "sub":
        if value < 4:
            return None
        b = rng.randint(2, min(40, value - 1))
        verb = rng.choice(LOSE)
        return (f"{pronoun} {verb} {b} {obj}.",
                f"{pronoun} {verb} {b}, so {value} - {b} = {value - b}.", value - b)
    if kind == "add_product":
        count, per = rng.randint(2, 5), rng.randint(2, 9)
        if value + count * per > MAX_VALUE:
            return None
        container = rng.choice(CONTAINERS)
        return (f"Then {low} {rng.choice(BUY)} {count} {container} with {per} {obj} each.",
                f"That is {count} * {per} = {count * per} more, so {value} + {count * per} = {value + count * per}.",
                value + count * per)
    k = rng.choice([2, 2, 3])
    if value * k > MAX_VALUE:
        return None
    word = {2: "doubles", 3: "triples"}[k]
    return (f"Then {low} {word} the {obj}.",
            f"{pronoun} {word} them, so {value} * {k} = {value * k}.", value * k)


def _share_step(rng: random.Random, pronoun: str, obj: str, value: int) -> tuple[str, str, str, int] | None:
    """Final exact division: share the running value equally."""
    divisors = [d for d in range(2, 10) if value % d == 0 and value // d >= 2]
    if not divisors:
        return None
    d = rng.choice(divisors)
    group = rng.choice(sorted(SHARE_GROUPS))
    sentence = f"{pronoun} shares them equally among {d} {group}."
    question = SHARE_GROUPS[group].format(obj=obj)
    return sentence, f"Each gets {value} / {d} = {value // d}.", question, value // d


def make_problem(rng: random.Random) -> Problem:
    """Draws one `arith` problem: a start, 2-3 further steps, maybe a final equal share."""
    while True:
        name = rng.choice(sorted(NAMES))
        pronoun = NAMES[name]
        obj = rng.choice(OBJECTS)
        sentence, line, value = _start_step(rng, name, obj)
        sentences, lines = [sentence], [line]
        n_middle = rng.choice([2, 2, 3])
        while len(lines) < 1 + n_middle:
            step = _middle_step(rng, pronoun, obj, value)
            if step is not None:
                sentences.append(step[0])
                lines.append(step[1])
                value = step[2]
        question = rng.choice(QUESTIONS).format(obj=obj, name=name)
        if n_middle == 2 and rng.random() < 0.6:
            share = _share_step(rng, pronoun, obj, value)
            if share is None:
                continue
            sentences.append(share[0])
            lines.append(share[1])
            question, value = share[2], share[3]
        if value < 1:
            continue
        text = " ".join(sentences) + " " + question
        answer = "\n".join(lines) + f"\n#### {value}"
        return Problem(question=text, answer=answer, target=str(value))


def split_of(question: str) -> str:
    """The split a question belongs to: 5% test, 5% validation, 90% train, by a hash of its text."""
    bucket = int(hashlib.sha256(question.encode()).hexdigest()[:8], 16) % 20
    return "test" if bucket == 0 else "validation" if bucket == 1 else "train"


def iter_problems(split: str, seed: int = 0):
    """Endless deterministic stream of `arith` problems of one split (and only that split)."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose from {SPLITS}")
    rng = random.Random(1_000_003 * seed + SPLIT_SEEDS[split])
    while True:
        problem = make_problem(rng)
        if split_of(problem.question) == split:
            yield problem


def arith_problems(split: str = "test", n: int = 500, seed: int = 0) -> list[Problem]:
    """The first `n` problems of a split's stream; the same (split, n, seed) always gives the same list.
    Test problems are distinct from each other (duplicates are skipped)."""
    out, seen = [], set()
    for problem in iter_problems(split, seed):
        if split != "train" and problem.question in seen:
            continue
        seen.add(problem.question)
        out.append(problem)
        if len(out) == n:
            return out
    return out


# ---------------------------------------------------------------------------------------------
# GSM8K-style answer extraction and scoring
# ---------------------------------------------------------------------------------------------

_NUMBER = r"-?\$?\s*\d[\d,]*(?:\.\d+)?|-?\$?\s*\.\d+"
_HASHES = re.compile(r"####\s*(" + _NUMBER + ")")
_BOXED = re.compile(r"\\boxed\s*\{\s*(" + _NUMBER + r")\s*\}")
_ANY_NUMBER = re.compile(_NUMBER)


def normalize_number(text: str) -> str | None:
    """Canonical form of a number string: commas, `$` and spaces dropped, `-0` -> `0`, `2.50` -> `2.5`,
    `3.0` -> `3`. None if it is not a number."""
    cleaned = text.replace(",", "").replace("$", "").replace(" ", "").strip()
    if cleaned.endswith("."):
        cleaned = cleaned[:-1]
    try:
        value = Fraction(cleaned)
    except (ValueError, ZeroDivisionError):
        return None
    if value.denominator == 1:
        return str(value.numerator)
    return format(Decimal(value.numerator) / Decimal(value.denominator), "f").rstrip("0")


def extract_answer(text: str, fallback_last_number: bool = False) -> str | None:
    """The final answer of a completion, as GSM8K is scored: the number after the first `####`, else
    the last `\\boxed{n}`, else (only if asked) the last number in the text. Normalised; None if absent."""
    match = _HASHES.search(text)
    if match:
        return normalize_number(match.group(1))
    boxed = _BOXED.findall(text)
    if boxed:
        return normalize_number(boxed[-1])
    if fallback_last_number:
        numbers = _ANY_NUMBER.findall(text)
        if numbers:
            return normalize_number(numbers[-1])
    return None


def is_correct(completion: str, target: str) -> bool:
    """Exact match of the extracted answer against the reference answer (itself normalised, and
    extracted first if it is a full GSM8K solution with `####`)."""
    reference = extract_answer(target) if "####" in target or "boxed" in target else normalize_number(target)
    predicted = extract_answer(completion)
    if predicted is None or reference is None:
        return False
    return Fraction(predicted) == Fraction(reference)


def accuracy(completions: list[str], targets: list[str]) -> float:
    """Exact-match accuracy over paired completions and targets."""
    if len(completions) != len(targets):
        raise ValueError("completions and targets differ in length")
    if not targets:
        return 0.0
    return sum(is_correct(c, t) for c, t in zip(completions, targets)) / len(targets)


# ---------------------------------------------------------------------------------------------
# The task
# ---------------------------------------------------------------------------------------------


def load(n: int | None = 500, split: str = "test", seed: int = 0) -> list[Problem]:
    """The first `n` problems of a split (500 test problems by default)."""
    check_n(n)
    return arith_problems(split, 500 if n is None else n, seed)


def build_prompt(problem: Problem, tokenizer: Any = None, boxed: bool = False) -> str:
    """The testbed's prompt (`format_prompt`), or the tokenizer's chat template around the question."""
    return chat_prompt(problem.question, tokenizer, boxed=boxed, plain=format_prompt(problem.question))


def score(problems: Sequence[Problem], completions: Sequence[str]) -> list[Score]:
    """Exact match by value of the extracted answer (`is_correct`)."""
    check_lengths(problems, completions)
    return [Score(is_correct(c, p.target), extract_answer(c)) for p, c in zip(problems, completions)]


TASK = Task("arith", load, build_prompt, score, description="the shipped testbed: generated multi-step word problems")
