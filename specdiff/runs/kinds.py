"""The drafter kinds as runs use them: a RunConfig's knobs through each kind's registered spec.

Names become kinds and models in `specdiff.models` (`resolve`, `default_drafter`, `for_verifier`, `check_pair`,
`require_weights`, re-exported here for old imports); what differs between kinds lives on its `KindSpec`
(`specdiff.drafters.registry`): effort knobs, options, row names, exactness.
"""
from __future__ import annotations

from specdiff.drafters import registry
from specdiff.models import check_pair, default_drafter, for_verifier, require_weights, resolve  # noqa: F401


def drafter_options(kind: str, config) -> dict:
    """The drafter keyword arguments of a RunConfig for a drafter of `kind`."""
    return registry.get(kind).run_options(config)


def check_effort(kind: str, steps: int = 1, threshold: float | None = None) -> None:
    """ValueError when a kind is given an effort knob it does not have (uniform: no tau; dflash: none)."""
    registry.get(kind).check_effort(steps, threshold)


def describe(kind: str, steps: int = 1, threshold: float | None = None, block_size: int = 8) -> str:
    """A short row name: "block tau=0.9 B=8", "uniform K=2 B=8", "dflash B=16", "AR drafter B=4"."""
    return registry.get(kind).describe(steps, threshold, block_size)


def takes_steps(kind: str) -> bool:
    """Whether a kind's effort is K denoising steps."""
    return "steps" in registry.get(kind).effort


def __getattr__(name: str):
    """Old tables, computed from the registry: EFFORT (kind -> knobs), LOOKUP_KEYS, DISTILLED_KINDS."""
    if name == "EFFORT":
        return {spec.name: spec.effort for spec in registry.specs()}
    if name == "LOOKUP_KEYS":
        return registry.get("lookup").option_keys
    if name == "DISTILLED_KINDS":
        from specdiff.models import distilled_kinds

        return tuple(distilled_kinds())
    raise AttributeError(f"module 'specdiff.runs.kinds' has no attribute {name!r}")
