"""Tiny Qwen3 pairs for the vLLM tests, built and saved by the tests (nothing is downloaded; not a test
module). vLLM's CPU attention needs head_dim 32, so these are wider than tests/tiny_models.py's."""
from __future__ import annotations

import json
from pathlib import Path

import torch


def qwen3(vocab: int, layers: int, seed: int, logit_scale: float, bidirectional: bool = False):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    extra = dict(logits_shift=1, mask_token_id=vocab - 1, is_causal=False) if bidirectional else {}
    config = Qwen3Config(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=32, max_position_embeddings=128,
                         tie_word_embeddings=False, pad_token_id=0, bos_token_id=None, eos_token_id=None, **extra)
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight.normal_(0.0, logit_scale / 8.0)  # logits of standard deviation ~ logit_scale
    return model


def pair(root: Path, vocab: int = 8, logit_scale: float = 1.5, seed: int = 0) -> tuple[Path, Path]:
    """A 2-layer target and a 1-layer draft that shares the target's embedding, first layer, norm and
    head (so that it agrees with the target often enough to measure acceptance), saved under root."""
    target = qwen3(vocab, 2, seed, logit_scale)
    draft = qwen3(vocab, 1, seed + 1, logit_scale)
    state = {k: v for k, v in target.state_dict().items() if not k.startswith("model.layers.1.")}
    draft.load_state_dict(state)
    with torch.no_grad():  # a little disagreement
        for param in draft.model.layers[0].mlp.parameters():
            param.add_(0.3 * torch.randn_like(param))
    paths = root / "target", root / "draft"
    for model, path in zip((target, draft), paths):
        model.save_pretrained(path)
    return paths


def self_pair(root: Path, vocab: int = 8, logit_scale: float = 5.0, seed: int = 0) -> tuple[Path, Path]:
    """A 2-layer target of peaked logits and, as its draft, a saved copy of it (draft_model needs a checkpoint
    of its own): greedy drafts are the target's argmax, so Lossless accepts a draft with the target's top-1
    mass (~0.8 at logit scale 5), and a verifier that reads a wrong target accepts visibly less."""
    target = qwen3(vocab, 2, seed, logit_scale)
    paths = root / "target", root / "draft"
    for path in paths:
        target.save_pretrained(path)
    return paths


def masked_drafter(root: Path, target_path: Path, vocab: int = 8, role: str = "masked-drafter") -> Path:
    """A Dream-style masked diffusion drafter (bidirectional, shifted logits, mask id vocab - 1) that
    starts from the target's weights, saved under root with specdiff's zoo role (masked-drafter, or
    block-drafter: the same weights run block-causally by BlockDiffusionDrafter)."""
    from transformers import AutoModelForCausalLM

    model = qwen3(vocab, 2, 7, 1.5, bidirectional=True)
    model.load_state_dict(AutoModelForCausalLM.from_pretrained(target_path).state_dict())
    path = root / role
    model.save_pretrained(path)
    config = json.loads((path / "config.json").read_text())
    config["specdiff_role"] = role
    (path / "config.json").write_text(json.dumps(config, indent=2))
    return path


def _save_head(path: Path, config: dict, weights: dict) -> Path:
    from safetensors.torch import save_file

    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config, indent=2))
    save_file({name: tensor.contiguous() for name, tensor in weights.items()}, str(path / "model.safetensors"))
    return path


def _llama_layer(generator, prefix: str, hidden: int, heads: int, kv_heads: int, head_dim: int, inner: int,
                 qkv_input: int, scale: float, input_norm: bool = True) -> dict:
    def randn(*shape):
        return torch.randn(*shape, generator=generator) * scale

    weights = {f"{prefix}self_attn.q_proj.weight": randn(heads * head_dim, qkv_input),
               f"{prefix}self_attn.k_proj.weight": randn(kv_heads * head_dim, qkv_input),
               f"{prefix}self_attn.v_proj.weight": randn(kv_heads * head_dim, qkv_input),
               f"{prefix}self_attn.o_proj.weight": randn(hidden, heads * head_dim),
               f"{prefix}mlp.gate_proj.weight": randn(inner, hidden),
               f"{prefix}mlp.up_proj.weight": randn(inner, hidden),
               f"{prefix}mlp.down_proj.weight": randn(hidden, inner),
               f"{prefix}post_attention_layernorm.weight": torch.ones(hidden)}
    if input_norm:
        weights[f"{prefix}input_layernorm.weight"] = torch.ones(hidden)
    return weights


def speculator_head(root: Path, target_path: Path, method: str, seed: int = 0, scale: float = 0.05) -> Path:
    """A randomly initialised one-layer speculator head for `target_path` (a tiny.qwen3 target), in the
    checkpoint format vLLM 0.32 loads for `method`:

    - "eagle": EAGLE-1 (vllm/model_executor/models/llama_eagle.py, EagleLlamaForCausalLM): a Llama config
      (vLLM's EAGLEConfig prefixes "Eagle" to its architecture); weights `fc.weight` [H, 2H] (token
      embedding and the target's last hidden state) and `layers.0.*` without input_layernorm; the
      embedding and lm_head are the target's (vLLM shares them when the head ships none);
    - "eagle3": EAGLE-3 (llama_eagle3.py, Eagle3LlamaForCausalLM): `fc.weight` [H, 3H] over the target's
      hidden states at `eagle_aux_hidden_state_layer_ids` [0, 1, 2] (before layer 0, after layers 0 and
      1), `layers.0.*` with a [.., 2H] qkv input and `hidden_norm`, `norm`, its own `lm_head` (a copy of
      the target's, so that its drafts agree with the target now and then);
    - "dflash": DFlash (qwen3_dflash.py, architecture DFlashDraftModel): a Qwen3 config with
      `dflash_config` {mask_token_id, target_layer_ids [0, 1]}, `fc.weight` [H, 2H], Qwen3 `layers.0.*`
      (q_norm, k_norm), `hidden_norm`, `norm`, its own `lm_head` (the target's copy); non-causal
      drafting of a block.
    """
    from safetensors.torch import load_file

    target_config = json.loads((Path(target_path) / "config.json").read_text())
    hidden, vocab = target_config["hidden_size"], target_config["vocab_size"]
    heads, kv_heads = target_config["num_attention_heads"], target_config["num_key_value_heads"]
    head_dim, inner = target_config["head_dim"], target_config["intermediate_size"]
    generator = torch.Generator().manual_seed(seed)
    lm_head = load_file(str(Path(target_path) / "model.safetensors"))["lm_head.weight"].clone()
    common = dict(vocab_size=vocab, hidden_size=hidden, intermediate_size=inner, num_hidden_layers=1,
                  num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=head_dim,
                  max_position_embeddings=target_config["max_position_embeddings"], rms_norm_eps=1e-6,
                  hidden_act="silu", tie_word_embeddings=False, torch_dtype="float32", rope_theta=10000.0)
    shape = dict(hidden=hidden, heads=heads, kv_heads=kv_heads, head_dim=head_dim, inner=inner, scale=scale)
    if method == "eagle":
        config = dict(common, model_type="llama", architectures=["LlamaForCausalLM"])
        weights = _llama_layer(generator, "layers.0.", qkv_input=hidden, input_norm=False, **shape)
        weights["fc.weight"] = torch.randn(hidden, 2 * hidden, generator=generator) * scale
    elif method == "eagle3":
        config = dict(common, model_type="llama", architectures=["LlamaForCausalLM"], draft_vocab_size=vocab,
                      eagle_aux_hidden_state_layer_ids=[0, 1, 2])
        weights = _llama_layer(generator, "layers.0.", qkv_input=2 * hidden, **shape)
        weights.update({"layers.0.hidden_norm.weight": torch.ones(hidden), "norm.weight": torch.ones(hidden),
                        "fc.weight": torch.randn(hidden, 3 * hidden, generator=generator) * scale,
                        "lm_head.weight": lm_head})
    elif method == "dflash":
        config = dict(common, model_type="qwen3", architectures=["DFlashDraftModel"],
                      dflash_config={"mask_token_id": vocab - 1, "target_layer_ids": [0, 1]})
        weights = _llama_layer(generator, "layers.0.", qkv_input=hidden, **shape)
        weights.update({"layers.0.self_attn.q_norm.weight": torch.ones(head_dim),
                        "layers.0.self_attn.k_norm.weight": torch.ones(head_dim),
                        "hidden_norm.weight": torch.ones(hidden), "norm.weight": torch.ones(hidden),
                        "fc.weight": torch.randn(hidden, 2 * hidden, generator=generator) * scale,
                        "lm_head.weight": lm_head})
    else:
        raise ValueError(f"unknown speculator method {method!r}: eagle, eagle3 or dflash")
    return _save_head(Path(root) / f"{method}-head", config, weights)
