"""Configurations of the shipped testbed models: architecture, training recipe and seed, and
default sampling settings. `specdiff zoo train NAME` reproduces a model from its entry here.

- `verifier`: Qwen3 causal LM, the strong autoregressive target.
- `ar-drafter`: a much smaller Qwen3 causal LM, the classic speculative-decoding baseline.
- `masked-drafter`: Dream-style masked diffusion LM: a Qwen3 backbone run with bidirectional
  attention, logits shifted by one position (logit i predicts token i+1), a mask token, trained with
  the MDLM objective on the answer given the prompt. It re-encodes every position at every
  denoising step without a cache, so it must be several times cheaper than a verifier round; it
  has the ar-drafter's architecture and starts from its weights, as Dream started from Qwen2.5
  (`init_from="verifier"` would start a same-width drafter from the verifier's embeddings, first
  layers and final norm; see docs/testbed.md for why the shipped one does not).
"""
from __future__ import annotations

CANVAS_TOKENS = 80  # masked drafter: answer canvas, answer + eos padding (max answer is 79 tokens)

# Qwen3Config keyword arguments; vocab and special token ids are filled in from the tokenizer.
ARCHITECTURES = {
    "verifier": dict(hidden_size=96, num_hidden_layers=8, num_attention_heads=4, num_key_value_heads=2,
                     head_dim=24, intermediate_size=384),
    "ar-drafter": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                       head_dim=16, intermediate_size=256),
    "masked-drafter": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                           head_dim=16, intermediate_size=256),
}

COMMON_ARCHITECTURE = dict(max_position_embeddings=192, tie_word_embeddings=True, rope_theta=10000.0,
                           rms_norm_eps=1e-6, attention_dropout=0.0)

TRAINING = {
    "verifier": dict(objective="ar", steps=1400, batch_size=32, lr=3e-3, warmup=100, weight_decay=0.1,
                     seed=1, init_from=None),
    "ar-drafter": dict(objective="ar", steps=1200, batch_size=32, lr=3e-3, warmup=100, weight_decay=0.1,
                       seed=2, init_from=None),
    # Dream-style adaptation: starts from the ar-drafter's weights (same architecture), as Dream
    # started from Qwen2.5; the mask token's embedding starts untrained. Each batch: the MDLM loss
    # (bidirectional attention) with half the sequences masked by number value (`group_prob`) and 30%
    # keeping a clean prefix with everything after it masked (`prefix_masking="all"`), plus the
    # next-token loss on the same problems with causal attention and the same weights (`ar_weight`):
    # Dream's shifted logits make the two heads one, and the dense causal signal is what teaches the
    # arithmetic (without it: 0.038, docs/testbed.md).
    "masked-drafter": dict(objective="mdlm", steps=4000, batch_size=32, lr=1e-3, warmup=100, weight_decay=0.1,
                           seed=3, init_from="ar-drafter",
                           stages=[dict(until=4000, group_prob=0.5, prefix_prob=0.3, prefix_masking="all",
                                        ar_weight=1.0)]),
}

# Default sampling settings, after the first paper's Table 3 (Qwen2.5 verifier; Dream standalone).
SAMPLING = {
    "verifier": dict(temperature=0.7, top_p=0.8, top_k=20),
    "ar-drafter": dict(temperature=0.7, top_p=0.8, top_k=20),
    "masked-drafter": dict(temperature=0.2, top_p=0.95, top_k=0, order="entropy"),
}

MODEL_NAMES = tuple(ARCHITECTURES)
