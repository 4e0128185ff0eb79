"""The drafter kinds as the commands and sweeps use them (`--drafter` of demo, generate and the bench).

Each kind has a zoo model (`specdiff.models.DRAFTER_KINDS`), its own effort knob and its own sampling
defaults (the zoo's `configs.SAMPLING`, applied by the loader):
- masked: K denoising steps (or a threshold tau), prefix cache off / round / persistent;
- block: K steps or SDAR's confidence threshold tau (its prefix is always cached); B at most the block
  length it was trained on;
- uniform: K steps (no threshold);
- dflash: no effort knob: one step;
- ar: no effort knob: one token per forward;
- lookup: `sd.PromptLookupDrafter`, no model and no effort knob (its n-gram sizes, `LOOKUP_KEYS`, come from
  `RunConfig.extra`); fits any verifier, and is the default drafter of a real verifier that has no drafter
  of its own (`default_drafter`).
With a real verifier, `dflash`, `ar` and `masked` name the drafters distilled for it (`specdiff distill`,
shipped for SmolLM2-135M-Instruct; `for_verifier`), and its default drafter is its distilled DFlash drafter.
`resolve` turns a kind, a zoo name, a distilled drafter or a local checkpoint into (kind, model reference); `require_weights`
refuses a zoo model that is not trained yet, naming the command that trains it.
"""
from __future__ import annotations

import json
from pathlib import Path

from specdiff.zoo import distilled

KIND_OF_LOADER = {"masked": "masked", "block": "block", "uniform": "uniform", "dflash": "dflash",
                  "autoregressive": "ar"}  # `models.drafter_kind` -> the engine's kind
EFFORT = {  # which effort knobs a kind takes (RunConfig fields)
    "masked": ("steps", "threshold"), "block": ("steps", "threshold"), "uniform": ("steps",),
    "dflash": (), "ar": (), "lookup": (),
}
DISTILLED_KINDS = ("dflash", "ar", "masked")  # kinds `specdiff distill` trains for a real verifier (`for_verifier`)
LOOKUP_KEYS = ("max_ngram", "min_ngram", "max_draft")  # `sd.PromptLookupDrafter`'s knobs (RunConfig.extra)


def default_drafter(verifier: str) -> str:
    """The drafter used when none is named: the zoo's masked drafter for the testbed's verifier; for a real
    verifier its shipped distilled DFlash drafter (`specdiff.zoo.distilled`), else prompt lookup (the testbed's
    drafters do not fit its vocabulary)."""
    from specdiff import models

    if not models.is_real(verifier):
        return "masked-drafter"
    return distilled.shipped_for(verifier, "dflash") or models.LOOKUP


def for_verifier(drafter: str, verifier: str) -> str:
    """`--drafter dflash` (or `ar`, `masked`) with a real verifier: that verifier's own shipped distilled drafter, when
    there is one; anything else unchanged."""
    from specdiff import models

    if drafter in DISTILLED_KINDS and models.is_real(verifier):
        return distilled.shipped_for(verifier, drafter) or drafter
    return drafter


def check_pair(drafter: str, verifier: str) -> None:
    """Refuses a testbed drafter for a real verifier, saying why, before any weights load."""
    from specdiff import models, zoo

    reference = models.DRAFTER_KINDS.get(drafter, drafter)
    if reference in zoo.TRAINABLE and models.is_real(verifier):
        own = [name for kind in DISTILLED_KINDS if (name := distilled.shipped_for(verifier, kind))]
        raise ValueError(f"--drafter {drafter}: the testbed's drafters ({reference}) were trained with the testbed's "
                         f"arithmetic tokenizer and do not fit the vocabulary of the real verifier {verifier!r}; use "
                         f"--drafter {models.LOOKUP} (prompt lookup, no training)"
                         + (f", {' or '.join(own)} (distilled for it)" if own else "")
                         + f" or a drafter trained for it (`specdiff distill --verifier {verifier} --kind dflash`)")


def resolve(drafter: str, verifier: str | None = None) -> tuple[str, str]:
    """A kind ("block"), a zoo name ("block-drafter"), a distilled drafter or a local checkpoint -> (kind, model
    reference); with a real `verifier`, "dflash" and "ar" name its own distilled drafters (`for_verifier`)."""
    from specdiff import models

    if verifier is not None:
        drafter = for_verifier(drafter, verifier)
    if drafter == models.LOOKUP:
        return models.LOOKUP, models.LOOKUP
    folder = distilled.folder(drafter)
    if folder is not None:
        return distilled.ROLES[json.loads((folder / "config.json").read_text())["specdiff_role"]], drafter
    if drafter in models.DRAFTER_KINDS:
        return drafter, models.DRAFTER_KINDS[drafter]
    for kind, name in models.DRAFTER_KINDS.items():
        if drafter == name:
            return kind, name
    path = Path(drafter)
    if not (path / "config.json").is_file():
        raise ValueError(f"unknown drafter {drafter!r}: not a kind ({', '.join(models.DRAFTER_KINDS)}), a zoo "
                         f"drafter ({', '.join(models.DRAFTER_KINDS.values())}), a distilled drafter "
                         f"({', '.join(distilled.names()) or 'none shipped'}) nor a local directory with a "
                         "config.json")
    return KIND_OF_LOADER[models.drafter_kind(json.loads((path / "config.json").read_text()))], drafter


def require_weights(reference: str) -> None:
    """FileNotFoundError naming `specdiff zoo train NAME` when a zoo model has no weights yet."""
    from specdiff import zoo

    if reference in zoo.TRAINABLE and not (zoo.model_dir(reference) / "model.safetensors").is_file():
        raise FileNotFoundError(f"the zoo model {reference} is not shipped yet ({zoo.model_dir(reference)} has no "
                                f"weights): train it with `specdiff zoo train {reference}` (see docs/drafters.md), "
                                "or give a trained checkpoint's folder")


def check_effort(kind: str, steps: int = 1, threshold: float | None = None) -> None:
    """ValueError when a new kind is given an effort knob it does not have (uniform: no tau; dflash: none).
    The AR drafter ignores them, as it always has (sweeps share one grid across drafters)."""
    if kind in ("ar", "lookup"):
        return
    if threshold is not None and "threshold" not in EFFORT[kind]:
        raise ValueError(f"--threshold (tau) does not apply to the {kind} drafter; it takes "
                         f"{' or '.join(EFFORT[kind]) or 'no effort knob (one step per round)'}")
    if steps != 1 and "steps" not in EFFORT[kind]:
        raise ValueError(f"--steps (K) does not apply to the {kind} drafter: it drafts a block in one step")


def drafter_options(kind: str, config) -> dict:
    """The drafter keyword arguments of a RunConfig for a drafter of `kind`."""
    check_effort(kind, config.steps, config.threshold)
    options = {}
    if kind in ("masked", "block"):
        options = dict(steps=config.steps, threshold=config.threshold)
        if kind == "masked":  # a block drafter always caches its prefix
            options["prefix_cache"] = config.prefix_cache
    elif kind == "uniform":
        options = dict(steps=config.steps)
    elif kind == "lookup":  # its n-gram sizes and longest draft, from RunConfig.extra
        options = {key: config.extra[key] for key in LOOKUP_KEYS if key in config.extra}
    if config.order is not None and kind in ("masked", "block", "uniform"):
        options["order"] = config.order
    return options


def describe(kind: str, steps: int = 1, threshold: float | None = None, block_size: int = 8) -> str:
    """A short row name: "block tau=0.9 B=8", "uniform K=2 B=8", "dflash B=16", "AR drafter B=4"."""
    effort = ""
    if "threshold" in EFFORT[kind] and threshold is not None:
        effort = f" tau={threshold}"
    elif "steps" in EFFORT[kind]:
        effort = f" K={steps}"
    return f"{'AR drafter' if kind == 'ar' else kind}{effort} B={block_size}"
