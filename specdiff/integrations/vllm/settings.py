"""The plugin's settings: `additional_config={"specdiff": {...}}` and a request's override.

Engine-wide, in `LLM(..., additional_config={"specdiff": {...}})` or `vllm serve --additional-config`:

    {"rule": "linear", "leniency": 0.2}          # the leniency rule of every request
    {"drafter": "/path/to/masked-drafter", "steps": 4}    # DiffusionProposer's checkpoint and effort K
    {"drafter": "/path/to/block-drafter", "threshold": 0.9, "order": "confidence"}   # or tau

Per request, in `SamplingParams(extra_args=...)`, either nested or flat (the OpenAI API's
`extra_body={"vllm_xargs": {...}}` takes flat string or number values only):

    {"specdiff": {"rule": "tv", "leniency": 0.1}}
    {"specdiff_rule": "cactus", "specdiff_leniency": 0.05}

Terms: `rule` is one of RULES (lossless, linear, tv, cactus; "tvbudget" is read as "tv") and
`leniency` its lam (linear, in [0, 1]), eps (tv, >= 0) or delta (cactus, >= 0). A request that
names no rule takes the engine's; one that names only a leniency keeps the engine's rule. The
verification method is vLLM's own `speculative_config.rejection_sample_method` ("block" is
Sun et al.'s block verification on the relaxed target; anything else is token verification).
"""
from __future__ import annotations

from dataclasses import dataclass

from specdiff.runs.config import RULES, make_rule

KEY = "specdiff"  # the key of additional_config and of a request's extra_args
RULE_ALIASES = {"tvbudget": "tv", "tv_budget": "tv"}
RULE_KEYS = ("rule", "leniency")
PROPOSER_KEYS = ("drafter", "steps", "threshold", "order", "temperature", "top_p", "top_k", "device", "seed")
ENGINE_KEYS = RULE_KEYS + PROPOSER_KEYS


class SpecdiffConfigError(ValueError):
    """A bad `specdiff` entry in additional_config or in a request's extra_args."""


@dataclass(frozen=True)
class RuleSetting:
    """A leniency rule by name: `rule` in RULES, `leniency` its lam, eps or delta."""

    rule: str = "lossless"
    leniency: float = 0.0

    @property
    def lossless(self) -> bool:
        return self.rule == "lossless" or self.acceptance_rule().lossless

    def acceptance_rule(self):
        """The `specdiff.acceptance` rule (Lossless, Linear, TVBudget or Cactus)."""
        return make_rule(self.rule, self.leniency)


def engine_settings(additional_config) -> dict:
    """The checked `specdiff` entry of vLLM's additional_config (a dict, possibly empty).

    Raises SpecdiffConfigError naming the bad key or value: an unknown key, an unknown rule, a
    leniency that is not a number or lies outside its rule's range, a bad effort."""
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


def engine_rule(additional_config) -> RuleSetting:
    """The engine-wide rule of additional_config (Lossless where none is named)."""
    return rule_setting(engine_settings(additional_config), where=f"additional_config[{KEY!r}]")


def request_rule(extra_args, default: RuleSetting) -> RuleSetting:
    """The rule of one request: its extra_args override (nested or flat keys) over `default`."""
    override = request_override(extra_args)
    if not override:
        return default
    merged = {"rule": override.get("rule", default.rule)}
    if "leniency" in override:
        merged["leniency"] = override["leniency"]
    elif "rule" not in override:
        merged["leniency"] = default.leniency
    return rule_setting(merged, where=f"extra_args[{KEY!r}]")


def request_override(extra_args) -> dict:
    """The `rule` / `leniency` a request's extra_args set, checked (empty where none)."""
    if not extra_args:
        return {}
    override = {}
    nested = extra_args.get(KEY)
    if nested is not None:
        if not isinstance(nested, dict):
            raise SpecdiffConfigError(f"extra_args[{KEY!r}] must be a dict, got {nested!r}")
        unknown = sorted(set(nested) - set(RULE_KEYS))
        if unknown:
            raise SpecdiffConfigError(f"extra_args[{KEY!r}]: unknown key(s) {', '.join(unknown)}; expected rule, leniency")
        override.update(nested)
    for key in RULE_KEYS:
        if f"{KEY}_{key}" in extra_args:
            override[key] = extra_args[f"{KEY}_{key}"]
    if override:
        rule_setting({"rule": override.get("rule", "linear"), **override}, where=f"extra_args[{KEY!r}]")
    return override


def rule_setting(settings: dict, where: str) -> RuleSetting:
    """RuleSetting from a dict with `rule` and `leniency`; a clear error for a bad one."""
    name = settings.get("rule", "lossless")
    if not isinstance(name, str):
        raise SpecdiffConfigError(f"{where}: rule must be a string, one of {', '.join(RULES)}; got {name!r}")
    name = RULE_ALIASES.get(name.lower(), name.lower())
    if name not in RULES:
        raise SpecdiffConfigError(f"{where}: unknown rule {settings.get('rule')!r}; expected one of {', '.join(RULES)}")
    leniency = settings.get("leniency", 0.0)
    if isinstance(leniency, str):
        try:
            leniency = float(leniency)
        except ValueError:
            raise SpecdiffConfigError(f"{where}: leniency must be a number, got {leniency!r}") from None
    try:
        setting = RuleSetting(name, leniency)
        rule = setting.acceptance_rule()  # range checks of specdiff.acceptance
    except (ValueError, TypeError) as error:
        raise SpecdiffConfigError(f"{where}: {error}") from None
    value = {"linear": "lam", "tv": "eps", "cactus": "delta"}.get(name)
    return RuleSetting(name, float(getattr(rule, value)) if value else 0.0)


def _check_effort(settings: dict) -> None:
    steps, threshold = settings.get("steps"), settings.get("threshold")
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
        raise SpecdiffConfigError(f"additional_config[{KEY!r}]: steps (K) must be an integer >= 1, got {steps!r}")
    if threshold is not None and (not isinstance(threshold, (int, float)) or not 0 < threshold <= 1):
        raise SpecdiffConfigError(f"additional_config[{KEY!r}]: threshold (tau) must be in (0, 1], got {threshold!r}")
    if steps is not None and threshold is not None:
        raise SpecdiffConfigError(f"additional_config[{KEY!r}]: give steps (K) or threshold (tau), not both")
