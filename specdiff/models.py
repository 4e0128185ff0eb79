"""`specdiff.models.load(name_or_path, role=...)`: a ready `sd.Verifier` or drafter from a zoo
name, a fetched real checkpoint (`specdiff models fetch NAME`: `specdiff.checkpoints`), a local
transformers checkpoint or a GGUF file (nothing is downloaded).

The drafter kind is read from the checkpoint's config (`drafter_kind`), and each kind's conventions
are applied for the user:
- masked (Dream: `model_type` "Dream", shifted logits, its `mask_token_id`, trust_remote_code;
  LLaDA: `model_type` "llada", no shift, trust_remote_code; masked-LM classes; specdiff's
  `specdiff_role` "masked-drafter" or `mask_token_id` with `is_causal: false`);
- block (SDAR: `model_type` "sdar" or an SDAR architecture, trust_remote_code, no shift, its
  `block_size`; specdiff's "block-drafter");
- uniform (`model_type` "diffusion_gemma": `DiffusionGemmaForBlockDiffusion`; or `specdiff_role`
  "uniform-drafter": the zoo's, a Qwen3 backbone run block-causally);
- dflash (a `target_layer_ids` + `block_size` config, e.g. `model_type` "muse_glimmer_assistant"
  or z-lab's DFlash; needs the verifier: `load(..., verifier=...)`, the zoo's names their own);
- autoregressive: a causal LM (Qwen2, Qwen3, Gemma, Llama, ...), also the only kind of verifier.
Anything else gets an error that lists these kinds. Sampling defaults come from the zoo's table or
the checkpoint's generation_config; keyword arguments override them. With `verifier=` (an
`sd.Verifier`), the drafter's vocabulary is fitted to it (`specdiff.drafters.vocab.fit_vocabulary`).
"""
from __future__ import annotations

import json
from pathlib import Path

from specdiff.zoo import distilled

MASKED_MODEL_TYPES = ("Dream", "llada", "LLaDA")
BLOCK_MODEL_TYPES = ("sdar", "SDAR")
UNIFORM_MODEL_TYPES = ("diffusion_gemma",)
REMOTE_CODE_MODEL_TYPES = MASKED_MODEL_TYPES + BLOCK_MODEL_TYPES  # they ship their own modeling code
SAMPLING_KEYS = ("temperature", "top_p", "top_k")
MASKED_KEYS = ("steps", "threshold", "order", "prefix_cache", "shift_logits", "mask_token_id", "pad_token_id")
BLOCK_KEYS = ("steps", "threshold", "order", "shift_logits", "mask_token_id", "pad_token_id", "block_length")
UNIFORM_KEYS = ("steps", "order", "self_conditioning", "entropy_bound")
DFLASH_KEYS = ("mask_token_id",)
KINDS = {  # drafter kind: what is recognised as it
    "masked": "Dream, LLaDA, masked-LM classes, specdiff masked drafters",
    "block": "SDAR (model_type sdar), specdiff block drafters",
    "uniform": "DiffusionGemma (model_type diffusion_gemma), specdiff uniform drafters",
    "dflash": "DFlash draft models (config with target_layer_ids and block_size)",
    "autoregressive": "causal LMs (*ForCausalLM: Qwen2, Qwen3, Gemma, Llama, ...)",
}
# The engine's drafter kinds (`--drafter KIND` of demo / generate / bench) and their zoo models.
DRAFTER_KINDS = {"masked": "masked-drafter", "uniform": "uniform-drafter", "block": "block-drafter",
                 "dflash": "dflash-drafter", "ar": "ar-drafter"}
LOOKUP = "lookup"  # `sd.PromptLookupDrafter`: needs no model, fits any verifier


def is_real(name_or_path: str) -> bool:
    """Whether a verifier name is a real checkpoint (fetched or local), not one of the zoo's testbed models."""
    from specdiff import zoo

    return name_or_path not in zoo.TRAINABLE


def load(name_or_path: str, role: str = "verifier", verifier=None, verifier_tokenizer=None, **options):
    """A ready `sd.Verifier` (role="verifier") or drafter (role="drafter") for a zoo name, a drafter kind
    of `DRAFTER_KINDS` ("masked", "uniform", "block", "dflash", "ar": its zoo model) or a local path.
    verifier: the `sd.Verifier` the drafter will serve (needed by DFlash for a local checkpoint; with
    it the drafter's vocabulary is fitted to the verifier's, using verifier_tokenizer if given)."""
    if role not in ("verifier", "drafter"):
        raise ValueError(f"unknown role {role!r}: expected 'verifier' or 'drafter'")
    if role == "drafter" and name_or_path == LOOKUP:
        from specdiff.drafters.lookup import PromptLookupDrafter

        return PromptLookupDrafter(**options)
    if role == "drafter" and distilled.folder(name_or_path) is not None:
        return _load_distilled(distilled.folder(name_or_path), verifier, verifier_tokenizer, **options)
    name_or_path = DRAFTER_KINDS.get(name_or_path, name_or_path) if role == "drafter" else name_or_path
    if str(name_or_path).endswith(".gguf"):
        from specdiff.checkpoints import load_gguf

        model, tokenizer = load_gguf(name_or_path)
        config = {**model.config.to_dict(), "architectures": [type(model).__name__]}  # a GGUF config names none
        return wrap(model, config, _sampling_defaults(model), tokenizer, role, verifier=verifier, **options)
    model, config, defaults = load_model(name_or_path)
    tokenizer = load_tokenizer(name_or_path)
    drafter = wrap(model, config, defaults, tokenizer, role, verifier=verifier, **options)
    if role == "verifier":
        drafter.name = str(name_or_path)  # named in a distilled drafter's refusal
    if role == "drafter" and verifier is not None:
        from specdiff.drafters.vocab import fit_vocabulary

        fit_vocabulary(drafter, verifier, tokenizer, verifier_tokenizer)
    return drafter


def wrap(model, config: dict, defaults: dict, tokenizer, role: str, verifier=None, **options):
    """A Verifier or drafter around an already loaded model (see `load`); cheap, nothing is copied."""
    kind = drafter_kind(config)
    if role == "verifier":
        from specdiff.engine.verifier import Verifier

        if kind != "autoregressive":
            raise ValueError(f"a verifier must be a causal LM; this checkpoint is a {kind} drafter ({KINDS[kind]})")
        _reject_unknown(options, SAMPLING_KEYS, "a verifier")
        return Verifier(model, **{**defaults, **options})
    if kind in ("masked", "block"):
        from specdiff.drafters.block import BlockDiffusionDrafter
        from specdiff.drafters.masked import MaskedDiffusionDrafter

        keys, cls = (MASKED_KEYS, MaskedDiffusionDrafter) if kind == "masked" else (BLOCK_KEYS, BlockDiffusionDrafter)
        _reject_unknown(options, SAMPLING_KEYS + keys, f"a {kind} diffusion drafter")
        settings = {**defaults, **options}
        if kind == "masked" and config.get("model_type") in ("llada", "LLaDA"):
            settings.setdefault("shift_logits", False)  # LLaDA: the output at j is token j's distribution
        return cls(model, tokenizer=tokenizer, **settings)
    if kind == "uniform":
        from specdiff.drafters.uniform import UniformDiffusionDrafter

        _reject_unknown(options, SAMPLING_KEYS + UNIFORM_KEYS, "a uniform diffusion drafter")
        return UniformDiffusionDrafter(model, **{**defaults, **options})
    if kind == "dflash":
        from specdiff.drafters.dflash import DFlashDrafter

        _reject_unknown(options, SAMPLING_KEYS + DFLASH_KEYS, "a DFlash drafter")
        target = verifier if verifier is not None else _zoo_target(config)
        return DFlashDrafter(model, target, **{**defaults, **options})
    from specdiff.drafters.autoregressive import AutoregressiveDrafter

    _reject_unknown(options, SAMPLING_KEYS, "an autoregressive drafter")
    return AutoregressiveDrafter(model, **{**defaults, **options})


def _load_distilled(path, verifier, verifier_tokenizer, **options):
    """A drafter distilled by specdiff (`specdiff.zoo.distilled`): its trained weights completed with its
    verifier's shared ones; `verifier` defaults to the fetched one it was trained for."""
    config = json.loads((path / "config.json").read_text())
    if verifier is None:
        verifier = load(config["specdiff_target"])
    return wrap_distilled(distilled.build(path, verifier.model, getattr(verifier, "name", None)), verifier, **options)


def wrap_distilled(built, verifier, **options):
    """The drafter around `distilled.build`'s (model, config, draft_to_target), fitted to `verifier`. Greedy
    drafting unless sampling options say otherwise."""
    from specdiff.drafters.vocab import fit_vocabulary

    model, config, d2t = built
    if distilled.ROLES[config["specdiff_role"]] == "dflash":
        from specdiff.drafters.dflash import DFlashDrafter

        _reject_unknown(options, SAMPLING_KEYS + DFLASH_KEYS, "a DFlash drafter")
        drafter = DFlashDrafter(model, verifier, draft_to_target=d2t, **{"temperature": 0.0, **options})
    elif distilled.ROLES[config["specdiff_role"]] == "masked":
        from specdiff.drafters.masked import MaskedDiffusionDrafter

        _reject_unknown(options, SAMPLING_KEYS + MASKED_KEYS, "a masked diffusion drafter")
        drafter = MaskedDiffusionDrafter(model, **{"temperature": 0.0, "top_p": 1.0, "top_k": 0, "steps": 1,
                                                   "pad_token_id": model.config.pad_token_id or 0, **options})
        drafter.draft_to_target = d2t
    else:
        from specdiff.drafters.autoregressive import AutoregressiveDrafter

        _reject_unknown(options, SAMPLING_KEYS, "an autoregressive drafter")
        drafter = AutoregressiveDrafter(model, **{"temperature": 0.0, "top_p": 1.0, "top_k": 0, **options})
    fit_vocabulary(drafter, verifier)
    return drafter


def _zoo_target(config: dict):
    from specdiff import zoo

    name = config.get("specdiff_target")
    if name is None:
        raise ValueError("a DFlash drafter needs the verifier it was trained for: load(..., verifier=sd.Verifier(...))")
    return zoo.load(name)


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
    """One of `KINDS` from a checkpoint's config.json contents; an error listing them otherwise."""
    role, model_type = config.get("specdiff_role", ""), config.get("model_type", "")
    architectures = " ".join(config.get("architectures") or [])
    if role == "block-drafter" or model_type in BLOCK_MODEL_TYPES or "SDAR" in architectures:
        return "block"
    if role == "uniform-drafter" or model_type in UNIFORM_MODEL_TYPES or "DiffusionGemma" in architectures:
        return "uniform"
    if role == "dflash-drafter" or (config.get("target_layer_ids") is not None and "block_size" in config):
        return "dflash"
    if role == "masked-drafter" or "MaskedLM" in architectures or model_type in MASKED_MODEL_TYPES:
        return "masked"
    if config.get("mask_token_id") is not None and config.get("is_causal") is False:
        return "masked"
    if "ForCausalLM" in architectures or role in ("verifier", "ar-drafter"):
        return "autoregressive"
    kinds = "; ".join(f"{kind}: {what}" for kind, what in KINDS.items())
    raise ValueError(f"cannot recognise this checkpoint's kind (model_type {model_type!r}, architectures "
                     f"{architectures or 'none'}); specdiff supports {kinds}")


def load_model(name_or_path: str):
    """(model in eval mode, config dict, sampling defaults)."""
    from specdiff import zoo

    if name_or_path in zoo.TRAINABLE:
        model = zoo.load(name_or_path)  # FileNotFoundError naming `specdiff zoo train` when not trained yet
        config = json.loads((zoo.model_dir(name_or_path) / "config.json").read_text())
        sampling = {k: v for k, v in zoo.SAMPLING[name_or_path].items()}
        return model, config, sampling
    path = _local_dir(name_or_path)
    config = json.loads((path / "config.json").read_text())
    import transformers

    kind = drafter_kind(config)  # unrecognised kinds fail here, before any weights are read
    remote = config.get("model_type") in REMOTE_CODE_MODEL_TYPES  # Dream, LLaDA, SDAR ship their own code
    architectures = config.get("architectures") or []
    known = [getattr(transformers, a) for a in architectures if hasattr(transformers, a)]
    if "MaskedLM" in " ".join(architectures):
        loader = transformers.AutoModelForMaskedLM
    elif kind in ("uniform", "dflash") and known:
        loader = known[0]  # DiffusionGemmaForBlockDiffusion, MuseGlimmerAssistantModel
    elif kind in ("uniform", "dflash") or (remote and kind == "masked"):
        loader = transformers.AutoModel
    else:
        loader = transformers.AutoModelForCausalLM  # causal LMs, SDAR (its auto_map)
    model = loader.from_pretrained(path, local_files_only=True, trust_remote_code=remote).eval()
    return model, config, _sampling_defaults(model)


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
                         f"({', '.join(DRAFTER_KINDS)}, {LOOKUP}), a .gguf file nor a local directory with a "
                         "config.json (nothing is downloaded)")
    return path


def _reject_unknown(options: dict, allowed: tuple, what: str) -> None:
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(f"{', '.join(unknown)} do(es) not apply to {what}; it takes {', '.join(allowed)}")
