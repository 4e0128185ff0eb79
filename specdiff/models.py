"""Names -> models: the one place where a name becomes a verifier or a drafter (issue 39).

`specdiff.models.load(name_or_path, role=...)` returns a ready `sd.Verifier` or drafter, and `ModelCache` does
the same with each checkpoint read once per process. A name is, in the order tried:
- "lookup": prompt lookup, no model;
- a distilled drafter (`specdiff.zoo.distilled`: shipped for a real verifier, or a folder `specdiff distill`
  wrote); with a real verifier, a distilled kind ("dflash", "ar", "masked") names that verifier's own one;
- a drafter kind ("masked", "block", "uniform", "dflash", "ar"): the testbed zoo's model of that kind;
- a zoo name ("verifier", "masked-drafter", ...);
- a fetched real checkpoint (`specdiff models fetch NAME`: `specdiff.checkpoints`);
- a .gguf file, or a local transformers checkpoint folder (nothing is downloaded).
A checkpoint's kind is recognised from its config by the registered kinds (`specdiff.drafters.registry`:
each kind's `recognise`, `loader`, `build`); anything else gets an error that lists them. Sampling defaults
come from the zoo's table or the checkpoint's generation_config; keyword arguments override them. With
`verifier=` (an `sd.Verifier`), the drafter's vocabulary is fitted to it (`drafters.vocab.fit_vocabulary`).
"""
from __future__ import annotations

import json
from pathlib import Path

from specdiff.drafters import registry
from specdiff.drafters.registry import SAMPLING_KEYS  # noqa: F401  (re-exported)
from specdiff.zoo import distilled

LOOKUP = "lookup"  # `sd.PromptLookupDrafter`: needs no model, fits any verifier


def kinds() -> dict[str, str]:
    """Every kind that a checkpoint can be: name -> what is recognised as it."""
    return {spec.name: spec.describes for spec in registry.specs() if spec.needs_model}


def drafter_kinds() -> dict[str, str]:
    """The engine's drafter kinds with a zoo model (`--drafter KIND` of demo / generate / bench) -> that model."""
    return {spec.name: spec.zoo_model for spec in registry.specs() if spec.zoo_model}


def is_real(name_or_path: str) -> bool:
    """Whether a verifier name is a real checkpoint (fetched or local), not one of the zoo's testbed models."""
    from specdiff import zoo

    return name_or_path not in zoo.TRAINABLE


def load(name_or_path: str, role: str = "verifier", verifier=None, verifier_tokenizer=None, dtype: str | None = None,
         **options):
    """A ready `sd.Verifier` (role="verifier") or drafter (role="drafter") for a name (module docstring).
    verifier: the `sd.Verifier` the drafter will serve (needed by DFlash for a local checkpoint; with it the
    drafter's vocabulary is fitted to the verifier's, using verifier_tokenizer if given). dtype: "float32" or
    "bfloat16" for a real checkpoint (None: `lm.precision.default_dtype`, bfloat16 where native); a drafter
    beside a verifier follows the verifier's dtype; the testbed's models always run in float32."""
    if role not in ("verifier", "drafter"):
        raise ValueError(f"unknown role {role!r}: expected 'verifier' or 'drafter'")
    cache = ModelCache(dtype=dtype)
    if role == "verifier":
        return cache.get(name_or_path, "verifier", **options)
    drafter = cache.get(name_or_path, "drafter", verifier=verifier, **options)
    spec = registry.find(name_or_path)
    modelless = spec is not None and not spec.needs_model
    if verifier is not None and not modelless and distilled.folder(name_or_path) is None:
        from specdiff.drafters.vocab import fit_vocabulary

        fit_vocabulary(drafter, verifier, cache.tokenizer(name_or_path), verifier_tokenizer)
    return drafter


def resolve(drafter: str, verifier: str | None = None) -> tuple[str, str]:
    """A kind ("block"), a zoo name ("block-drafter"), a distilled drafter or a local checkpoint -> (kind name, model
    reference); with a real `verifier`, the distilled kinds name its own distilled drafters (`for_verifier`)."""
    if verifier is not None:
        drafter = for_verifier(drafter, verifier)
    spec = registry.find(drafter)
    if spec is not None and not spec.needs_model:  # prompt lookup, and any kind built without a checkpoint
        return spec.name, spec.name
    folder = distilled.folder(drafter)
    if folder is not None:
        return registry.by_distilled_role(_config(folder)["specdiff_role"]).name, drafter
    if spec is not None and spec.zoo_model:
        return spec.name, spec.zoo_model
    spec = registry.by_zoo_model(drafter)
    if spec is not None:
        return spec.name, drafter
    path = Path(drafter)
    if not (path / "config.json").is_file():
        raise ValueError(f"unknown drafter {drafter!r} (unknown model): not a kind ({', '.join(drafter_kinds())}), a zoo drafter "
                         f"({', '.join(drafter_kinds().values())}), a distilled drafter "
                         f"({', '.join(distilled.names()) or 'none shipped'}) nor a local directory with a "
                         "config.json")
    return registry.recognise(_config(path)).name, drafter


def kind_spec(drafter: str, verifier: str | None = None) -> registry.KindSpec:
    """The registered kind of a drafter name (`resolve`)."""
    return registry.get(resolve(drafter, verifier)[0])


def default_drafter(verifier: str) -> str:
    """The drafter used when none is named: the zoo's masked drafter for the testbed's verifier; for a real
    verifier its shipped distilled DFlash drafter, else prompt lookup (the testbed's drafters do not fit it)."""
    if not is_real(verifier):
        return registry.get("masked").zoo_model
    return distilled.shipped_for(verifier, "dflash") or LOOKUP


def distilled_kinds() -> list[str]:
    """The kinds `specdiff distill` trains for a real verifier."""
    return [spec.name for spec in sorted(registry.specs(), key=lambda spec: spec.distilled_rank) if spec.distilled_role]


def for_verifier(drafter: str, verifier: str) -> str:
    """A distilled kind ("dflash", "ar", "masked") with a real verifier: that verifier's own shipped distilled
    drafter, when there is one; anything else unchanged."""
    if drafter in distilled_kinds() and is_real(verifier):
        return distilled.shipped_for(verifier, drafter) or drafter
    return drafter


def check_pair(drafter: str, verifier: str) -> None:
    """Refuses a testbed drafter for a real verifier, saying why, before any weights load."""
    from specdiff import zoo

    spec = registry.find(drafter)
    reference = spec.zoo_model if spec is not None and spec.zoo_model else drafter
    if reference in zoo.TRAINABLE and is_real(verifier):
        own = [name for kind in distilled_kinds() if (name := distilled.shipped_for(verifier, kind))]
        raise ValueError(f"--drafter {drafter}: the testbed's drafters ({reference}) were trained with the testbed's "
                         f"arithmetic tokenizer and do not fit the vocabulary of the real verifier {verifier!r}; use "
                         f"--drafter {LOOKUP} (prompt lookup, no training)"
                         + (f", {' or '.join(own)} (distilled for it)" if own else "")
                         + f" or a drafter trained for it (`specdiff distill --verifier {verifier} --kind dflash`)")
    if spec is not None and not spec.needs_model:  # a kind built beside its verifier: can it be, for this one?
        spec.check_verifier(verifier)
        parts = spec.parts(verifier, {})
        if parts and parts[0][0] is None and not registry.get(resolve(default_drafter(verifier))[0]).needs_model:
            raise ValueError(f"--drafter {drafter} needs a model drafter for {verifier!r} and none is shipped for it: "
                             f"train one (`specdiff distill --verifier {verifier} --kind dflash`)")


def require_weights(reference: str) -> None:
    """FileNotFoundError naming `specdiff zoo train NAME` when a zoo model has no weights yet."""
    from specdiff import zoo

    if reference in zoo.TRAINABLE and not (zoo.model_dir(reference) / "model.safetensors").is_file():
        raise FileNotFoundError(f"the zoo model {reference} is not shipped yet ({zoo.model_dir(reference)} has no "
                                f"weights): train it with `specdiff zoo train {reference}` (see docs/drafters.md), "
                                "or give a trained checkpoint's folder")


class ModelCache:
    """Loads each model and tokenizer once per process; wrappers (Verifier, drafters) are rebuilt around the
    loaded model for every set of options, which copies nothing. A sweep over many configurations of the same
    pair reads each checkpoint once."""

    def __init__(self, device: str | None = None, dtype: str | None = None):
        from specdiff.lm import precision

        self.models, self.tokenizers, self.device = {}, {}, device
        self.dtype = precision.resolve(dtype, device or "cpu")  # of real checkpoints; the testbed's stay float32

    def get(self, name: str, role: str, verifier=None, **options):
        """A Verifier (role "verifier") or a drafter (role "drafter") of a name (module docstring)."""
        if role == "verifier":
            wrapped = wrap(*self._loaded(name), self.tokenizer(name), role, **options)
            wrapped.name = str(name)  # named in a distilled drafter's refusal
            return wrapped
        spec = registry.find(name)
        if spec is not None and not spec.needs_model:  # lookup, datastore, hybrid: its own knobs are its options
            own = {k: v for k, v in options.items() if k in spec.option_keys}
            parts = [self.get(part or default_drafter(verifier.name), "drafter", verifier=verifier, **part_options)
                     for part, part_options in spec.parts(getattr(verifier, "name", None), own)]
            return spec.build(target=verifier, **({"parts": parts} if parts else {}), **own)
        folder = distilled.folder(name)
        if folder is not None:  # distilled for a real verifier: built once around the verifier's shared weights
            if verifier is None:
                verifier = self.get(_config(folder)["specdiff_target"], "verifier")
            if ("distilled", name) not in self.models:
                self.models[("distilled", name)] = distilled.build(folder, verifier.model,
                                                                   getattr(verifier, "name", None))
            return wrap_distilled(self.models[("distilled", name)], verifier, **options)
        name = spec.zoo_model if spec is not None and spec.zoo_model else name  # "masked", "ar": its zoo model
        model, config, defaults = self._loaded(name)
        if verifier is not None and is_real(name):  # a drafter follows its verifier's dtype
            model = model.to(_model_dtype(verifier.model))
        return wrap(model, config, defaults, self.tokenizer(name), role, verifier=verifier, **options)

    def kind(self, name: str) -> str:
        """The kind name of drafter `name` (masked, block, uniform, dflash, ar, lookup)."""
        return resolve(name)[0]

    def _loaded(self, name: str):
        """(model, config, sampling defaults) of a zoo name, fetched name, GGUF file or path, loaded once."""
        if name not in self.models:
            from specdiff.lm import precision

            model, *rest = load_model(name)
            if is_real(name):
                model = model.to(precision.torch_dtype(self.dtype))
            if self.device is not None:
                model = model.to(self.device)
            self.models[name] = (model, *rest)
        return self.models[name]

    def tokenizer(self, name: str):
        spec = registry.find(name)
        if (spec is not None and not spec.needs_model) or distilled.folder(name) is not None:
            return None  # it drafts the verifier's own ids (a distilled drafter: the verifier's tokenizer)
        name = spec.zoo_model if spec is not None and spec.zoo_model else name
        if name not in self.tokenizers:
            self.tokenizers[name] = load_tokenizer(name)
        return self.tokenizers[name]


def wrap(model, config: dict, defaults: dict, tokenizer, role: str, verifier=None, **options):
    """A Verifier or drafter around an already loaded model (see `load`); cheap, nothing is copied."""
    spec = registry.recognise(config)
    if role == "verifier":
        from specdiff.engine.verifier import Verifier

        if not spec.can_verify:
            raise ValueError(f"a verifier must be a causal LM; this checkpoint is a {spec.name} drafter "
                             f"({spec.describes})")
        unknown = sorted(set(options) - set(SAMPLING_KEYS))
        if unknown:
            raise ValueError(f"{', '.join(unknown)} do(es) not apply to a verifier; it takes {', '.join(SAMPLING_KEYS)}")
        return Verifier(model, **{**defaults, **options})
    target = verifier if verifier is not None or not spec.needs_target else _zoo_target(config)
    return spec.build(model, config, defaults, tokenizer, target=target, **options)


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


def load_tokenizer(name_or_path: str):
    """The zoo tokenizer for zoo names, else the checkpoint's own (local files only; a GGUF file's own)."""
    from specdiff import zoo

    if name_or_path in zoo.TRAINABLE:
        return zoo.tokenizer()
    from transformers import AutoTokenizer

    if str(name_or_path).endswith(".gguf"):
        path = Path(name_or_path)
        return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name, local_files_only=True)

    path = _local_dir(name_or_path)
    if not any((path / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")):
        return None  # a checkpoint without a tokenizer: ids only
    return AutoTokenizer.from_pretrained(path, local_files_only=True)


def drafter_kind(config: dict) -> str:
    """The kind name of a checkpoint's config.json contents (`registry.recognise`)."""
    return registry.recognise(config).name


def load_model(name_or_path: str):
    """(model in eval mode, config dict, sampling defaults) of a zoo name, fetched name, GGUF file or folder."""
    from specdiff import zoo

    if name_or_path in zoo.TRAINABLE:
        model = zoo.load(name_or_path)  # FileNotFoundError naming `specdiff zoo train` when not trained yet
        config = _config(zoo.model_dir(name_or_path))
        return model, config, dict(zoo.SAMPLING[name_or_path])
    if str(name_or_path).endswith(".gguf"):
        from specdiff.checkpoints import load_gguf

        model, _ = load_gguf(name_or_path)
        config = {**model.config.to_dict(), "architectures": [type(model).__name__]}  # a GGUF config names none
        return model, config, _sampling_defaults(model)
    path = _local_dir(name_or_path)
    config = _config(path)
    import transformers

    spec = registry.recognise(config)  # unrecognised kinds fail here, before any weights are read
    loader = spec.loader(config, transformers)
    model = loader.from_pretrained(path, local_files_only=True, trust_remote_code=spec.remote_code(config)).eval()
    return model, config, _sampling_defaults(model)


def _model_dtype(model):
    return next(model.parameters()).dtype


def checkpoint_config(reference: str) -> dict:
    """The config.json of a drafter reference (a distilled drafter, a zoo name or a local folder); {} for prompt
    lookup and for anything without one."""
    from specdiff import zoo

    folder = distilled.folder(reference) if reference != LOOKUP else None
    if folder is None and reference in zoo.TRAINABLE:
        folder = zoo.model_dir(reference)
    if folder is None and reference != LOOKUP and (Path(reference) / "config.json").is_file():
        folder = Path(reference)
    return _config(folder) if folder is not None else {}


def _config(folder) -> dict:
    return json.loads((Path(folder) / "config.json").read_text())


def _sampling_defaults(model) -> dict:
    """The sampling settings a checkpoint's generation config recommends (when it samples)."""
    generation = getattr(model, "generation_config", None)
    if generation is None or not getattr(generation, "do_sample", False):
        return {}
    return {k: getattr(generation, k) for k in SAMPLING_KEYS if getattr(generation, k, None) is not None}


def _local_dir(name_or_path: str) -> Path:
    """The folder of a fetched name (an error naming `specdiff models fetch` when not fetched) or a local path."""
    from specdiff import zoo
    from specdiff.checkpoints import FETCHABLE, require

    if name_or_path in FETCHABLE:
        return require(name_or_path)
    path = Path(name_or_path)
    if not (path / "config.json").is_file():
        raise ValueError(f"unknown model {name_or_path!r}: not a zoo name ({', '.join(zoo.TRAINABLE)}), a fetchable "
                         f"name ({', '.join(FETCHABLE)}: `specdiff models fetch NAME`), a drafter kind "
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
