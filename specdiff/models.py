"""`specdiff.models.load(name_or_path, role=...)`: a ready `sd.Verifier` or drafter from a zoo
name or a local transformers checkpoint (nothing is downloaded).

The drafter kind is read from the checkpoint's config: specdiff's own `specdiff_role`, a
masked-LM class or a Dream / LLaDA `model_type`, or `mask_token_id` with `is_causal: false`,
make a masked diffusion drafter; any other causal LM an autoregressive drafter. Sampling
defaults come from the zoo's table or the checkpoint's generation_config; keyword arguments
override them (`steps`, `threshold`, `order`, `prefix_cache`, `temperature`, `top_p`, `top_k`).
"""
from __future__ import annotations

import json
from pathlib import Path

MASKED_MODEL_TYPES = ("Dream", "llada", "LLaDA")
SAMPLING_KEYS = ("temperature", "top_p", "top_k")
MASKED_KEYS = ("steps", "threshold", "order", "prefix_cache", "shift_logits", "mask_token_id", "pad_token_id")


def load(name_or_path: str, role: str = "verifier", **options):
    """A ready `sd.Verifier` (role="verifier") or drafter (role="drafter") for a zoo name or local path."""
    if role not in ("verifier", "drafter"):
        raise ValueError(f"unknown role {role!r}: expected 'verifier' or 'drafter'")
    return wrap(*load_model(name_or_path), load_tokenizer(name_or_path), role, **options)


def wrap(model, config: dict, defaults: dict, tokenizer, role: str, **options):
    """A Verifier or drafter around an already loaded model (see `load`); cheap, nothing is copied."""
    if role == "verifier":
        from specdiff.engine.verifier import Verifier

        _reject_unknown(options, SAMPLING_KEYS, "a verifier")
        return Verifier(model, **{**defaults, **options})
    if drafter_kind(config) == "masked":
        from specdiff.drafters.masked import MaskedDiffusionDrafter

        _reject_unknown(options, SAMPLING_KEYS + MASKED_KEYS, "a masked diffusion drafter")
        return MaskedDiffusionDrafter(model, tokenizer=tokenizer, **{**defaults, **options})
    from specdiff.drafters.autoregressive import AutoregressiveDrafter

    _reject_unknown(options, SAMPLING_KEYS, "an autoregressive drafter")
    return AutoregressiveDrafter(model, **{**defaults, **options})


def load_tokenizer(name_or_path: str):
    """The zoo tokenizer for zoo names, else the checkpoint's own (local files only)."""
    from specdiff import zoo

    if name_or_path in zoo.MODEL_NAMES:
        return zoo.tokenizer()
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(_local_dir(name_or_path), local_files_only=True)


def drafter_kind(config: dict) -> str:
    """"masked" or "autoregressive", from a checkpoint's config.json contents."""
    role = config.get("specdiff_role", "")
    architectures = " ".join(config.get("architectures") or [])
    if role == "masked-drafter" or "MaskedLM" in architectures or config.get("model_type") in MASKED_MODEL_TYPES:
        return "masked"
    if config.get("mask_token_id") is not None and config.get("is_causal") is False:
        return "masked"
    return "autoregressive"


def load_model(name_or_path: str):
    """(model in eval mode, config dict, sampling defaults)."""
    from specdiff import zoo

    if name_or_path in zoo.MODEL_NAMES:
        config = json.loads((zoo.model_dir(name_or_path) / "config.json").read_text())
        sampling = {k: v for k, v in zoo.SAMPLING[name_or_path].items()}
        return zoo.load(name_or_path), config, sampling
    path = _local_dir(name_or_path)
    config = json.loads((path / "config.json").read_text())
    import transformers

    remote = config.get("model_type") in MASKED_MODEL_TYPES  # Dream and LLaDA ship their own modeling code
    architectures = config.get("architectures") or []
    if "MaskedLM" in " ".join(architectures):
        loader = transformers.AutoModelForMaskedLM
    elif remote:
        loader = transformers.AutoModel
    else:
        loader = transformers.AutoModelForCausalLM
    model = loader.from_pretrained(path, local_files_only=True, trust_remote_code=remote).eval()
    generation = getattr(model, "generation_config", None)
    sampling = {}
    if generation is not None and getattr(generation, "do_sample", False):
        sampling = {k: getattr(generation, k) for k in SAMPLING_KEYS if getattr(generation, k, None) is not None}
    return model, config, sampling


def _local_dir(name_or_path: str) -> Path:
    from specdiff import zoo

    path = Path(name_or_path)
    if not (path / "config.json").is_file():
        raise ValueError(f"unknown model {name_or_path!r}: not a zoo name ({', '.join(zoo.MODEL_NAMES)}) nor a "
                         "local directory with a config.json (nothing is downloaded)")
    return path


def _reject_unknown(options: dict, allowed: tuple, what: str) -> None:
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(f"{', '.join(unknown)} do(es) not apply to {what}; it takes {', '.join(allowed)}")
