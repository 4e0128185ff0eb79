"""Names -> models: the one place where a name becomes a verifier or a drafter (issues 39, 52).

A name or path is resolved ONCE, where it enters, into a frozen `ModelRef` (`ref`): its role, where its weights
come from (`source`), its drafter kind, the model it names, its folder, the verifier it belongs to and its dtype.
Everything below takes the resolved value: `ModelCache.get`, `load_model`, `load_tokenizer` and `check_pair`
branch on the reference's fields and never classify the name again, as transformers resolves an `AutoConfig` once
and maps it to a class. `specdiff.models.load(name_or_path, role=...)` returns a ready `sd.Verifier` or drafter,
and `ModelCache` does the same with each checkpoint read once per process.

A drafter name is, in the order tried (`ModelRef.source`):
- "modelless": a kind built without a checkpoint ("lookup": prompt lookup; the datastore, the hybrid proposer);
- "distilled": a distilled drafter (`specdiff.zoo.distilled`: shipped for a real verifier, or a folder
  `specdiff distill` wrote); with a real verifier, a distilled kind ("dflash", "ar", "masked") names that
  verifier's own one;
- "zoo": a drafter kind ("masked", "block", "uniform", "dflash", "ar"): the testbed zoo's model of that kind, or a
  zoo name ("masked-drafter", ...);
- "fetched": a fetched real checkpoint (`specdiff models fetch NAME`: `specdiff.checkpoints`);
- "gguf", "folder": a .gguf file, or a local transformers checkpoint folder (nothing is downloaded).
Anything else, the zoo's verifier ("verifier") included, is refused as an unknown drafter (`UnknownDrafter`).
A verifier name is a zoo name, a fetched name, a .gguf file or a folder. A checkpoint's kind is recognised from
its config by the registered kinds (`specdiff.drafters.registry`: each kind's `recognise`, `loader`, `build`);
anything else gets an error that lists them. Sampling defaults come from the zoo's table or the checkpoint's
generation_config; keyword arguments override them. With `verifier=` (an `sd.Verifier`), the drafter's
vocabulary is fitted to it (`drafters.vocab.fit_vocabulary`).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from specdiff.drafters import registry
from specdiff.drafters.registry import SAMPLING_KEYS  # noqa: F401  (re-exported)
from specdiff.zoo import distilled

LOOKUP = "lookup"  # `sd.PromptLookupDrafter`: needs no model, fits any verifier
ROLES = ("verifier", "drafter")


class UnknownDrafter(ValueError):
    """A drafter name that is no kind, zoo drafter, distilled drafter, fetched name, .gguf file or checkpoint
    folder (`ref`): the zoo's verifier is none of these."""
SOURCES = ("modelless", "distilled", "zoo", "fetched", "gguf", "folder")


@dataclass(frozen=True)
class ModelRef:
    """A model name or path, resolved once (`ref`).

    given: the name as written; role: "verifier" or "drafter"; source: where its weights come from (module
    docstring); reference: the model it names (a kind's zoo model, a distilled drafter's name, the path): the
    key under which `ModelCache` keeps it; kind: its registered drafter kind (None for a verifier, and for a
    drafter checkpoint not fetched yet); path: its folder or GGUF file (None: model-free, or not fetched yet);
    target: the verifier it belongs to (a distilled drafter's `specdiff_target`; a drafter paired through
    `pair`: that verifier's name); dtype: "float32" for the testbed's models, else None (the cache's dtype, or
    its verifier's for a drafter)."""

    given: str
    role: str
    source: str
    reference: str
    kind: str | None = None
    path: Path | None = None
    target: str | None = None
    dtype: str | None = None

    @property
    def spec(self) -> registry.KindSpec:
        """The registered kind of a drafter reference."""
        if self.kind is None:
            raise ValueError(f"{self.given!r} is not a drafter of a known kind")
        return registry.get(self.kind)

    @property
    def needs_model(self) -> bool:
        return self.source != "modelless"

    @property
    def testbed(self) -> bool:
        """One of the shipped testbed's models (trained with its arithmetic tokenizer)."""
        return self.source == "zoo"

    @property
    def real(self) -> bool:
        """A real checkpoint (fetched, a file or folder, or distilled for a real verifier)."""
        return self.source in ("distilled", "fetched", "gguf", "folder")

    def __str__(self) -> str:
        return self.given

    def folder(self) -> Path:
        """The checkpoint's folder: a fetched name's (an error naming `specdiff models fetch` when it is not
        fetched), a zoo model's or a local folder (an error naming what it is not when it has no config.json)."""
        return _local_dir(self)


def ref(name: str | ModelRef, role: str = "drafter", verifier: str | ModelRef | None = None) -> ModelRef:
    """The resolved reference of a name or path (module docstring); a `ModelRef` is returned as it is. With a
    real `verifier` (a name), a distilled kind names that verifier's own shipped drafter (`for_verifier`).
    ValueError naming what a drafter name is not; a verifier's folder is checked when it is loaded."""
    if isinstance(name, ModelRef):
        return name
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}: expected 'verifier' or 'drafter'")
    name = str(name)
    if role == "verifier":
        return _checkpoint_ref(name, "verifier", name)
    paired = for_verifier(name, str(verifier)) if verifier is not None else name
    target = None if verifier is None else str(verifier)
    spec = registry.find(paired)
    if spec is not None and not spec.needs_model:  # prompt lookup, and any kind built without a checkpoint
        return ModelRef(name, "drafter", "modelless", spec.name, kind=spec.name, target=target)
    folder = distilled.folder(paired)
    if folder is not None:
        config = _config(folder)
        return ModelRef(name, "drafter", "distilled", paired, kind=registry.by_distilled_role(config["specdiff_role"]).name,
                        path=Path(folder), target=config.get("specdiff_target"))
    if spec is None:
        spec = registry.by_zoo_model(paired)
    if spec is not None and spec.zoo_model:
        from specdiff import zoo

        return ModelRef(name, "drafter", "zoo", spec.zoo_model, kind=spec.name, path=zoo.model_dir(spec.zoo_model),
                        target=target, dtype="float32")
    reference = _checkpoint_ref(paired, "drafter", name, target)
    if reference.source == "gguf" or (reference.source == "fetched" and reference.path is None):
        return reference  # its kind is known once its weights are read
    if reference.source != "zoo" and (reference.path / "config.json").is_file():  # the zoo's verifier: no drafter
        return _with_kind(reference)
    raise UnknownDrafter(f"unknown drafter {paired!r} (unknown model): not a kind ({', '.join(drafter_kinds())}), a "
                         f"zoo drafter ({', '.join(drafter_kinds().values())}), a distilled drafter "
                         f"({', '.join(distilled.names()) or 'none shipped'}) nor a local directory with a "
                         "config.json")


def _checkpoint_ref(name: str, role: str, given: str, target: str | None = None) -> ModelRef:
    """A checkpoint by where its weights are: the testbed's zoo, a fetched name, a GGUF file or a folder."""
    from specdiff import zoo
    from specdiff.checkpoints import FETCHABLE, fetched_dir

    if name in zoo.TRAINABLE:
        return ModelRef(given, role, "zoo", name, path=zoo.model_dir(name), target=target, dtype="float32")
    if name.endswith(".gguf"):
        return ModelRef(given, role, "gguf", name, path=Path(name), target=target)
    if name in FETCHABLE:
        return ModelRef(given, role, "fetched", name, path=fetched_dir(name), target=target)
    return ModelRef(given, role, "folder", name, path=Path(name), target=target)


def _with_kind(reference: ModelRef) -> ModelRef:
    from dataclasses import replace

    return replace(reference, kind=registry.recognise(_config(reference.path)).name)


def pair(drafter: str | ModelRef, verifier: str | ModelRef) -> tuple[ModelRef, ModelRef]:
    """(drafter, verifier) references of a pair, the drafter named for that verifier (`for_verifier`) and the pair
    checked (`check_pair`) before any weights load."""
    verifier_ref = ref(verifier, "verifier")
    drafter_ref = ref(drafter, "drafter", verifier_ref.given)
    check_pair(drafter_ref, verifier_ref)
    return drafter_ref, verifier_ref


def kinds() -> dict[str, str]:
    """Every kind that a checkpoint can be: name -> what is recognised as it."""
    return {spec.name: spec.describes for spec in registry.specs() if spec.needs_model}


def drafter_kinds() -> dict[str, str]:
    """The engine's drafter kinds with a zoo model (`--drafter KIND` of demo / generate / bench) -> that model."""
    return {spec.name: spec.zoo_model for spec in registry.specs() if spec.zoo_model}


def is_real(name_or_path: str | ModelRef) -> bool:
    """Whether a verifier name is a real checkpoint (fetched or local), not one of the zoo's testbed models."""
    if isinstance(name_or_path, ModelRef):
        return not name_or_path.testbed
    from specdiff import zoo

    return name_or_path not in zoo.TRAINABLE


def load(name_or_path: str | ModelRef, role: str = "verifier", verifier=None, verifier_tokenizer=None,
         dtype: str | None = None, **options):
    """A ready `sd.Verifier` (role="verifier") or drafter (role="drafter") for a name (module docstring).
    verifier: the `sd.Verifier` the drafter will serve (needed by DFlash for a local checkpoint; with it the
    drafter's vocabulary is fitted to the verifier's, using verifier_tokenizer if given). dtype: "float32" or
    "bfloat16" for a real checkpoint (None: `lm.precision.default_dtype`, bfloat16 where native); a drafter
    beside a verifier follows the verifier's dtype; the testbed's models always run in float32."""
    reference = ref(name_or_path, role)
    cache = ModelCache(dtype=dtype)
    if reference.role == "verifier":
        return cache.verifier(reference, **options)
    drafter = cache.drafter(reference, verifier=verifier, **options)
    if verifier is not None and reference.source not in ("modelless", "distilled"):
        from specdiff.drafters.vocab import fit_vocabulary

        fit_vocabulary(drafter, verifier, cache.tokenizer(reference), verifier_tokenizer)
    return drafter


def resolve(drafter: str, verifier: str | None = None) -> tuple[str, str]:
    """A kind ("block"), a zoo name ("block-drafter"), a distilled drafter or a local checkpoint -> (kind name, model
    reference); with a real `verifier`, the distilled kinds name its own distilled drafters (`for_verifier`)."""
    reference = ref(drafter, "drafter", verifier)
    return reference.spec.name, reference.reference


def kind_spec(drafter: str, verifier: str | None = None) -> registry.KindSpec:
    """The registered kind of a drafter name (`ref`)."""
    return ref(drafter, "drafter", verifier).spec


def default_drafter(verifier: str | ModelRef) -> str:
    """The drafter used when none is named: the zoo's masked drafter for the testbed's verifier; for a real
    verifier the one recorded as fastest on its validation prompts (`default_choice`), else its shipped distilled
    DFlash drafter, else prompt lookup (the testbed's drafters do not fit it)."""
    if not is_real(verifier):
        from specdiff.zoo.configs import DEFAULT_DRAFTER

        return DEFAULT_DRAFTER
    choice = default_choice(verifier)
    return choice["drafter"] if choice is not None else default_model_drafter(verifier)


def default_model_drafter(verifier: str | ModelRef) -> str:
    """A real verifier's default drafter with a model (a hybrid proposer's model part): its shipped distilled
    drafter of the first distilled kind (DFlash), else prompt lookup."""
    return distilled.shipped_for(str(verifier), distilled_kinds()[0]) or LOOKUP  # the first: the default drafter


def default_choice(verifier: str | ModelRef) -> dict | None:
    """A real verifier's recorded default drafter (`zoo.distilled.default_for`): drafter, block_size, extra and the
    validation figures it was chosen by; None for the testbed or where none is recorded."""
    return distilled.default_for(str(verifier)) if is_real(verifier) else None


def distilled_kinds() -> list[str]:
    """The kinds `specdiff distill` trains for a real verifier."""
    return [spec.name for spec in sorted(registry.specs(), key=lambda spec: spec.distilled_rank) if spec.distilled_role]


def for_verifier(drafter: str, verifier: str) -> str:
    """A distilled kind ("dflash", "ar", "masked") with a real verifier: that verifier's own shipped distilled
    drafter, when there is one; anything else unchanged."""
    if drafter in distilled_kinds() and is_real(verifier):
        return distilled.shipped_for(verifier, drafter) or drafter
    return drafter


def check_pair(drafter: str | ModelRef, verifier: str | ModelRef) -> None:
    """Refuses a testbed drafter for a real verifier, saying why, before any weights load."""
    verifier_ref = ref(verifier, "verifier")
    try:
        drafter_ref = ref(drafter, "drafter")
    except ValueError:
        return  # an unknown drafter is refused where it is loaded, naming what it is not
    name = verifier_ref.given
    if drafter_ref.testbed and verifier_ref.real:
        own = [shipped for kind in distilled_kinds() if (shipped := distilled.shipped_for(name, kind))]
        raise ValueError(f"--drafter {drafter_ref.given}: the testbed's drafters ({drafter_ref.reference}) were trained "
                         f"with the testbed's arithmetic tokenizer and do not fit the vocabulary of the real verifier "
                         f"{name!r}; use --drafter {LOOKUP} (prompt lookup, no training)"
                         + (f", {' or '.join(own)} (distilled for it)" if own else "")
                         + f" or a drafter trained for it (`specdiff distill --verifier {name} --kind dflash`)")
    if not drafter_ref.needs_model:  # a kind built beside its verifier: can it be, for this one?
        spec = drafter_ref.spec
        spec.check_verifier(name)
        parts = spec.parts(name, {})
        if parts and parts[0][0] is None and not ref(default_model_drafter(verifier_ref)).needs_model:
            raise ValueError(f"--drafter {drafter_ref.given} needs a model drafter for {name!r} and none is shipped "
                             f"for it: train one (`specdiff distill --verifier {name} --kind dflash`)")


def require_weights(reference: str | ModelRef) -> None:
    """FileNotFoundError naming `specdiff zoo train NAME` when a zoo model has no weights yet."""
    from specdiff import zoo

    name = reference.reference if isinstance(reference, ModelRef) else reference
    if name in zoo.TRAINABLE and not (zoo.model_dir(name) / "model.safetensors").is_file():
        raise FileNotFoundError(f"the zoo model {name} is not shipped yet ({zoo.model_dir(name)} has no "
                                f"weights): train it with `specdiff zoo train {name}` (see docs/drafters.md), "
                                "or give a trained checkpoint's folder")


def quiet_transformers() -> None:
    """No per-model 'Loading weights' bars between the command's own progress bars."""
    from transformers.utils import logging

    logging.disable_progress_bar()


class ModelCache:
    """Loads each model and tokenizer once per process; wrappers (Verifier, drafters) are rebuilt around the
    loaded model for every set of options, which copies nothing. A sweep over many configurations of the same
    pair reads each checkpoint once, and resolves each name once (`ref`)."""

    def __init__(self, device: str | None = None, dtype: str | None = None):
        from specdiff.lm import precision

        self.models, self.tokenizers, self.refs, self.device = {}, {}, {}, device
        self.dtype = precision.resolve(dtype, device or "cpu")  # of real checkpoints; the testbed's stay float32

    def ref(self, name: str | ModelRef, role: str = "drafter") -> ModelRef:
        """`ref(name, role)`, resolved once per cache."""
        if isinstance(name, ModelRef):
            return name
        key = (str(name), role)
        if key not in self.refs:
            self.refs[key] = ref(name, role)
        return self.refs[key]

    def get(self, name: str | ModelRef, role: str | None = None, verifier=None, **options):
        """A Verifier (role "verifier") or a drafter (role "drafter") of a name or reference (module docstring)."""
        reference = self.ref(name, role or "drafter")
        if reference.role == "verifier":
            return self.verifier(reference, **options)
        return self.drafter(reference, verifier=verifier, **options)

    def verifier(self, name: str | ModelRef, **sampling):
        """The `sd.Verifier` of a verifier name or reference: its checkpoint loaded once, wrapped with its sampling
        defaults and `sampling` over them."""
        reference = self.ref(name, "verifier")
        model, config, defaults = self._loaded(reference)
        wrapped = as_verifier(model, config, defaults, **sampling)
        wrapped.name = reference.given  # named in a distilled drafter's refusal
        return wrapped

    def drafter(self, name: str | ModelRef, verifier=None, **options):
        """The drafter of a drafter name or reference, built beside `verifier` (an `sd.Verifier`) where it has one."""
        reference = self.ref(name, "drafter")
        if not reference.needs_model:  # lookup, datastore, hybrid: its own knobs are its options
            spec = reference.spec
            own = {k: v for k, v in options.items() if k in spec.option_keys}
            parts = [self.drafter(part or default_model_drafter(verifier.name), verifier=verifier, **part_options)
                     for part, part_options in spec.parts(getattr(verifier, "name", None), own)]
            return spec.build(target=verifier, **({"parts": parts} if parts else {}), **own)
        if reference.source == "distilled":  # built once around the verifier's shared weights
            if verifier is None:
                verifier = self.verifier(reference.target)
            key = ("distilled", reference.reference)
            if key not in self.models:
                self.models[key] = distilled.build(reference.path, verifier.model, getattr(verifier, "name", None))
            return wrap_distilled(self.models[key], verifier, **options)
        model, config, defaults = self._loaded(reference)
        if verifier is not None and reference.real:  # a drafter follows its verifier's dtype
            model = model.to(_model_dtype(verifier.model))
        return wrap(model, config, defaults, self.tokenizer(reference), "drafter", verifier=verifier,
                    spec=registry.get(reference.kind) if reference.kind else None, **options)

    def model(self, name: str | ModelRef, role: str = "verifier"):
        """The loaded transformers model of a checkpoint (no wrapper), in the cache's dtype where it is real."""
        return self._loaded(self.ref(name, role))[0]

    def kind(self, name: str | ModelRef) -> str:
        """The kind name of drafter `name` (masked, block, uniform, dflash, ar, lookup)."""
        return self.ref(name).spec.name

    def _loaded(self, reference: ModelRef):
        """(model, config, sampling defaults) of a checkpoint reference, loaded once."""
        if reference.reference not in self.models:
            from specdiff.lm import precision

            model, *rest = load_model(reference)
            if reference.real:
                model = model.to(precision.torch_dtype(self.dtype))
            if self.device is not None:
                model = model.to(self.device)
            self.models[reference.reference] = (model, *rest)
        return self.models[reference.reference]

    def tokenizer(self, name: str | ModelRef, role: str = "verifier"):
        """The tokenizer of a model, a verifier's unless `role` or the reference says otherwise (None for a model-free
        or distilled drafter: it drafts its verifier's ids). An unknown drafter's tokenizer is looked for as a
        model's, as before issue 52: that refusal names it an unknown model (`_local_dir`), before any weights load;
        the zoo's verifier's is the zoo tokenizer (the drafter itself is refused where it is built)."""
        try:
            reference = self.ref(name, role)
        except UnknownDrafter:
            reference = self.ref(name, "verifier")
        if reference.source in ("modelless", "distilled"):
            return None
        if reference.reference not in self.tokenizers:
            self.tokenizers[reference.reference] = load_tokenizer(reference)
        return self.tokenizers[reference.reference]


def wrap(model, config: dict, defaults: dict, tokenizer, role: str, verifier=None, spec=None, **options):
    """A Verifier or drafter around an already loaded model (see `load`); cheap, nothing is copied. spec: the
    drafter's kind when its reference knows it (else recognised from the config)."""
    if role == "verifier":
        return as_verifier(model, config, defaults, **options)
    spec = spec or registry.recognise(config)
    target = verifier if verifier is not None or not spec.needs_target else _zoo_target(config)
    return spec.build(model, config, defaults, tokenizer, target=target, **options)


def as_verifier(model, config: dict, defaults: dict, **sampling):
    """An `sd.Verifier` around a loaded causal LM; refused for a drafter-only kind or a non-sampling option."""
    from specdiff.engine.verifier import Verifier

    spec = registry.recognise(config)
    if not spec.can_verify:
        raise ValueError(f"a verifier must be a causal LM; this checkpoint is a {spec.name} drafter "
                         f"({spec.describes})")
    unknown = sorted(set(sampling) - set(SAMPLING_KEYS))
    if unknown:
        raise ValueError(f"{', '.join(unknown)} do(es) not apply to a verifier; it takes {', '.join(SAMPLING_KEYS)}")
    return Verifier(model, **{**defaults, **sampling})


def wrap_distilled(built, verifier, **options):
    """The drafter around `distilled.build`'s (model, config, draft_to_target), fitted to `verifier`. Greedy
    drafting unless sampling options say otherwise."""
    from specdiff.drafters.vocab import fit_vocabulary

    model, config, d2t = built
    drafter = registry.by_distilled_role(config["specdiff_role"]).build_distilled(model, verifier, d2t, **options)
    fit_vocabulary(drafter, verifier)
    return drafter


def _zoo_target(config: dict):
    """The zoo verifier a zoo drafter was trained beside (DFlash's target), or None."""
    from specdiff import zoo

    name = config.get("specdiff_target")
    return None if name is None or name not in zoo.TRAINABLE else zoo.load(name)


def load_tokenizer(name_or_path: str | ModelRef):
    """The zoo tokenizer for zoo names, else the checkpoint's own (local files only; a GGUF file's own)."""
    reference = ref(name_or_path, "verifier")
    if reference.testbed:
        from specdiff import zoo

        return zoo.tokenizer()
    from transformers import AutoTokenizer

    if reference.source == "gguf":
        return AutoTokenizer.from_pretrained(str(reference.path.parent), gguf_file=reference.path.name,
                                             local_files_only=True)
    path = _local_dir(reference)
    if not any((path / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")):
        return None  # a checkpoint without a tokenizer: ids only
    return AutoTokenizer.from_pretrained(path, local_files_only=True)


def drafter_kind(config: dict) -> str:
    """The kind name of a checkpoint's config.json contents (`registry.recognise`)."""
    return registry.recognise(config).name


def load_model(name_or_path: str | ModelRef):
    """(model in eval mode, config dict, sampling defaults) of a zoo name, fetched name, GGUF file or folder."""
    reference = ref(name_or_path, "verifier")
    if reference.testbed:
        from specdiff import zoo

        model = zoo.load(reference.reference)  # FileNotFoundError naming `specdiff zoo train` when not trained yet
        return model, _config(reference.path), dict(zoo.SAMPLING[reference.reference])
    if reference.source == "gguf":
        from specdiff.checkpoints import load_gguf

        model, _ = load_gguf(reference.path)
        config = {**model.config.to_dict(), "architectures": [type(model).__name__]}  # a GGUF config names none
        return model, config, _sampling_defaults(model)
    path = _local_dir(reference)
    config = _config(path)
    import transformers

    spec = registry.get(reference.kind) if reference.kind else registry.recognise(config)  # unrecognised: fails here
    loader = spec.loader(config, transformers)
    model = loader.from_pretrained(path, local_files_only=True, trust_remote_code=spec.remote_code(config)).eval()
    return model, config, _sampling_defaults(model)


def _model_dtype(model):
    return next(model.parameters()).dtype


def checkpoint_config(reference: str | ModelRef) -> dict:
    """The config.json of a drafter reference (a distilled drafter, a zoo name or a local folder); {} for prompt
    lookup and for anything without one."""
    try:
        resolved = ref(reference, "drafter")
    except ValueError:
        return {}
    if resolved.path is None or not (resolved.path / "config.json").is_file():
        return {}
    return _config(resolved.path)


def _config(folder) -> dict:
    return json.loads((Path(folder) / "config.json").read_text())


def _sampling_defaults(model) -> dict:
    """The sampling settings a checkpoint's generation config recommends (when it samples)."""
    generation = getattr(model, "generation_config", None)
    if generation is None or not getattr(generation, "do_sample", False):
        return {}
    return {k: getattr(generation, k) for k in SAMPLING_KEYS if getattr(generation, k, None) is not None}


def _local_dir(reference: ModelRef) -> Path:
    """The folder of a fetched reference (an error naming `specdiff models fetch` when not fetched) or a local path."""
    from specdiff import zoo
    from specdiff.checkpoints import FETCHABLE, require

    if reference.source == "fetched":
        return require(reference.reference)
    if reference.source == "zoo":
        return reference.path
    path = reference.path
    if not (path / "config.json").is_file():
        raise ValueError(f"unknown model {reference.reference!r}: not a zoo name ({', '.join(zoo.TRAINABLE)}), a "
                         f"fetchable name ({', '.join(FETCHABLE)}: `specdiff models fetch NAME`), a drafter kind "
                         f"({', '.join(drafter_kinds())}, {LOOKUP}), a .gguf file nor a local directory with a "
                         "config.json (nothing is downloaded)")
    return path


def __getattr__(name: str):
    """Old names kept for callers (KINDS, DRAFTER_KINDS): computed from the registry."""
    if name == "KINDS":
        return kinds()
    if name == "DRAFTER_KINDS":
        return drafter_kinds()
    raise AttributeError(f"module 'specdiff.models' has no attribute {name!r}")
