"""Drafter kinds, each one class registered once (issue 39).

A kind is a `KindSpec` subclass, defined and registered (`register`) by the module that defines its drafter,
as HF's `candidate_generator.py` has one subclass per candidate generator. Everything that differs between
kinds lives on the spec; code outside the kind modules asks the spec and never compares a kind's name.

Terms:
- name: the kind's one name ("masked", "block", "uniform", "dflash", "ar", "lookup"); `aliases` are accepted
  on input ("autoregressive" for "ar");
- recognise(config): whether a checkpoint's config.json (a dict) is this kind; kinds are tried in `priority`
  order, lowest first, so the specific ones (block, uniform, dflash) win over the general (masked, ar);
- zoo_model: the testbed zoo's model of the kind ("masked-drafter"; None: none); distilled_role: the
  `specdiff_role` of a drafter of this kind distilled for a real verifier (`specdiff.zoo.distilled`);
- option_keys: the keyword arguments its drafter takes besides the sampling ones (`SAMPLING_KEYS`);
- effort: the effort knobs it reads from a run configuration ("steps", "threshold"; none: one step per round);
- needs_model: False for drafters built without a checkpoint (prompt lookup);
- build(model, config, defaults, tokenizer, target, **options): the drafter around a loaded model;
  parts(verifier_name, options): the drafters a composed kind is built from (the hybrid proposer);
- run_options(run): the drafter keyword arguments of a `RunConfig` (duck-typed: steps, threshold, ...);
- marginal_exact(effort): whether its q is the exact marginal at that effort, so that marginal-mode
  verification is lossless (otherwise it is verified as a point mass);
- effort_grid(steps, thresholds): the efforts a tuner tries (each a dict of RunConfig fields);
  bench_candidates(block, grid): the tuning candidates at one B (row name, RunConfig fields);
  trained_block(config): the longest B a drafter was trained for (None: any);
- build_distilled(model, verifier, draft_to_target), distilled_model(model_config, weights, target,
  draft_to_target), finish_distilled(model): a drafter of the kind distilled for a real verifier
  (`specdiff.zoo.distilled`), for the kinds with a `distilled_role`.
A spec describes the kind only. What a demo or a bench does with it (its demo rows, its bench grid and
controllers, whether the leniency bench takes it) lives with them: `specdiff/runs/demo.toml` and
`specdiff/bench/kinds.toml` (issue 52).
"""
from __future__ import annotations

SAMPLING_KEYS = ("temperature", "top_p", "top_k")

_KINDS: dict[str, "KindSpec"] = {}


class KindSpec:
    """One drafter kind (module docstring). Subclasses set the attributes and override what differs."""

    name: str = ""
    aliases: tuple[str, ...] = ()
    describes: str = ""  # what is recognised as this kind, for error messages
    zoo_model: str | None = None
    distilled_role: str | None = None
    option_keys: tuple[str, ...] = ()
    effort: tuple[str, ...] = ()
    priority: int = 50  # recognition order, lowest first
    rank: int = 50  # listing order (help texts, error messages)
    distilled_rank: int = 50  # order among the kinds distilled for a real verifier (the default drafter first)
    needs_model: bool = True
    needs_target: bool = False  # built beside its verifier's model (DFlash)
    can_verify: bool = False  # a causal LM: the only kind that can also be a verifier
    serves_standalone: bool = False  # drafts from token ids alone (no verifier states): vLLM's DiffusionProposer runs it
    ignores_effort: bool = False  # takes any steps/threshold silently (one shared sweep grid), e.g. ar, lookup
    label: str = ""  # its row name in tables ("AR drafter"); default: its name

    def recognise(self, config: dict) -> bool:
        return False

    def loader(self, config: dict, transformers):
        """The transformers class that loads a checkpoint of this kind."""
        return transformers.AutoModelForCausalLM

    def remote_code(self, config: dict) -> bool:
        """Whether the checkpoint ships its own modeling code (trust_remote_code)."""
        return False

    def build(self, model, config: dict, defaults: dict, tokenizer, target=None, **options):
        raise NotImplementedError

    def check_verifier(self, verifier: str) -> None:
        """ValueError when this kind cannot be built beside `verifier` (the datastore without its data)."""

    def parts(self, verifier_name: str | None, options: dict) -> list[tuple[str | None, dict]]:
        """A kind built from other drafters (the hybrid proposer): (drafter name, options) of each, which the model
        cache builds beside the verifier and passes to `build` as `parts` (a name None: the verifier's default
        drafter). Most kinds have none."""
        return []

    def build_distilled(self, model, verifier, draft_to_target, **options):
        """The drafter around a distilled model (`specdiff.zoo.distilled.build`), fitted to `verifier`."""
        raise ValueError(f"no distilled drafter of kind {self.name!r}")

    def distilled_model(self, model_config, weights: dict, target, draft_to_target) -> tuple:
        """(an empty model of a distilled drafter's config, the parameter names its stored weights lack because they
        are the verifier's): sets those shared weights from `target` into `weights`."""
        raise ValueError(f"no distilled drafter of kind {self.name!r}")

    def finish_distilled(self, model) -> None:
        """What a distilled model needs once its weights are loaded (tying its head to its embeddings); most
        kinds need nothing."""

    def check_options(self, options: dict) -> None:
        allowed = SAMPLING_KEYS + self.option_keys
        unknown = sorted(set(options) - set(allowed))
        if unknown:
            raise ValueError(f"{', '.join(unknown)} do(es) not apply to {self.article()} drafter; it takes "
                             f"{', '.join(allowed)}")

    def check_effort(self, steps: int = 1, threshold: float | None = None) -> None:
        """ValueError when given an effort knob it does not have."""
        if self.ignores_effort:
            return
        if threshold is not None and "threshold" not in self.effort:
            raise ValueError(f"--threshold (tau) does not apply to the {self.name} drafter; it takes "
                             f"{' or '.join(self.effort) or 'no effort knob (one step per round)'}")
        if steps != 1 and "steps" not in self.effort:
            raise ValueError(f"--steps (K) does not apply to the {self.name} drafter: it drafts a block in one step")

    def run_options(self, run) -> dict:
        """The drafter keyword arguments of a RunConfig (its effort, and the unmasking order where it has one)."""
        self.check_effort(run.steps, run.threshold)
        options = {}
        if "steps" in self.effort:
            options["steps"] = run.steps
        if "threshold" in self.effort:
            options["threshold"] = run.threshold
        if run.order is not None and "order" in self.option_keys:
            options["order"] = run.order
        return options

    def extra_options(self, run) -> dict:
        """The drafter keyword arguments a RunConfig carries in `extra` (a model-free kind's own knobs)."""
        return {key: run.extra[key] for key in self.option_keys if key in run.extra}

    def describe(self, steps: int = 1, threshold: float | None = None, block_size: int = 8) -> str:
        """A short row name: "block tau=0.9 B=8", "uniform K=2 B=8", "dflash B=16", "AR drafter B=4"."""
        effort = ""
        if "threshold" in self.effort and threshold is not None:
            effort = f" tau={threshold}"
        elif "steps" in self.effort:
            effort = f" K={steps}"
        return f"{self.label or self.name}{effort} B={block_size}"

    def marginal_exact(self, effort: dict) -> bool:
        return True

    def effort_grid(self, steps=(1,), thresholds=()) -> list[dict]:
        """The efforts a tuner tries: one per K (and per tau where the kind takes one); {} without a knob."""
        grid = [{"steps": int(k)} for k in steps] if "steps" in self.effort else [{}]
        if "threshold" in self.effort:
            grid += [{"threshold": float(t)} for t in thresholds]
        return grid

    def bench_candidates(self, block: int, grid: dict) -> list[tuple[str, dict]]:
        """The tuning candidates at draft length `block`: (row name, RunConfig fields) for every effort of the grid
        with K <= B, by prefix cache where the kind has one (a round cache at one step is never reused: skipped);
        a marginal proposal where it is exact at that effort, a point mass otherwise."""
        out = []
        caches = grid.get("caches") or ["off"] if "prefix_cache" in self.option_keys else [None]
        for effort in self.effort_grid(grid.get("steps") or [1], grid.get("thresholds") or []):
            steps = effort.get("steps", 1)
            if steps > block:
                continue
            exact = self.marginal_exact(effort)
            name = self.describe(steps, effort.get("threshold"), block) + ("" if exact else " point mass")
            for cache in caches:
                if cache == "round" and steps == 1 and "threshold" not in effort:
                    continue
                fields = dict(effort, block_size=block, proposal="marginal" if exact else "point_mass")
                if cache is not None:
                    fields["prefix_cache"] = False if cache == "off" else cache
                out.append((name + ("" if cache is None else f" cache={cache}"), fields))
        return out

    def trained_block(self, config: dict) -> int | None:
        """The longest draft a checkpoint of this kind (its config.json, a dict) was trained for (None: any B)."""
        return None

    def article(self) -> str:
        return f"{'an' if (self.label or self.name)[0] in 'aeiouAEIOU' else 'a'} {self.label or self.name}"


def register(spec: KindSpec) -> KindSpec:
    """Registers a kind under its name and aliases (a new kind: one module, one call); returns it."""
    if not spec.name:
        raise ValueError("a KindSpec needs a name")
    for name in (spec.name, *spec.aliases):
        other = _KINDS.get(name)
        if other is not None and type(other) is not type(spec):
            raise ValueError(f"drafter kind {name!r} is registered already ({type(other).__name__})")
        _KINDS[name] = spec
    return spec


def unregister(name: str) -> None:
    """Removes a kind (tests that register a toy kind clean up with this)."""
    spec = _KINDS.get(name)
    for key in [k for k, v in _KINDS.items() if v is spec]:
        del _KINDS[key]


def get(name: str) -> KindSpec:
    """The spec of a kind name or alias; an error listing the kinds otherwise."""
    spec = _KINDS.get(name)
    if spec is None:
        raise ValueError(f"unknown drafter kind {name!r}: expected one of {', '.join(names())}")
    return spec


def find(name: str) -> KindSpec | None:
    return _KINDS.get(name)


def names() -> list[str]:
    """Every registered kind's name, once each, in recognition order."""
    return [spec.name for spec in specs()]


def specs() -> list[KindSpec]:
    """Every registered kind once, in listing order."""
    unique = {id(spec): spec for spec in _KINDS.values()}
    return sorted(unique.values(), key=lambda spec: (spec.rank, spec.name))


def by_zoo_model(name: str) -> KindSpec | None:
    """The kind whose testbed zoo model is `name`, if any."""
    return next((spec for spec in specs() if spec.zoo_model == name), None)


def by_distilled_role(role: str) -> KindSpec:
    spec = next((spec for spec in specs() if spec.distilled_role == role), None)
    if spec is None:
        raise ValueError(f"unknown distilled drafter role {role!r}")
    return spec


def recognise(config: dict) -> KindSpec:
    """The kind of a checkpoint's config.json contents; an error listing every kind otherwise."""
    for spec in sorted(specs(), key=lambda spec: spec.priority):
        if spec.needs_model and spec.recognise(config):
            return spec
    model_type = config.get("model_type", "")
    architectures = " ".join(config.get("architectures") or [])
    kinds = "; ".join(f"{' / '.join((spec.name, *spec.aliases))}: {spec.describes}" for spec in specs()
                      if spec.needs_model)
    raise ValueError(f"cannot recognise this checkpoint's kind (model_type {model_type!r}, architectures "
                     f"{architectures or 'none'}); specdiff supports {kinds}")
