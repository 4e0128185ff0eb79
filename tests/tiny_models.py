"""Tiny random transformers models for the engine tests (built in the test, nothing downloaded),
and the exact distribution of a verifier's first tokens by enumeration (not a test module)."""
from __future__ import annotations

import itertools

import torch

from specdiff.lm.sampling import sampling_probs

# The end-to-end exactness checks (tests/engine/test_exactness.py, test_drafters_exactness.py): a verifier
# over VOCAB tokens, the law of its first LENGTH sampled tokens (VOCAB ** LENGTH = 64 sequences), ROWS rows
# of one prompt in one batched call. An exact sampler's expected TV is <= 0.4 sqrt(64 / ROWS) = 0.016.
VOCAB, LENGTH, ROWS = 4, 3, 40_000
TV_TOLERANCE = 0.03
PROMPT = [1, 2, 0, 3]
SAMPLING = dict(temperature=0.9, top_p=0.95, top_k=0)


def tiny_qwen3(vocab: int = 4, seed: int = 0, layers: int = 1, logit_scale: float = 1.5, context: int = 64,
               bidirectional: bool = False):
    """A Qwen3ForCausalLM with peaked next-token distributions (lm_head ~ N(0, logit_scale^2)).
    bidirectional=True marks it as a Dream-style masked drafter: shifted logits, mask id vocab-1."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    extra = dict(logits_shift=1, mask_token_id=vocab - 1, is_causal=False) if bidirectional else {}
    config = Qwen3Config(vocab_size=vocab, hidden_size=16, intermediate_size=32, num_hidden_layers=layers,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=8, max_position_embeddings=context,
                         tie_word_embeddings=False, pad_token_id=0, bos_token_id=None, eos_token_id=None, **extra)
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight.normal_(0.0, logit_scale)
    return model


def exact_continuations(model, prompt: list[int], length: int, temperature=1.0, top_p=1.0, top_k=0) -> torch.Tensor:
    """P(x_1..x_length | prompt) under the model's sampling distribution, for every sequence, as a
    flat tensor [V^length] indexed by x_1 V^(length-1) + ... + x_length (no cache, full forwards)."""
    vocab = model.config.vocab_size
    sequences = torch.tensor(list(itertools.product(range(vocab), repeat=length)))  # [V^n, n]
    ids = torch.cat([torch.tensor(prompt).expand(len(sequences), -1), sequences], dim=1)
    with torch.no_grad():
        logits = model(input_ids=ids).logits.double()  # [V^n, P + n, V]
    probs = sampling_probs(logits[:, len(prompt) - 1:-1], temperature, top_p, top_k)  # [V^n, n, V]
    picked = probs.gather(-1, sequences[..., None]).squeeze(-1)  # [V^n, n]
    return picked.prod(-1)


def sequence_index(rows: list[list[int]], vocab: int, length: int) -> torch.Tensor:
    """Flat index of each row's first `length` tokens (rows must have at least that many)."""
    tokens = torch.tensor([row[:length] for row in rows])
    weights = vocab ** torch.arange(length - 1, -1, -1)
    return (tokens * weights).sum(-1)


def tiny_diffusion_gemma(vocab: int = 4, seed: int = 0, layers: int = 2, logit_scale: float = 1.5, context: int = 64):
    """A DiffusionGemmaForBlockDiffusion (transformers >= 5.24, uniform diffusion) with a tiny text model
    (two experts, one sliding and one full layer) and a tiny vision tower, peaked output distributions."""
    from transformers import DiffusionGemmaConfig, DiffusionGemmaForBlockDiffusion

    layer_types = ["sliding_attention"] * (layers - 1) + ["full_attention"]
    text = dict(vocab_size=vocab, hidden_size=16, intermediate_size=32, num_hidden_layers=layers,
                num_attention_heads=2, num_key_value_heads=1, head_dim=8, global_head_dim=8,
                max_position_embeddings=context, sliding_window=context, layer_types=layer_types,
                num_experts=2, top_k_experts=1, moe_intermediate_size=16, pad_token_id=0, bos_token_id=None,
                eos_token_id=None)
    vision = dict(model_type="gemma4_vision", hidden_size=8, intermediate_size=8, num_hidden_layers=1,
                  num_attention_heads=1, num_key_value_heads=1, head_dim=8, position_embedding_size=4, patch_size=2)
    config = DiffusionGemmaConfig(text_config=text, vision_config=vision, canvas_length=4)
    torch.manual_seed(seed)
    model = DiffusionGemmaForBlockDiffusion(config).eval()
    with torch.no_grad():
        model.lm_head.weight.normal_(0.0, logit_scale)
    return model


def tiny_dflash(target, block: int = 4, seed: int = 0, layers=(0, 1), mask_token_id: int | None = None):
    """A DFlash draft model (transformers' MuseGlimmerAssistantModel) for the causal LM `target`: same
    hidden size, conditioned on target layers `layers` (0-indexed, as config.target_layer_ids)."""
    from transformers import MuseGlimmerAssistantConfig, MuseGlimmerAssistantModel

    hidden = target.config.hidden_size
    config = MuseGlimmerAssistantConfig(
        hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, head_dim=8, max_position_embeddings=target.config.max_position_embeddings,
        sliding_window=target.config.max_position_embeddings, layer_types=["full_attention"], block_size=block,
        mask_token_id=target.config.vocab_size - 1 if mask_token_id is None else mask_token_id,
        target_layer_ids=list(layers), bos_token_id=None, eos_token_id=None, pad_token_id=0)
    torch.manual_seed(seed)
    return MuseGlimmerAssistantModel(config).eval()


def assert_matches_exact(rows: list[list[int]], exact: torch.Tensor, label: str) -> None:
    """The rows' first LENGTH tokens follow `exact` [VOCAB ** LENGTH]: TV <= TV_TOLERANCE, chi-square p >= 1e-4."""
    from exactness import chi_square_pvalue, histogram, total_variation_to

    counts = histogram(sequence_index(rows, VOCAB, LENGTH), VOCAB ** LENGTH)
    tv = total_variation_to(counts, exact.to(counts.dtype))
    pvalue = chi_square_pvalue(counts, exact.to(counts.dtype))
    assert tv <= TV_TOLERANCE and pvalue >= 1e-4, f"{label}: TV {tv:.4f}, chi-square p {pvalue:.2e}"
