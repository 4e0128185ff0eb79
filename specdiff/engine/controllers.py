"""Run-time controllers: the drafter's effort and the draft length chosen per row and per round.

The first paper fixes one effort (K denoising steps) and one draft length B for every row and every
round, and names "dynamic scheduling policies that adjust denoising budgets ... at runtime" as future
work. A controller makes that choice in Algorithm 1's DiffusionDraft (line 4), row by row:

    plan   = controller.plan()                      # before drafting: B_r, K_r, a confidence floor
    draft  = drafter.propose_planned(..., plan)     # a draft of length L_r <= B_r per row
    ...verification of the ragged drafts in one verifier forward...
    controller.observe(drafted=L, accepted=k)       # after the round: the row's past grows

Terms:
- plan (`RoundPlan`): per row, the longest draft B_r, the denoising steps K_r (None: the drafter's
  own effort), a confidence floor c_r (None: none): the draft ends with the first drafted position
  whose confidence is below c_r (FailFast: extend while every token stays confident); and a finish
  level f_r (None: none): a multi-step drafter unmasks at once every position at least f_r confident
  and spreads its steps over the rest (Fast-dLLM's parallel decoding, measured on the untempered
  output, with K_r as the most steps).
- confidence of a drafted position: the largest probability of the drafter's (untempered) output
  at that position, at the step it was sampled, max_v softmax(logits)(v): a function of the
  drafter's state before the token is drawn, never of the drawn token.
- past: the row's drafted and accepted counts of earlier rounds (`observe`).

Exactness (docs/engine.md, "Controllers"): a controller sees only the past and the drafter's state
before each token is drawn, and changes only which proposal is made; the verifier's rule is applied
to whatever was proposed. Point mass stays exact for any plan; marginal mode stays exact for drafters
whose q is their exact marginal, as long as the plan keeps that true: a masked drafter unmasking left
to right may get K_r per row, but a finish level reorders its unmasking (exact only at K = 1)
(`Drafter.exact_marginal_with(steps_vary, reorders)`).

Policies shipped (each is one small class; `parse_controller` builds them from a name):
- `ConfidenceBounded` ("confidence"): the draft ends where the drafter's confidence drops below a
  floor (FailFast's rule for a one-step drafter; a multi-step drafter also stops denoising as soon
  as its unmasked prefix holds such a token, which saves the remaining steps), and, with `finish`,
  steps are spent only on the positions the drafter is unsure of.
- `AcceptanceTracking` ("acceptance"): B_r follows the row's recent accepted length (DiffuSpec's
  idea): an exponential average of accepted tokens plus a margin, grown after a full accept.
- `EffortSchedule` ("effort"): K_r = `high` steps after a round rejected early (fewer than `early`
  of its drafted tokens accepted), else `low`.
- `Combined` ("a+b"): the tightest B, the steps of the one policy that sets them, the highest floor.
"""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class RoundPlan:
    block_sizes: list[int]  # per row: the longest draft B_r of this round, 1..B
    steps: list[int] | None = None  # per row: denoising steps K_r; None: the drafter's own effort
    floors: list[float] | None = None  # per row: the confidence floor c_r; None: none
    finish: list[float] | None = None  # per row: unmask at once every position at least this confident

    @property
    def max_block(self) -> int:
        return max(self.block_sizes)


class Controller:
    """The protocol. A controller keeps one state per row of the current batch: `start` begins a
    batch of `rows` rows whose drafts are at most `block_size` long, `plan` is asked before each
    round's drafting, `observe` after each round's verification, and `select` when rows leave."""

    name = "controller"
    sets_steps = False  # True when plans give steps (K_r varies: see Drafter.exact_marginal_with)
    reorders = False  # True when plans give a finish level (unmasking no longer follows the drafter's order)

    def start(self, rows: int, block_size: int) -> None:
        self.rows, self.block_size = rows, int(block_size)
        self.drafted = [[] for _ in range(rows)]  # per row: drafted tokens per round
        self.accepted = [[] for _ in range(rows)]  # per row: accepted tokens per round

    def plan(self) -> RoundPlan:
        return RoundPlan([self.block_size] * self.rows)

    def observe(self, drafted: list[int], accepted: list[int]) -> None:
        for row, (d, a) in enumerate(zip(drafted, accepted)):
            self.drafted[row].append(int(d))
            self.accepted[row].append(int(a))

    def select(self, keep: list[int]) -> None:
        """Keep the rows at positions `keep` (the others finished)."""
        self.rows = len(keep)
        self.drafted = [self.drafted[i] for i in keep]
        self.accepted = [self.accepted[i] for i in keep]

    def describe(self) -> str:
        return self.name


class ConfidenceBounded(Controller):
    """Drafting bounded by the drafter's confidence. The draft ends with the first drafted position whose
    confidence is below `floor` (0 <= floor <= 1; 0: never). With `finish` (0 < finish <= 1), a multi-step
    drafter also unmasks at once, at every step, each position whose confidence is at least `finish`, and
    spreads its remaining steps over the positions left: steps are spent only where it is unsure."""

    name = "confidence"

    def __init__(self, floor: float = 0.3, finish: float | None = None):
        _check_fraction("confidence floor", floor, zero=True)
        if finish is not None:
            _check_fraction("confidence finish", finish)
        self.floor, self.finish = float(floor), None if finish is None else float(finish)
        self.reorders = finish is not None

    def plan(self) -> RoundPlan:
        return RoundPlan([self.block_size] * self.rows, floors=[self.floor] * self.rows if self.floor else None,
                         finish=None if self.finish is None else [self.finish] * self.rows)

    def describe(self) -> str:
        return f"confidence:floor={self.floor:g}" + ("" if self.finish is None else f",finish={self.finish:g}")


class AcceptanceTracking(Controller):
    """B_r = clamp(ceil(avg_r) + margin, min_block, B), avg_r an exponential average (weight `decay` on
    the past) of the row's accepted tokens per round; a fully accepted round adds `margin` again (the
    row may accept more than it was offered). The first round drafts B."""

    name = "acceptance"

    def __init__(self, margin: int = 2, decay: float = 0.5, min_block: int = 2):
        _check_integer("margin", margin, 0)
        _check_integer("min_block", min_block, 1)
        if not 0 <= decay < 1:
            raise ValueError(f"acceptance decay must be in [0, 1), got {decay!r}")
        self.margin, self.decay, self.min_block = int(margin), float(decay), int(min_block)

    def plan(self) -> RoundPlan:
        sizes = []
        for drafted, accepted in zip(self.drafted, self.accepted):
            if not accepted:
                sizes.append(self.block_size)
                continue
            average = float(accepted[0])
            for value in accepted[1:]:
                average = self.decay * average + (1 - self.decay) * value
            size = math.ceil(average) + self.margin + (self.margin if accepted[-1] >= drafted[-1] else 0)
            sizes.append(max(min(self.min_block, self.block_size), min(self.block_size, size)))
        return RoundPlan(sizes)

    def describe(self) -> str:
        return f"acceptance:margin={self.margin},decay={self.decay:g},min_block={self.min_block}"


class EffortSchedule(Controller):
    """K_r = `high` after a round that accepted fewer than `early` of its drafted tokens (a rejection
    early in the draft), else `low`; the first round uses `first` (default: low)."""

    name = "effort"
    sets_steps = True

    def __init__(self, low: int = 2, high: int = 6, early: int = 4, first: int | None = None):
        _check_integer("low", low, 1)
        _check_integer("high", high, 1)
        _check_integer("early", early, 0)
        if high < low:
            raise ValueError(f"effort high ({high}) must be >= low ({low})")
        if first is not None:
            _check_integer("first", first, 1)
        self.low, self.high, self.early = int(low), int(high), int(early)
        self.first = self.low if first is None else int(first)

    def plan(self) -> RoundPlan:
        steps = []
        for drafted, accepted in zip(self.drafted, self.accepted):
            if not accepted:
                steps.append(self.first)
            else:
                early = accepted[-1] < min(self.early, drafted[-1])
                steps.append(self.high if early else self.low)
        return RoundPlan([self.block_size] * self.rows, steps=steps)

    def describe(self) -> str:
        return f"effort:low={self.low},high={self.high},early={self.early}" + (
            f",first={self.first}" if self.first != self.low else "")


class Combined(Controller):
    """Several policies at once: per row the smallest B_r, the steps of the one policy that sets them,
    the highest confidence floor and the highest finish level."""

    name = "combined"

    def __init__(self, parts: list[Controller]):
        if not parts:
            raise ValueError("Combined needs at least one controller")
        if sum(part.sets_steps for part in parts) > 1:
            raise ValueError("at most one combined controller may set the steps (effort)")
        self.parts = list(parts)
        self.sets_steps = any(part.sets_steps for part in parts)
        self.reorders = any(part.reorders for part in parts)

    def start(self, rows: int, block_size: int) -> None:
        super().start(rows, block_size)
        for part in self.parts:
            part.start(rows, block_size)

    def plan(self) -> RoundPlan:
        plans = [part.plan() for part in self.parts]
        sizes = [min(column) for column in zip(*(plan.block_sizes for plan in plans))]
        steps = next((plan.steps for plan in plans if plan.steps is not None), None)
        given = [plan.floors for plan in plans if plan.floors is not None]
        floors = [max(column) for column in zip(*given)] if given else None
        finishing = [plan.finish for plan in plans if plan.finish is not None]
        finish = [max(column) for column in zip(*finishing)] if finishing else None
        return RoundPlan(sizes, steps=steps, floors=floors, finish=finish)

    def observe(self, drafted: list[int], accepted: list[int]) -> None:
        super().observe(drafted, accepted)
        for part in self.parts:
            part.observe(drafted, accepted)

    def select(self, keep: list[int]) -> None:
        super().select(keep)
        for part in self.parts:
            part.select(keep)

    def describe(self) -> str:
        return "+".join(part.describe() for part in self.parts)


CONTROLLERS = {"confidence": ConfidenceBounded, "acceptance": AcceptanceTracking, "effort": EffortSchedule}
_PARAMETERS = {"confidence": {"floor": float, "finish": float},
               "acceptance": {"margin": int, "decay": float, "min_block": int},
               "effort": {"low": int, "high": int, "early": int, "first": int}}


def parse_controller(spec: str | Controller | None) -> Controller | None:
    """A controller from its name: "confidence", "effort:low=2,high=6", "confidence:floor=0.6+acceptance",
    None / "" / "none" / "fixed" (no controller), or a Controller (returned as is). Unknown names and
    parameters, and values out of range, are ValueErrors naming what is accepted."""
    if spec is None or isinstance(spec, Controller):
        return spec
    if not isinstance(spec, str):
        raise ValueError(f"a controller is a name or a Controller, got {spec!r}")
    text = spec.strip()
    if text in ("", "none", "fixed"):
        return None
    parts = []
    for piece in text.split("+"):
        name, _, arguments = piece.strip().partition(":")
        name = name.strip()
        if name not in CONTROLLERS:
            raise ValueError(f"unknown controller {name!r} in {spec!r}: expected one of {', '.join(CONTROLLERS)} "
                             "(or 'none'), joined with '+', each optionally with ':key=value,...'")
        options = {}
        for item in filter(None, (a.strip() for a in arguments.split(","))):
            key, equals, value = item.partition("=")
            key = key.strip()
            if not equals or key not in _PARAMETERS[name]:
                raise ValueError(f"controller {name!r} takes {', '.join(_PARAMETERS[name])} as key=value, "
                                 f"got {item!r}")
            try:
                options[key] = _PARAMETERS[name][key](value.strip())
            except ValueError:
                raise ValueError(f"controller {name!r}: {key} must be a {_PARAMETERS[name][key].__name__}, "
                                 f"got {value.strip()!r}") from None
        parts.append(CONTROLLERS[name](**options))
    return parts[0] if len(parts) == 1 else Combined(parts)


def _check_fraction(name: str, value, zero: bool = False) -> None:
    low = 0 <= value if zero else 0 < value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (low and value <= 1):
        raise ValueError(f"{name} must be in {'[' if zero else '('}0, 1], got {value!r}")


def _check_integer(name: str, value, minimum: int) -> None:
    if isinstance(value, bool) or int(value) != value or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
