"""The engines `specdiff bench vllm` compares, built in one place each: vLLM in-process (`make_llm`) and
specdiff's engine (`speculative_generator`), with the same drafters (`vllm_cases`, `engine_drafters`), in
one dtype (`default_dtype`: bfloat16 where the hardware has it natively, CPU avx512_bf16 or AMX, or CUDA;
else float32), on the tiny pair `build_models` writes or on given checkpoints.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from specdiff.lm import precision
from specdiff.lm.precision import DTYPES

PROPOSER = "specdiff.integrations.vllm.DiffusionProposer"


def default_dtype(cpuinfo: str | os.PathLike = "/proc/cpuinfo") -> str:
    """The package's precision rule (`specdiff.lm.precision`) on this machine: bfloat16 on CUDA or on a CPU whose
    flags (in cpuinfo) compute it natively, else float32."""
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    return precision.default_dtype(device, precision.cpu_flags(cpuinfo))


def dtype_of(options) -> str:
    dtype = getattr(options, "dtype", None) or default_dtype()
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r}: expected one of {', '.join(DTYPES)}")
    return dtype


def build_models(root: Path, vocab: int = 512, seed: int = 0) -> tuple[Path, Path, Path]:
    """A 4-layer Qwen3 target, a 1-layer draft sharing its embedding, first layer and head, and a
    Dream-style masked drafter (bidirectional, shifted logits, mask id vocab - 1) from the target's
    weights; head_dim 32 (which vLLM's CPU attention needs; the zoo's testbed models, head_dim 24 and 16,
    do not load in vLLM's CPU backend). Returns their directories under root."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    def make(layers, bidirectional=False):
        extra = dict(logits_shift=1, mask_token_id=vocab - 1, is_causal=False) if bidirectional else {}
        config = Qwen3Config(vocab_size=vocab, hidden_size=128, intermediate_size=256, num_hidden_layers=layers,
                             num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=512,
                             tie_word_embeddings=False, pad_token_id=0, bos_token_id=None, eos_token_id=None, **extra)
        return Qwen3ForCausalLM(config).eval()

    torch.manual_seed(seed)
    target = make(4)
    with torch.no_grad():
        target.lm_head.weight.normal_(0.0, 0.15)
    draft = make(1)
    draft.load_state_dict({k: v for k, v in target.state_dict().items()
                           if not k.startswith(tuple(f"model.layers.{i}." for i in range(1, 4)))})
    masked = make(4, bidirectional=True)
    masked.load_state_dict(target.state_dict())
    paths = root / "target", root / "draft", root / "masked"
    for model, path in zip((target, draft, masked), paths):
        model.save_pretrained(path)
    config = json.loads((paths[2] / "config.json").read_text())
    config["specdiff_role"] = "masked-drafter"
    (paths[2] / "config.json").write_text(json.dumps(config, indent=2))
    return paths


def make_llm(options, target, speculative=None, extra=None, max_model_len: int | None = None):
    """An in-process vLLM engine on target: eager, one worker, options.dtype, options.seed, at most
    max(options.concurrency) sequences; max_model_len defaults to a 16-token prompt plus options.tokens
    and a block's slack. speculative: vLLM's speculative_config (None: no speculation); extra: its
    additional_config."""
    from vllm import LLM

    if max_model_len is None:
        max_model_len = 16 + options.tokens + options.block + 8
    return LLM(model=str(target), skip_tokenizer_init=True, enforce_eager=True, dtype=dtype_of(options),
               seed=options.seed, max_model_len=max_model_len, max_num_seqs=max(options.concurrency),
               disable_log_stats=False, distributed_executor_backend="uni", speculative_config=speculative,
               additional_config=extra or {})


def vllm_cases(options, draft, masked):
    """(name, speculative_config, additional_config) of vLLM with the plugin: draft_model and DiffusionProposer."""
    linear = {"specdiff": {"rule": "linear", "leniency": options.lam}}
    yield ("vllm draft_model linear", {"method": "draft_model", "model": str(draft),
                                       "num_speculative_tokens": options.block}, linear)
    yield ("vllm DiffusionProposer linear",
           {"method": "custom_class", "model": PROPOSER, "num_speculative_tokens": options.block},
           {"specdiff": {**linear["specdiff"], "drafter": str(masked), "steps": options.steps, "seed": options.seed}})


def engine_drafters(options, draft, masked):
    """(name, drafter factory) of specdiff's engine: the same draft model and masked drafter as vLLM's."""
    import specdiff as sd

    draft_model, masked_model = load(draft, options), load(masked, options)
    yield ("specdiff engine ar-drafter linear",
           lambda: sd.AutoregressiveDrafter(draft_model, temperature=0.0, top_p=1.0, top_k=0))
    yield ("specdiff engine masked-drafter linear",
           lambda: sd.MaskedDiffusionDrafter(masked_model, steps=options.steps))


def load(path, options):
    """A local checkpoint's model in options.dtype (the dtype vLLM runs), eval mode (`specdiff.models`)."""
    from specdiff.models import ModelCache

    return ModelCache(dtype=dtype_of(options)).model(str(path))


def speculative_generator(options, target_model, drafter, concurrency: int):
    """specdiff's engine as the bench runs it: temperature 1, Linear(lam), point mass, EOS ignored."""
    import specdiff as sd

    return sd.SpeculativeGenerator(drafter, sd.Verifier(target_model, temperature=1.0, top_p=1.0, top_k=0),
                                   block_size=options.block, rule=sd.Linear(options.lam), proposal="point_mass",
                                   eos_token_id=[], batch_size=concurrency)
