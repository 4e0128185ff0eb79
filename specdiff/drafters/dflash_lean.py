"""A lean forward for the DFlash draft model (issue 41, item 3): transformers' `MuseGlimmerAssistantModel`
call in plain torch ops, for the drafter's one step per round over [anchor, B masks] (B + 1 <= 17 query
rows, a layer or two), where the HF stack's per-module Python (mask dicts, rotary module, cache update,
attention dispatch, deprecation wrappers) costs more than the arithmetic.

The rule, per layer, as in transformers 5.24's modeling_muse_glimmer_assistant.py: the pending verifier
states are projected (`encoder`: fc, RMSNorm); the keys and values are those of [projected context, block]
(k_proj / v_proj of the context and of the block's normed input), appended to the cache; q and k get a
per-head RMSNorm, then the rotary embedding at their positions (q: the block's, k: the context's and the
block's); the block attends bidirectionally to every valid cached column (GQA: kv head h // (heads /
kv_heads) serves head h); then o_proj, the residual, the SiLU-gated MLP and the final RMSNorm. RMSNorm
computes in float32 and casts back before its weight, and the rotary cos / sin are cast to the block's
dtype, as there.

`lean_weights(model)` says whether a model is that plain architecture (None otherwise: the drafter keeps
the HF call); `LeanCache` holds the context's keys and values per layer ([b, kv_heads, C, head_dim]),
grown by concatenation, with the `DynamicCache` calls the drafter makes (crop, batch_select_indices, and
`.layers[i].keys / .values` for `specdiff.lm.cache.keep_columns`).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class LeanLayer:
    input_norm: torch.Tensor
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    o: torch.Tensor
    q_norm: torch.Tensor
    k_norm: torch.Tensor
    post_norm: torch.Tensor
    gate: torch.Tensor
    up: torch.Tensor
    down: torch.Tensor


@dataclass(frozen=True)
class LeanWeights:
    fc: torch.Tensor  # [H, H * target layers]: the context projection
    fc_norm: torch.Tensor  # [H]
    layers: tuple[LeanLayer, ...]
    norm: torch.Tensor  # [H]: the final norm
    inv_freq: torch.Tensor  # [head_dim / 2], float32
    eps: float
    heads: int
    kv_heads: int
    head_dim: int


def lean_weights(model) -> LeanWeights | None:
    """The weights of a plain `MuseGlimmerAssistantModel` (full attention only, default rope, SiLU, SDPA,
    no dropout in play); None for anything else, which keeps the transformers call."""
    from transformers import MuseGlimmerAssistantModel

    config = model.config
    rope = getattr(config, "rope_parameters", None) or {}
    if (type(model) is not MuseGlimmerAssistantModel
            or any(t != "full_attention" for t in config.layer_types)
            or rope.get("rope_type", "default") != "default"
            or config.hidden_act != "silu"
            or getattr(config, "_attn_implementation", "sdpa") != "sdpa"
            or (model.training and config.attention_dropout)
            or getattr(model.rotary_emb, "attention_scaling", 1.0) != 1.0):
        return None
    layers = tuple(LeanLayer(
        input_norm=layer.input_layernorm.weight, q=layer.self_attn.q_proj.weight, k=layer.self_attn.k_proj.weight,
        v=layer.self_attn.v_proj.weight, o=layer.self_attn.o_proj.weight, q_norm=layer.self_attn.q_norm.weight,
        k_norm=layer.self_attn.k_norm.weight, post_norm=layer.post_attention_layernorm.weight,
        gate=layer.mlp.gate_proj.weight, up=layer.mlp.up_proj.weight, down=layer.mlp.down_proj.weight)
        for layer in model.layers)
    attention = model.layers[0].self_attn
    return LeanWeights(fc=model.encoder.fc.weight, fc_norm=model.encoder.output_norm_enc.weight, layers=layers,
                       norm=model.norm.weight, inv_freq=model.rotary_emb.inv_freq.detach().float(),
                       eps=float(config.rms_norm_eps), heads=attention.num_attention_heads,
                       kv_heads=attention.num_key_value_heads, head_dim=attention.head_dim)


class LeanCache:
    """The context's keys and values per layer: .layers[i].keys / .values [b, kv_heads, C, head_dim]."""

    class Layer:
        keys = values = None

    def __init__(self, layers: int):
        self.layers = [LeanCache.Layer() for _ in range(layers)]

    def update(self, keys: torch.Tensor, values: torch.Tensor, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        layer = self.layers[index]
        if layer.keys is not None:
            keys, values = torch.cat([layer.keys, keys], dim=2), torch.cat([layer.values, values], dim=2)
        layer.keys, layer.values = keys, values
        return keys, values

    def crop(self, length: int) -> None:
        """Keeps the first `length` columns (a negative length drops that many from the end)."""
        for layer in self.layers:
            if layer.keys is not None:
                layer.keys, layer.values = layer.keys[:, :, :length], layer.values[:, :, :length]

    def batch_select_indices(self, rows: torch.Tensor) -> None:
        for layer in self.layers:
            if layer.keys is not None:
                layer.keys, layer.values = layer.keys[rows], layer.values[rows]


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x32 = x.float()
    return weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def project_context(w: LeanWeights, states: torch.Tensor) -> torch.Tensor:
    """The context projection (`encoder`): verifier states [..., H * layers] -> [..., H]."""
    return rms_norm(F.linear(states, w.fc), w.fc_norm, w.eps)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin


def lean_block_states(w: LeanWeights, cache: LeanCache, noise: torch.Tensor, context: torch.Tensor,
                      positions: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
    """noise [b, T, H]: the block's input embeddings (T = B + 1); context [b, N, H]: the pending verifier
    states, projected (`project_context`); positions [b, N + T]; key_mask [b, C + N + T]: the valid columns of
    cache, context and block. Appends the context's and the block's keys and values to `cache`; returns the
    block's final states [b, T, H]."""
    batch, length, _ = noise.shape
    heads, kv_heads, head_dim = w.heads, w.kv_heads, w.head_dim
    freqs = positions[..., None].float() * w.inv_freq.to(positions.device)  # [b, N + T, head_dim / 2]
    angles = torch.cat([freqs, freqs], dim=-1)[:, None]  # [b, 1, N + T, head_dim]
    cos, sin = angles.cos().to(noise.dtype), angles.sin().to(noise.dtype)
    mask = key_mask[:, None, None, :]  # [b, 1, 1, K]: every query row sees the same columns
    x = noise  # [b, T, H]
    for index, layer in enumerate(w.layers):
        h = rms_norm(x, layer.input_norm, w.eps)  # [b, T, H]
        kv_in = torch.cat([context, h], dim=1)  # [b, N + T, H]
        q = F.linear(h, layer.q).view(batch, length, heads, head_dim).transpose(1, 2)  # [b, heads, T, d]
        k = F.linear(kv_in, layer.k).view(batch, -1, kv_heads, head_dim).transpose(1, 2)  # [b, kv, N + T, d]
        v = F.linear(kv_in, layer.v).view(batch, -1, kv_heads, head_dim).transpose(1, 2)  # [b, kv, N + T, d]
        q = _rotate(rms_norm(q, layer.q_norm, w.eps), cos[:, :, -length:], sin[:, :, -length:])
        k = _rotate(rms_norm(k, layer.k_norm, w.eps), cos, sin)
        keys, values = cache.update(k, v, index)  # [b, kv, K, d]
        grouped = q.reshape(batch, kv_heads, -1, head_dim)  # [b, kv, heads / kv * T, d]: head h on kv h // group
        attended = F.scaled_dot_product_attention(grouped, keys, values, attn_mask=mask, scale=head_dim ** -0.5)
        attended = attended.view(batch, heads, length, head_dim).transpose(1, 2).reshape(batch, length, -1)
        x = x + F.linear(attended, layer.o)  # [b, T, H]
        h = rms_norm(x, layer.post_norm, w.eps)
        x = x + F.linear(F.silu(F.linear(h, layer.gate)) * F.linear(h, layer.up), layer.down)
    return rms_norm(x, w.norm, w.eps)  # [b, T, H]
