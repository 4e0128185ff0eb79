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
