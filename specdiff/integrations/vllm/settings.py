"""The plugin's settings: `additional_config={"specdiff": {...}}` and a request's override.

Engine-wide, in `LLM(..., additional_config={"specdiff": {...}})` or `vllm serve --additional-config`:

    {"rule": "linear", "leniency": 0.2}          # the leniency rule of every request
    {"rule": "typical", "leniency": 0.09, "typical_delta": 0.3, "gate_top": 0.8}   # Typical, gated
    {"drafter": "/path/to/masked-drafter", "steps": 4}    # DiffusionProposer's checkpoint and effort K
    {"drafter": "/path/to/block-drafter", "threshold": 0.9, "order": "confidence"}   # or tau
    {}                                            # specdiff on, every request Lossless unless it asks

Per request, in `SamplingParams(extra_args=...)`, either nested or flat (the OpenAI API's
`extra_body={"vllm_xargs": {...}}` takes flat string or number values only):

    {"specdiff": {"rule": "tv", "leniency": 0.1}}
    {"specdiff_rule": "cactus", "specdiff_leniency": 0.05}

Terms (those of `specdiff.runs.config.make_rule` and the command line's flags):

    rule           one of RULES: lossless, linear, tv ("tvbudget" is read as "tv"), cactus, typical
    leniency       lam (linear, in [0, 1]), eps (tv, >= 0), delta (cactus, >= 0) or epsilon (typical, >= 0)
    typical_delta  Typical's delta (>= 0; typical only); None: sqrt(epsilon)
    gate_top       Gated: the rule only where the target's top-1 mass <= gate_top (in [0, 1])
    gate_entropy   Gated: ... or where its entropy >= gate_entropy (nats, >= 0)
    support        "truncated" only: vLLM hands the plugin the target after top-p / top-k, so
                   support="untruncated" is refused (SpecdiffConfigError) rather than run on the
                   wrong target

A request that names a rule takes every rule term from itself (the defaults above where it gives
none); one that names no rule keeps the engine's rule and the engine's terms it does not override.
The verification method is vLLM's own `speculative_config.rejection_sample_method` ("block" is
Sun et al.'s block verification on the relaxed target; anything else is token verification).
`check_method` refuses, at engine start and per request, the rules whose block verification against
a recorded draft distribution `specdiff.verify` does not define (Typical, and gated Cactus or
Typical, with draft_sample_method="probabilistic").
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from specdiff.runs.config import RULES, SUPPORTS, make_rule

KEY = "specdiff"  # the key of additional_config and of a request's extra_args
RULE_ALIASES = {"tvbudget": "tv", "tv_budget": "tv"}
RULE_KEYS = ("rule", "leniency", "typical_delta", "gate_top", "gate_entropy", "support")
PROPOSER_KEYS = ("drafter", "steps", "threshold", "order", "temperature", "top_p", "top_k", "device", "seed",
                 "verifier")
ENGINE_KEYS = RULE_KEYS + PROPOSER_KEYS
SUPPORTED = ("truncated",)  # the supports the plugin can verify against (vLLM hands it the truncated target)
LENIENCY = {"linear": "lam", "tv": "eps", "cactus": "delta", "typical": "epsilon"}


class SpecdiffConfigError(ValueError):
    """A bad `specdiff` entry in additional_config or in a request's extra_args."""


@dataclass(frozen=True)
class RuleSetting:
    """A leniency rule by its terms (those of `make_rule`): `rule` in RULES, `leniency` its lam, eps,
    delta or epsilon, Typical's delta, the gates and the support."""

    rule: str = "lossless"
    leniency: float = 0.0
    typical_delta: float | None = None
    gate_top: float | None = None
    gate_entropy: float | None = None
    support: str = "truncated"

    @property
    def lossless(self) -> bool:
        return self.acceptance_rule().lossless

    def acceptance_rule(self):
        """The `specdiff.acceptance` rule: Lossless, Linear, TVBudget, Cactus or Typical, in Gated where gated."""
        return make_rule(self.rule, self.leniency, self.typical_delta, self.gate_top, self.gate_entropy, self.support)


def engine_settings(additional_config) -> dict:
    """The checked `specdiff` entry of vLLM's additional_config (a dict, possibly empty).

    Raises SpecdiffConfigError naming the bad key or value: an unknown key, an unknown rule, a
    leniency that is not a number or lies outside its rule's range, a refused support, a bad effort."""
    settings = (additional_config or {}).get(KEY, {}) if isinstance(additional_config, dict) else {}
    if settings is None:
        return {}
    if not isinstance(settings, dict):
        raise SpecdiffConfigError(f"additional_config[{KEY!r}] must be a dict, got {settings!r}")
    unknown = sorted(set(settings) - set(ENGINE_KEYS))
    if unknown:
        raise SpecdiffConfigError(f"additional_config[{KEY!r}]: unknown key(s) {', '.join(unknown)}; "
                                  f"expected {', '.join(ENGINE_KEYS)}")
    rule_setting(settings, where=f"additional_config[{KEY!r}]")
    _check_effort(settings)
    return dict(settings)


def specdiff_requested(additional_config) -> bool:
    """Whether an engine asks for specdiff: additional_config holds a `specdiff` entry (even {})."""
    return isinstance(additional_config, dict) and additional_config.get(KEY) is not None


def engine_rule(additional_config) -> RuleSetting:
    """The engine-wide rule of additional_config (Lossless where none is named)."""
    return rule_setting(engine_settings(additional_config), where=f"additional_config[{KEY!r}]")


def request_rule(extra_args, default: RuleSetting) -> RuleSetting:
    """The rule of one request: its extra_args override (nested or flat keys) over `default`."""
    override = request_override(extra_args)
    if not override:
        return default
    if "rule" in override:
        merged = dict(override)
    else:  # the engine's rule, with the terms the request gives
        merged = {key: getattr(default, key) for key in RULE_KEYS}
        merged.update(override)
    return rule_setting(merged, where=f"extra_args[{KEY!r}]")


def request_override(extra_args) -> dict:
    """The rule terms a request's extra_args set, checked (empty where none)."""
    if not extra_args:
        return {}
    override = {}
    nested = extra_args.get(KEY)
    if nested is not None:
        if not isinstance(nested, dict):
            raise SpecdiffConfigError(f"extra_args[{KEY!r}] must be a dict, got {nested!r}")
        unknown = sorted(set(nested) - set(RULE_KEYS))
        if unknown:
            raise SpecdiffConfigError(f"extra_args[{KEY!r}]: unknown key(s) {', '.join(unknown)}; "
                                      f"expected {', '.join(RULE_KEYS)}")
        override.update(nested)
    for key in RULE_KEYS:
        if f"{KEY}_{key}" in extra_args:
            override[key] = extra_args[f"{KEY}_{key}"]
    unknown = sorted(k for k in extra_args if isinstance(k, str) and k.startswith(f"{KEY}_")
                     and k[len(KEY) + 1:] not in RULE_KEYS)
    if unknown:
        raise SpecdiffConfigError(f"extra_args: unknown key(s) {', '.join(unknown)}; expected "
                                  f"{', '.join(f'{KEY}_{k}' for k in RULE_KEYS)}")
    if override:
        rule_setting({"rule": override.get("rule", "linear"), **override}, where=f"extra_args[{KEY!r}]")
    return override


def rule_setting(settings: dict, where: str) -> RuleSetting:
    """RuleSetting from a dict of rule terms (RULE_KEYS); a SpecdiffConfigError naming a bad one."""
    name = settings.get("rule", "lossless")
    if not isinstance(name, str):
        raise SpecdiffConfigError(f"{where}: rule must be a string, one of {', '.join(RULES)}; got {name!r}")
    name = RULE_ALIASES.get(name.lower(), name.lower())
    if name not in RULES:
        raise SpecdiffConfigError(f"{where}: unknown rule {settings.get('rule')!r}; expected one of {', '.join(RULES)}")
    leniency = _number(settings.get("leniency", 0.0), "leniency", where)
    typical_delta = _number(settings.get("typical_delta"), "typical_delta", where, optional=True)
    gate_top = _number(settings.get("gate_top"), "gate_top", where, optional=True)
    gate_entropy = _number(settings.get("gate_entropy"), "gate_entropy", where, optional=True)
    support = settings.get("support") or "truncated"
    if support not in SUPPORTS:
        raise SpecdiffConfigError(f"{where}: support must be one of {', '.join(SUPPORTS)}, got {support!r}")
    if support not in SUPPORTED:
        raise SpecdiffConfigError(
            f"{where}: support={support!r} is not available in vLLM: vLLM hands the plugin the target after "
            f"top-p / top-k only, so drafts can be measured against the truncated target alone; supported: "
            f"{', '.join(repr(s) for s in SUPPORTED)}")
    if typical_delta is not None and name != "typical":
        raise SpecdiffConfigError(f"{where}: typical_delta is Typical's delta (rule 'typical' only), "
                                  f"given with rule {name!r}")
    try:
        rule = make_rule(name, leniency, typical_delta, gate_top, gate_entropy, support)  # specdiff.acceptance's checks
    except (ValueError, TypeError) as error:
        raise SpecdiffConfigError(f"{where}: {error}") from None
    inner = getattr(rule, "rule", rule)  # Gated's inner rule
    value = LENIENCY.get(name)
    return RuleSetting(name, float(getattr(inner, value)) if value else 0.0,
                       float(inner.delta) if name == "typical" else None,
                       getattr(rule, "max_top", None), getattr(rule, "min_entropy", None), support)


def check_method(setting: RuleSetting, method: str, probabilistic: bool, where: str) -> None:
    """Refuse a rule vLLM's verification method cannot run: block verification (method "block") with a
    recorded draft distribution (probabilistic drafting) is defined by `specdiff.verify` only for rules
    whose relaxed target does not depend on the drafted token, and for Cactus (its emitted law)."""
    from specdiff.acceptance import Cactus, drafted_token_dependent

    if method != "block" or not probabilistic:
        return
    rule = setting.acceptance_rule()
    if drafted_token_dependent(rule) and not isinstance(rule, Cactus):
        raise SpecdiffConfigError(
            f"{where}: {rule!r} with rejection_sample_method='block' and draft_sample_method='probabilistic' "
            f"is not defined (its relaxed target depends on the drafted token); use token verification, greedy "
            f"drafting, or one of lossless, linear, tv, cactus (ungated)")


def _number(value, name: str, where: str, optional: bool = False):
    """A rule term as a float (numbers, or strings from vllm_xargs); None stays None where optional."""
    if value is None and optional:
        return None
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise SpecdiffConfigError(f"{where}: {name} must be a number, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise SpecdiffConfigError(f"{where}: {name} must be a real number, got {value!r}")
    return float(value)


def _check_effort(settings: dict) -> None:
    steps, threshold = settings.get("steps"), settings.get("threshold")
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
        raise SpecdiffConfigError(f"additional_config[{KEY!r}]: steps (K) must be an integer >= 1, got {steps!r}")
    if threshold is not None and (not isinstance(threshold, (int, float)) or not 0 < threshold <= 1):
        raise SpecdiffConfigError(f"additional_config[{KEY!r}]: threshold (tau) must be in (0, 1], got {threshold!r}")
    if steps is not None and threshold is not None:
        raise SpecdiffConfigError(f"additional_config[{KEY!r}]: give steps (K) or threshold (tau), not both")
