"""What one bench run measures, in one place: `Settings`, filled from a preset file and then from the flags.

Terms:
- a field: one setting; its metadata holds its help and whether it is a command-line flag (`flag`); the rest
  are set with `--set KEY=VALUE` (VALUE a TOML value: `blocks=[4,8]`, `hf_assistant="none"`; a bare
  comma-separated list also works: `blocks=4,8`);
- a preset: a TOML file of field values (`presets/testbed.toml`, `presets/real.toml`, or any path); the
  default preset is `real` for a real verifier and `testbed` otherwise. Precedence, lowest first: the
  dataclass defaults, the preset, the flags and `--set`;
- a kind's grid (`grid`): the run's grid (blocks, steps, thresholds, caches, ngrams), then the kind's own
  (its table in `kinds.toml`, `kind_settings`) for the keys the user did not set, then the preset's
  `[kinds.NAME]` table.
"""
from __future__ import annotations

import tomllib
from dataclasses import MISSING, dataclass, field, fields, replace
from functools import lru_cache
from pathlib import Path

PRESETS = Path(__file__).resolve().parent / "presets"
ARITH_PROBLEMS = 500  # the arith suite's measured problems when `problems` is None
ARITH_TUNE_PROBLEMS = 20  # ... and its validation problems when `tune_problems` is None
KINDS = Path(__file__).resolve().parent / "kinds.toml"  # what the bench does with each drafter kind
KIND_KEYS = ("controllers", "leniency", "leniency_proposal")  # the rest of a kind's table is its grid
GRID_KEYS = ("blocks", "steps", "thresholds", "caches", "ngrams")


def _f(default, help: str, flag: bool = False, metavar: str | None = None):
    meta = {"help": help, "flag": flag, "metavar": metavar}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class Settings:
    verifier: str = _f("verifier", "the testbed's verifier, or a real one: a fetched name (specdiff models list) or "
                       "a local checkpoint folder; it picks the default preset", flag=True, metavar="NAME|PATH")
    drafters: list | None = _f(None, "drafters measured besides the preset's always_drafters: kinds, zoo names, "
                               "distilled drafters or checkpoint folders (comma-separated or repeated)", flag=True,
                               metavar="KIND[,KIND...]")
    prompts_file: str | None = _f(None, "JSONL prompts measured ({\"messages\"} or {\"prompt\"} per line; a \"kind\" "
                                  "key grouped in the report); never tuned on. On every preset, the testbed's included, "
                                  "it is measured as the prompts suite and tuned on validation_file (default the shipped "
                                  "real_validation.jsonl; spec_validation.jsonl for Spec-Bench's file), named in the "
                                  "report's tuned_on. Default: the preset's suite (testbed: arith test problems; real: "
                                  "the shipped real_test.jsonl)", flag=True, metavar="FILE")
    problems: int | None = _f(None, f"prompts measured from --first-problem on (None: a prompts file in full; the arith "
                              f"suite {ARITH_PROBLEMS})", flag=True, metavar="N")
    first_problem: int = _f(0, "measure prompts [first, first + problems): re-measure on other prompts", flag=True,
                            metavar="I")
    repeats: int = _f(3, "interleaved timed repeats of every row on each prompt (median per prompt)", flag=True,
                      metavar="N")
    max_new_tokens: int = _f(96, "max new tokens per measured prompt", flag=True, metavar="N")
    seed: int = _f(0, "the seed of every row's draws", flag=True, metavar="S")
    threads: int = _f(1, "torch threads", flag=True, metavar="N")
    sampling: dict = _f({}, "the verifier's sampling, KEY=VALUE pairs of temperature, top_p, top_k ({}: the "
                        "verifier's own; temperature 0: greedy)", flag=True, metavar="temperature=T[,top_p=P,...]")
    dtype: str | None = _f(None, "the real models' dtype, float32 or bfloat16 (None: bfloat16 where the hardware "
                           "computes it natively, else float32; the testbed's models always run in float32)",
                           flag=True, metavar="float32|bfloat16")
    suite: str = _f("arith", "what is measured and tuned on: arith (the testbed's problems) or prompts (files)")
    always_drafters: list = _f([], "drafters always measured; the first is the testbed report's `spec` row")
    tune_problems: int | None = _f(None, f"validation prompts for tuning (None: a prompts suite's all; the arith suite "
                                   f"{ARITH_TUNE_PROBLEMS})")
    validation_file: str | None = _f(None, "a prompts suite's validation prompts, tuned on (None: the shipped "
                                     "real_validation.jsonl; spec_validation.jsonl covers Spec-Bench's six kinds)")
    tune_max_new_tokens: int | None = _f(None, "max new tokens per validation prompt while tuning (None: "
                                         "max_new_tokens)")
    tune_repeats: int = _f(1, "interleaved repeats of each validation prompt while tuning")
    blocks: list = _f([8], "B grid of every drafter")
    steps: list = _f([1], "K grid of drafters whose effort is K")
    thresholds: list = _f([], "confidence threshold tau grid of drafters that take one")
    caches: list = _f(["off"], "prefix caches tried for drafters that have one: off, round, persistent")
    ngrams: list = _f([3], "prompt lookup: longest n-gram grid")
    hf_lookup_tokens: list = _f([], "HF prompt lookup's prompt_lookup_num_tokens grid ([]: no hf_lookup row)")
    hf_assistant: str | None = _f(None, "transformers' assisted generation's drafter (None: the verifier's AR "
                                  "drafter where one fits; \"none\": no hf_assisted row)")
    controllers: list | None = _f(None, "run-time controllers tried on each drafter's tuned configuration (None: "
                                  "each kind's own; []: no adaptive rows)")
    kind_controllers: list | None = _f(None, "the same for every drafter after the first (None: controllers)")
    controlled_kinds: str = _f("", "an effort knob a drafter needs for adaptive rows (\"steps\"; \"\": any)")
    adaptive_steps: list = _f([], "with a controller: the most steps K ([]: the tuned K)")
    adaptive_blocks: list = _f([], "with a controller: the longest draft B ([]: the tuned B and the largest of "
                               "blocks)")
    adaptive_cache: str = _f("", "with a controller: the prefix cache (\"\": the tuned one)")
    batch_sizes: list = _f([], "the first drafter's (or batch_drafters') tuned configuration again at these batch "
                           "sizes (spec_<kind>_batch<N>), beside plain decoding at each (ar_batch<N>)")
    batch_drafters: list = _f([], "the drafter kinds that get the batch_sizes rows ([]: the first drafter)")
    trees: list = _f([], "draft-tree node budgets tried on validation on every drafter's tuned configuration, B "
                     "deep; the fastest is measured (spec_<kind>_tree<N>, batch 1, lossless)")
    tree_drafters: list = _f([], "the drafter kinds that get the tree rows ([]: every drafter)")
    tradeoff_steps: list = _f([], "effort rows spec_<kind> K=k at each K (drafters whose effort is K)")
    leniency: list = _f([], "leniency rows RULE:VALUE (linear, typical, tv, cactus) at each K of leniency_steps, "
                         "at the B of that K's lossless row")
    leniency_steps: list = _f([1], "the K of the leniency rows: 1 is K = 1, where q is the drafter's exact marginal; "
                              "at K > 1 (the effort row's B and cache) q is the marginal of the step that unmasked "
                              "each token, an approximation")
    compile: bool = _f(False, "also measure compiled rows (ar_compiled, spec_<kind>_compiled, the batch rows "
                       "compiled: `bench.compiled`); `--set compile=true` (bench speedup keeps to 16 options)")
    llama_cpp: list = _f([], "llama.cpp's plain decoding of the verifier's GGUF as rows llama_cpp_<quant>: \"gguf\" (the "
                         "file as shipped) and quants made from it (\"q8_0\", \"q4_0\", ...; `bench.llama_cpp`); needs "
                         "pip install \"specdiff[llama]\", else the rows are skipped, saying why ([]: none)")
    verify_ks: list = _f([], "after the rows: verify(k) at each k, eager (and compiled with compile), and plain "
                         "decoding's fraction of the weight-streaming floor (the report's `steps`: `bench.steps`; "
                         "[]: none)")
    kinds: dict = _f({}, "per-kind grid tables ({NAME = {blocks = [...], ...}})")
    user_set: tuple = field(default=(), metadata={"help": "", "flag": False, "internal": True})

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self) if not f.metadata.get("internal")}


def settings_fields(flag: bool | None = None) -> list:
    """The fields a user can set (flags only, set-only, or all)."""
    return [f for f in fields(Settings) if not f.metadata.get("internal")
            and (flag is None or bool(f.metadata["flag"]) == flag)]


def read_preset(name_or_path: str) -> dict:
    """A preset's field values: a shipped preset's name or a TOML file's path."""
    path = PRESETS / f"{name_or_path}.toml"
    path = path if path.is_file() else Path(name_or_path)
    if not path.is_file():
        shipped = ", ".join(sorted(p.stem for p in PRESETS.glob("*.toml")))
        raise ValueError(f"--preset {name_or_path!r}: not a shipped preset ({shipped}) nor a TOML file")
    values = tomllib.loads(path.read_text())
    _check_keys(values, f"preset {path}")
    return values


def build(preset: str, given: dict) -> Settings:
    """The dataclass defaults, then the preset, then `given` (the user's flags and --set values)."""
    _check_keys(given, "--set")
    base = read_preset(preset)
    values = {**base, **given}
    if "sampling" in given:  # a sampling flag adds to the preset's sampling
        values["sampling"] = {**base.get("sampling", {}), **given["sampling"]}
    if "kinds" in given:  # a kind's table adds to the preset's table of that kind
        values["kinds"] = {name: {**base.get("kinds", {}).get(name, {}), **given["kinds"].get(name, {})}
                           for name in {**base.get("kinds", {}), **given["kinds"]}}
    settings = replace(Settings(), **values, user_set=tuple(given))
    _check(settings)
    return settings


@lru_cache(maxsize=1)
def kind_table() -> dict:
    """`kinds.toml`: {kind name: its bench settings} (that file's header says what each key means)."""
    return tomllib.loads(KINDS.read_text())


def kind_settings(name: str) -> dict:
    """A kind's bench settings (`kind_table`); {} for a kind without a table."""
    return kind_table().get(name, {})


def leniency_kinds() -> list[str]:
    """The kinds `specdiff bench leniency --drafter` takes (`leniency = true` in `kinds.toml`), the default first."""
    return [name for name, table in kind_table().items() if table.get("leniency")]


def grid(settings: Settings, spec) -> dict:
    """A kind's tuning grid (module docstring)."""
    out = {key: list(getattr(settings, key)) for key in GRID_KEYS}
    out.update({key: list(value) for key, value in kind_settings(spec.name).items()
                if key not in KIND_KEYS and key not in settings.user_set})
    out.update(settings.kinds.get(spec.name, {}))
    return out


def parse_value(text: str):
    """A --set VALUE: a TOML value, else a comma-separated list of TOML values or bare strings, else a string."""
    for candidate in (text, f"[{text}]"):
        try:
            return tomllib.loads(f"v = {candidate}")["v"]
        except tomllib.TOMLDecodeError:
            pass
    parts = [part.strip() for part in text.split(",")]
    return parts if len(parts) > 1 else text


def defaults_text(name: str) -> str:
    """A field's default as its help shows it: one value, or one per shipped preset where they differ."""
    base = Settings().as_dict()[name]
    per = {p.stem: tomllib.loads(p.read_text()).get(name, base) for p in sorted(PRESETS.glob("*.toml"))}
    if len({repr(value) for value in per.values()}) == 1:
        return f"default {_show(base if not per else next(iter(per.values())))}"
    return "default " + "; ".join(f"{preset} {_show(value)}" for preset, value in per.items())


def _show(value) -> str:
    if value is None:
        return "none"
    if isinstance(value, list):
        return " ".join(map(str, value)) or "[]"
    if isinstance(value, dict):
        return ",".join(f"{k}={v}" for k, v in value.items()) or "{}"
    return str(value)


def _check_keys(values: dict, where: str) -> None:
    known = {f.name for f in settings_fields()}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"{where}: unknown setting(s) {', '.join(unknown)}; settings are {', '.join(sorted(known))}")


def _check(settings: Settings) -> None:
    from specdiff.engine.controllers import parse_controller

    sampling = settings.sampling
    unknown = sorted(set(sampling) - {"temperature", "top_p", "top_k"})
    if unknown:
        raise ValueError(f"--sampling: unknown key(s) {', '.join(unknown)} (temperature, top_p, top_k)")
    if sampling.get("temperature") is not None and not sampling["temperature"] >= 0:
        raise ValueError(f"--temperature must be >= 0, got {sampling['temperature']}")
    if set(sampling) - {"temperature"} and not sampling.get("temperature"):
        raise ValueError("--top-p and --top-k apply to a sampled run: give --temperature T > 0 (default greedy)")
    if sampling.get("top_p") is not None and not 0 < sampling["top_p"] <= 1:
        raise ValueError(f"--top-p must be in (0, 1], got {sampling['top_p']}")
    for name in ("controllers", "kind_controllers"):
        for controller in getattr(settings, name) or []:
            try:
                if parse_controller(controller) is None:
                    raise ValueError("the adaptive grid needs controllers, not 'none' (an empty list: no adaptive rows)")
            except ValueError as error:
                raise ValueError(f"--controllers: {error}") from None
    for entry in settings.leniency:
        rule, _, value = str(entry).partition(":")
        try:
            float(value)
        except ValueError:
            value = ""
        if rule not in ("linear", "typical", "tv", "cactus") or not value:
            raise ValueError(f"--leniency: expected RULE:VALUE with RULE linear, typical, tv or cactus, got {entry!r}")
    if not settings.leniency_steps or any(not isinstance(k, int) or k < 1 for k in settings.leniency_steps):
        raise ValueError(f"leniency_steps: expected a list of K >= 1, got {settings.leniency_steps!r}")
    from specdiff.bench.llama_cpp import QUANTS, SHIPPED

    for entry in settings.llama_cpp:
        if entry != SHIPPED and entry not in QUANTS:
            raise ValueError(f"llama_cpp: expected entries \"{SHIPPED}\" (the GGUF as shipped) or a quant "
                             f"({', '.join(QUANTS)}), got {entry!r}")
    if any(not isinstance(k, int) or isinstance(k, bool) or k < 1 for k in settings.verify_ks):
        raise ValueError(f"verify_ks: expected a list of k >= 1, got {settings.verify_ks!r}")
    if settings.dtype not in (None, "float32", "bfloat16"):
        raise ValueError(f"--dtype: expected float32 or bfloat16, got {settings.dtype!r}")
    for name in ("problems", "tune_problems", "repeats", "max_new_tokens", "threads", "tune_repeats"):
        value = getattr(settings, name)
        if value is not None and not (isinstance(value, int) and value >= 1):
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
