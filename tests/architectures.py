"""Tiny random instances of real transformers architectures for the conformance suite (built in the test,
nothing downloaded): two layers, width 32, vocabulary VOCAB. `HYBRID` holds the models whose caches keep
recurrent or convolution state (Gated DeltaNet, Mamba-2, Mamba-1, short convolutions); `ATTENTION` the
attention-only ones, sliding-window, MoE and MLA among them. Not a test module."""
from __future__ import annotations

import copy

import torch

VOCAB = 97


def _common(**overrides) -> dict:
    config = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                  num_key_value_heads=1, max_position_embeddings=128, pad_token_id=0, bos_token_id=None,
                  eos_token_id=None, tie_word_embeddings=False, initializer_range=0.2)
    config.update(overrides)
    return config


_MAMBA2 = dict(mamba_n_heads=4, mamba_d_head=8, mamba_d_state=8, mamba_n_groups=1, mamba_d_conv=4, mamba_chunk_size=8)
_GDN = dict(head_dim=16, layer_types=["linear_attention", "full_attention"], linear_num_value_heads=2,
            linear_num_key_heads=1, linear_key_head_dim=8, linear_value_head_dim=8, linear_conv_kernel_dim=4)

# name: (config class, model class, config keywords); the layer types each keeps are in docs/engine.md
HYBRID = {
    "qwen3_5": ("Qwen3_5TextConfig", "Qwen3_5ForCausalLM", _GDN),
    "qwen3_next": ("Qwen3NextConfig", "Qwen3NextForCausalLM",
                   dict(_GDN, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
                        shared_expert_intermediate_size=16)),
    "nemotron_h": ("NemotronHConfig", "NemotronHForCausalLM",
                   dict(head_dim=16, layers_block_type=["mamba", "attention"], mamba_num_heads=4, mamba_head_dim=8,
                        ssm_state_size=8, n_groups=1, conv_kernel=4, chunk_size=8)),
    "granitemoehybrid": ("GraniteMoeHybridConfig", "GraniteMoeHybridForCausalLM",
                         dict(_MAMBA2, layer_types=["mamba", "attention"], mamba_expand=1, num_local_experts=2,
                              num_experts_per_tok=1, shared_intermediate_size=32)),
    "falcon_h1": ("FalconH1Config", "FalconH1ForCausalLM", dict(_MAMBA2, head_dim=16, mamba_d_ssm=32)),
    "bamba": ("BambaConfig", "BambaForCausalLM", dict(_MAMBA2, attn_layer_indices=[1], mamba_expand=1)),
    "zamba2": ("Zamba2Config", "Zamba2ForCausalLM",
               dict(layers_block_type=["mamba", "hybrid"], mamba_d_state=8, mamba_d_conv=4, mamba_expand=2,
                    mamba_ngroups=1, mamba_headdim=8, chunk_size=8, num_mem_blocks=1, attention_head_dim=16)),
    "jamba": ("JambaConfig", "JambaForCausalLM",
              dict(attn_layer_period=2, attn_layer_offset=1, expert_layer_period=2, expert_layer_offset=1,
                   num_experts=2, num_experts_per_tok=1, mamba_d_state=8, mamba_d_conv=4, mamba_expand=2,
                   mamba_dt_rank=4)),
    "lfm2": ("Lfm2Config", "Lfm2ForCausalLM", dict(layer_types=["conv", "full_attention"], conv_L_cache=3)),
}

ATTENTION = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", dict(head_dim=16)),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(head_dim=16)),
    "mistral": ("MistralConfig", "MistralForCausalLM", dict(head_dim=16, sliding_window=8)),  # sliding window
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", dict(head_dim=16, sliding_window=8)),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", dict(head_dim=16, sliding_window=8)),
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", dict(n_embd=32, n_layer=2, n_head=2, n_positions=128)),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", {}),
    "olmo2": ("Olmo2Config", "Olmo2ForCausalLM", {}),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM", dict(head_dim=16, num_local_experts=4, num_experts_per_tok=2)),
    "qwen2_moe": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM",  # MoE
                  dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16, shared_expert_intermediate_size=16)),
    "deepseek_v3": ("DeepseekV3Config", "DeepseekV3ForCausalLM",  # MLA + MoE
                    dict(kv_lora_rank=16, q_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16,
                         n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=16, n_shared_experts=1,
                         first_k_dense_replace=1, n_group=1, topk_group=1, num_key_value_heads=2)),
}

ARCHITECTURES = {**ATTENTION, **HYBRID}


PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [12, 13], [14, 15, 16, 17, 18], [19]]
NEW_TOKENS, BLOCK = 40, 4  # the conformance runs: 40 new tokens, block 4
TIE_GAP = {torch.float32: 1e-3, torch.bfloat16: 0.125, torch.float16: 0.125}  # HF top-2 logit gap of a tie
TIES: list[str] = []
CHECKED: list[str] = []


def hf_greedy(model, prompt: list[int], new_tokens: int = NEW_TOKENS):
    """HF greedy generate of one prompt alone: (tokens, logits [new_tokens, V])."""
    out = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                         max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, eos_token_id=None,
                         pad_token_id=0, output_logits=True, return_dict_in_generate=True)
    return out.sequences[0, len(prompt):].tolist(), torch.cat(out.logits).float()


def assert_greedy_equal(label: str, tokens: list[list[int]], references, dtype=torch.float32) -> None:
    """Each row equals its HF reference, or first differs where HF's top-2 gap is below the tie tolerance."""
    for row, (got, (expected, logits)) in enumerate(zip(tokens, references)):
        CHECKED.append(label)
        if got == expected:
            continue
        first = next(i for i, (a, b) in enumerate(zip(got, expected)) if a != b)
        top = logits[first].topk(2).values
        gap = float(top[0] - top[1])
        assert gap < TIE_GAP[dtype], f"{label}, row {row}: differs at token {first} where HF's top-2 gap is {gap:.4f}"
        TIES.append(f"{label} row {row} at token {first} (gap {gap:.2e})")


def build(name: str, seed: int = 0, dtype=torch.float32, vocab: int = VOCAB, **overrides):
    """A tiny random `name` model in eval mode (seeded), in `dtype`."""
    import transformers

    config_class, model_class, keywords = ARCHITECTURES[name]
    config = getattr(transformers, config_class)(**_common(vocab_size=vocab, **{**keywords, **overrides}))
    torch.manual_seed(seed)
    model = getattr(transformers, model_class)(config).eval()
    return model.to(dtype)


def perturbed(model, scale: float = 0.15, seed: int = 1):
    """A copy of `model` with every weight moved by scale * its own spread: a drafter that agrees often, not always."""
    copy_ = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in copy_.parameters():
            if parameter.numel() > 1:
                noise = torch.randn(parameter.shape, generator=generator).to(parameter.dtype)
                parameter.add_(scale * noise * parameter.float().std().clamp(min=1e-3).to(parameter.dtype))
    return copy_
