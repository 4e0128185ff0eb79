"""The plugin's state in a vLLM process, all of it in this one module (no vLLM import).

- `PLUGIN`: whether the gates are in place (`hooks.install`) and the sampling patches (`hooks.activate`),
  and what each replaced, for a clean undo.
- `BATCH`: a thread-local carrying the batch being verified from a runner's wrapper (V1 `_sample`, V2
  `_verify`) to the wrapped `rejection_sample`: `.rules` ([b] acceptance rules, None where Lossless; None
  outside a specdiff engine's verification), `.method`, `.seeds` (V2's seeded rows), `.repair` (the CPU
  expand repair applies to this batch), `.reached` (the wrapped rejection_sample ran while the rules were
  set).
- Per engine, read from its VllmConfig once: whether it asks for specdiff and its engine rule, cached by
  the config's identity behind a weak reference (`ByIdentity`), so that no cache keeps a VllmConfig alive.
- The acceptance rule of each setting, and the generator of the lenient rows without a seed (per device).
- `OBSERVERS`: callables told every V1 verification's drafts and final output (after the rules), for
  measurements that count acceptance (`bench`) without patching vLLM again.
"""
from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field

import torch

from specdiff.integrations.vllm.settings import KEY, RuleSetting, engine_rule, request_rule

PROPOSER = "specdiff.integrations.vllm.DiffusionProposer"


@dataclass
class PluginState:
    gates: bool = False  # the pass-through gates are in place (register -> hooks.install)
    active: bool = False  # the sampling patches are in place (the first engine that asks for specdiff)
    repaired: bool = False  # the CPU repair is in place (with the sampling patches, or alone: REPAIR=1)
    patches: list = field(default_factory=list)  # (owner, attribute, vLLM's original) of every sampling patch


PLUGIN = PluginState()
BATCH = threading.local()
OBSERVERS: list = []  # f(draft_token_ids, num_draft_tokens, output) after each V1 rejection_sample


class ByIdentity:
    """A value per live object, keyed by the object's identity (VllmConfig is an unhashable dataclass) and
    held beside a weak reference to it: the entry goes when the object is collected, and the cache keeps
    nothing alive. An object that takes no weak reference is not cached (its value is computed each time)."""

    def __init__(self):
        self._entries: dict = {}  # id(obj) -> (weakref.ref(obj), value)

    def get(self, obj, compute):
        key = id(obj)
        entry = self._entries.get(key)
        if entry is not None and entry[0]() is obj:
            return entry[1]
        value = compute(obj)
        entries = self._entries

        def forget(ref, key=key):
            if entries.get(key, (None,))[0] is ref:
                del entries[key]

        try:
            entries[key] = (weakref.ref(obj, forget), value)
        except TypeError:  # not weak-referenceable (a test's SimpleNamespace): computed, not cached
            pass
        return value

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()


_engine_rules = ByIdentity()  # VllmConfig -> its engine rule (RuleSetting)
_requested = ByIdentity()  # VllmConfig -> whether it asks for specdiff
_rules: dict = {}  # RuleSetting -> its acceptance rule
_lenient_generators: dict = {}  # str(device) -> torch.Generator


def requested(vllm_config) -> bool:
    """Whether an engine asks for specdiff: additional_config["specdiff"] (even {}) or specdiff's proposer."""
    additional = getattr(vllm_config, "additional_config", None)
    if isinstance(additional, dict) and additional.get(KEY) is not None:
        return True
    spec = getattr(vllm_config, "speculative_config", None)
    return spec is not None and getattr(spec, "method", None) == "custom_class" and \
        str(getattr(spec, "model", "")).startswith(PROPOSER)


def is_specdiff(vllm_config) -> bool:
    """`requested`, cached per engine config."""
    return _requested.get(vllm_config, requested)


def engine_default(vllm_config) -> RuleSetting:
    """The engine's rule (additional_config["specdiff"]), cached per engine config."""
    return _engine_rules.get(vllm_config, lambda config: engine_rule(getattr(config, "additional_config", None)))


def verification_method(vllm_config) -> str:
    """vLLM's rejection_sample_method of this engine: "block" or "token"."""
    spec = getattr(vllm_config, "speculative_config", None)
    return "block" if spec is not None and spec.rejection_sample_method == "block" else "token"


def probabilistic(vllm_config) -> bool:
    """Whether the drafter records its draft distribution q (draft_model / EAGLE's probabilistic sampling)."""
    spec = getattr(vllm_config, "speculative_config", None)
    return spec is not None and getattr(spec, "draft_sample_method", None) == "probabilistic"


def rule(setting: RuleSetting):
    """The acceptance rule of a (non-Lossless) setting, built once."""
    if setting not in _rules:
        _rules[setting] = setting.acceptance_rule()
    return _rules[setting]


def rules_of(vllm_config, extra_args_of_rows) -> tuple[list, str]:
    """The acceptance rule of each row ([b]; None: Lossless) and the verification method of this engine."""
    default = engine_default(vllm_config)
    rules = []
    for extra_args in extra_args_of_rows:
        setting = request_rule(extra_args, default) if extra_args else default
        rules.append(None if setting.lossless else rule(setting))
    return rules, verification_method(vllm_config)


def lenient_generator(device) -> torch.Generator:
    """The generator of the lenient rows that have no seed of their own, one per device, seeded once from
    torch's initial seed (vLLM's engine seed): specdiff's draws never move torch's global generator, so
    that vLLM's own draws for other requests are where they would be without lenient requests."""
    key = str(torch.device(device))
    if key not in _lenient_generators:
        _lenient_generators[key] = torch.Generator(key).manual_seed((torch.initial_seed() + 0x5EED) % 2 ** 63)
    return _lenient_generators[key]


def observe(draft_token_ids, num_draft_tokens, output) -> None:
    for observer in list(OBSERVERS):
        observer(draft_token_ids, num_draft_tokens, output)
