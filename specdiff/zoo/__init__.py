"""The shipped testbed: a tokenizer and three tiny transformers models for the `arith` task.

    tok = specdiff.zoo.tokenizer()          # PreTrainedTokenizerFast
    verifier = specdiff.zoo.load("verifier")  # Qwen3ForCausalLM, eval mode
    drafter = specdiff.zoo.load("masked-drafter")  # Qwen3ForCausalLM weights, used bidirectionally

See docs/testbed.md for how they were trained and how well they do.
"""
from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from specdiff.zoo.configs import MODEL_NAMES, SAMPLING, TRAINABLE

# shipped weights; SPECDIFF_ZOO_DIR points `load` at another directory of <name>/ folders
MODELS_DIR = Path(os.environ.get("SPECDIFF_ZOO_DIR", Path(__file__).parent / "models"))
# sha256 of the committed weights (specdiff/manifest.py); `zoo list` compares MODELS_DIR with it
MANIFEST = Path(__file__).parent / "models" / "manifest.json"

__all__ = ["MODEL_NAMES", "SAMPLING", "load", "tokenizer", "model_dir"]


def model_dir(name: str) -> Path:
    """Directory of a shipped model (config.json + model.safetensors)."""
    if name not in TRAINABLE:
        raise ValueError(f"unknown zoo model {name!r}; choose from {', '.join(TRAINABLE)}")
    return MODELS_DIR / name


@lru_cache(maxsize=1)
def tokenizer():
    """The testbed tokenizer (`PreTrainedTokenizerFast`; bos is prepended when special tokens are added)."""
    from specdiff.zoo.tokenization import load_tokenizer

    return load_tokenizer()


def load(name: str, dtype=None):
    """Loads a shipped model by name ("verifier", "ar-drafter", "masked-drafter") in eval mode.

    The masked drafter is a `Qwen3ForCausalLM` whose config says `is_causal: false`; run it through
    `specdiff.drafters.masked` (which passes a full bidirectional attention mask)."""
    import transformers

    from specdiff.zoo.configs import MODEL_CLASSES

    path = model_dir(name)
    if not (path / "model.safetensors").exists():
        raise FileNotFoundError(f"{path} has no weights; train them with `specdiff zoo train {name}`")
    kwargs = {} if dtype is None else {"dtype": dtype}
    model_class = getattr(transformers, MODEL_CLASSES.get(name, "AutoModelForCausalLM"))
    model = model_class.from_pretrained(path, **kwargs)
    return model.eval()
