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

Recipes whose weights are not trained yet (`PLANNED`; `specdiff zoo train NAME` reproduces them,
docs/drafters.md describes them); each moves into the shipped `MODEL_NAMES` once trained:
- `block-drafter`: SDAR-style block diffusion on the masked drafter's Qwen3 backbone, from the
  ar-drafter's weights: committed tokens attend causally (they are cached once), a block of
  `BLOCK_TOKENS` after a random cut is masked at ratio t and attends to the prefix and, bidirectionally,
  to itself (`training.objectives.masked_diffusion`, block-causal), plus the causal next-token loss.
- `uniform-drafter`: uniform diffusion (DiffusionGemma's objective and sampler) on the masked drafter's
  Qwen3 backbone run block-causally (committed tokens cached causally, the canvas bidirectional), from
  the masked drafter's weights (`training.objectives.uniform_diffusion`). The earlier DiffusionGemma-architecture recipe
  (`DiffusionGemmaForBlockDiffusion` from scratch) scored 0.038 standalone; its training code
  was dropped with the one trainer (git history before `training/` has it).
- `dflash-drafter`: a DFlash draft model (`MuseGlimmerAssistantModel`) for the shipped verifier:
  the verifier's hidden states at `target_layer_ids` condition one step over [anchor, B masks],
  through the verifier's frozen embeddings and LM head (`training.objectives.dflash`).
"""
from __future__ import annotations

CANVAS_TOKENS = 80  # masked drafter: answer canvas, answer + eos padding (max answer is 79 tokens)
BLOCK_TOKENS = 8  # block, uniform and DFlash drafters: the block they are trained to draft (the engine's B)

# Qwen3Config keyword arguments; vocab and special token ids are filled in from the tokenizer.
ARCHITECTURES = {
    "verifier": dict(hidden_size=96, num_hidden_layers=8, num_attention_heads=4, num_key_value_heads=2,
                     head_dim=24, intermediate_size=384),
    "ar-drafter": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                       head_dim=16, intermediate_size=256),
    "masked-drafter": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                           head_dim=16, intermediate_size=256),
    # not shipped yet (PLANNED): the block drafter is a Qwen3 like the masked one; the others are the
    # keyword arguments of their own configs (DiffusionGemmaTextConfig, MuseGlimmerAssistantConfig)
    "block-drafter": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                          head_dim=16, intermediate_size=256),
    "uniform-drafter": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                            head_dim=16, intermediate_size=256),
    "dflash-drafter": dict(hidden_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                           head_dim=24, intermediate_size=256, layer_types=["full_attention"] * 2,
                           sliding_window=192, target_layer_ids=[1, 4, 6], block_size=BLOCK_TOKENS + 1),
}

MODEL_CLASSES = {  # transformers class of each zoo model (default Qwen3ForCausalLM)
    "dflash-drafter": "MuseGlimmerAssistantModel",
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
    # SDAR-style: from the ar-drafter (its causal prefix encoding is the block drafter's cache), the
    # block objective at the masked drafter's budget, and the same causal next-token loss.
    "block-drafter": dict(objective="block", steps=4000, batch_size=32, lr=1e-3, warmup=100, weight_decay=0.1,
                          seed=4, init_from="ar-drafter", block_tokens=BLOCK_TOKENS, ar_weight=1.0),
    # Uniform diffusion on the masked drafter's backbone (Qwen3 64 x 2, Dream's shift), run block-causally
    # as the block drafter (committed tokens cached causally, the canvas bidirectional): starts from the
    # shipped masked drafter's weights, so it inherits their arithmetic. Each batch: the block after a
    # random cut, each token replaced by a uniform random token with probability t ~ U(t_min, t_max) (a
    # noise curriculum over the stages), a `suffix_prob` share with a clean head and a fully noised tail;
    # cross-entropy on every block position; plus the causal next-token loss (same weights).
    # (The DiffusionGemma recipe it replaces, 6000 steps from scratch: 0.038 standalone; docs/drafters.md.)
    "uniform-drafter": dict(objective="uniform_block", steps=2500, batch_size=32, lr=1e-3, warmup=100,
                            weight_decay=0.1, seed=5, init_from="masked-drafter", ar_weight=1.0, suffix_prob=0.5,
                            noised_weight=1.0, stages=[dict(until=300, t_max=0.5), dict(until=2500, t_max=1.0)]),
    # DFlash: the shipped verifier frozen (its embeddings, LM head and hidden states); 4 anchors per
    # problem, each predicting the BLOCK_TOKENS tokens after it in one step.
    "dflash-drafter": dict(objective="dflash", steps=3000, batch_size=32, lr=1e-3, warmup=100, weight_decay=0.1,
                           seed=6, init_from=None, target="verifier", anchors=4),
}

# Default sampling settings, after the first paper's Table 3 (Qwen2.5 verifier; Dream standalone).
SAMPLING = {
    "verifier": dict(temperature=0.7, top_p=0.8, top_k=20),
    "ar-drafter": dict(temperature=0.7, top_p=0.8, top_k=20),
    "masked-drafter": dict(temperature=0.2, top_p=0.95, top_k=0, order="entropy"),
    # first paper's Table 3: SDAR draft; DiffusionGemma anneals 0.8 -> 0.4 (t_first, t_last); DFlash greedy
    "block-drafter": dict(temperature=0.6, top_p=0.95, top_k=20, order="confidence"),
    "uniform-drafter": dict(temperature=(0.8, 0.4), top_p=0.95, top_k=0, order="entropy"),
    "dflash-drafter": dict(temperature=0.0, top_p=1.0, top_k=0),
}

PLANNED = ()  # recipes whose weights are not shipped yet
MODEL_NAMES = tuple(name for name in ARCHITECTURES if name not in PLANNED)  # the shipped models
TRAINABLE = tuple(ARCHITECTURES)  # every recipe: `specdiff zoo train NAME`

DEFAULT_DRAFTER = "masked-drafter"  # the testbed verifier's drafter when none is named (`specdiff.models.default_drafter`)
