"""Fresh models for every recipe: the testbed's (`zoo_model`) and a verifier's distilled drafters (`drafter`).

Distilled kinds (terms in `training.distill`):
- dflash: a `MuseGlimmerAssistantModel` of the verifier's width (Chen et al. 2026), its layers started from the
  verifier's last ones, the context projection reading the verifier's last layer;
- ar: a causal LM of the verifier's architecture, `ar_layers` of its layers copied, embeddings tied and frozen;
- masked: a standalone Dream-style drafter (Ye et al. 2025): a small `Qwen3ForCausalLM` with bidirectional
  attention, Dream's shift and a mask token, whose tables are the verifier's frozen embeddings E [V, H] through a
  trained projection P [H, d], tied in and out (`objectives.heads`): embed(x) = E[x] P, head = E[d2t] P. P starts
  at the top-d principal directions of E[d2t], scaled so that the head's entries have standard deviation d^-1/2.
"""
from __future__ import annotations

import numpy as np
import torch

from specdiff.drafters import registry
from specdiff.drafters.dflash import add_markov_head
from specdiff.zoo import configs

TARGET_LAYERS = 5  # DFlash reads this many verifier layers, spread evenly: 1, 8, 15, 22, 29 of SmolLM2's 30


def zoo_model(name: str, tokenizer):
    """A fresh (randomly initialised) testbed model `name` of `zoo.configs`, built for its recipe's objective."""
    objective = configs.TRAINING[name]["objective"]
    if objective not in ZOO_BUILDERS:
        raise ValueError(f"{name!r}: no model for objective {objective!r}")
    return ZOO_BUILDERS[objective](name, tokenizer)


def _zoo_dflash(name: str, tokenizer):
    """A `MuseGlimmerAssistantModel` of the testbed's common architecture."""
    import transformers

    common = configs.COMMON_ARCHITECTURE
    config = transformers.MuseGlimmerAssistantConfig(
        mask_token_id=tokenizer.mask_token_id, max_position_embeddings=common["max_position_embeddings"],
        rope_parameters=dict(rope_type="default", rope_theta=common["rope_theta"]),
        rms_norm_eps=common["rms_norm_eps"], **_special_tokens(tokenizer), **configs.ARCHITECTURES[name])
    config.specdiff_target = configs.TRAINING[name]["target"]  # the verifier it was trained for
    config.specdiff_role = name
    return transformers.MuseGlimmerAssistantModel(config)


def _zoo_qwen(name: str, tokenizer, bidirectional: bool = False, block_size: bool = False):
    """A `Qwen3ForCausalLM`: causal (AR), or bidirectional with Dream's shift and a mask token (diffusion);
    block_size: SDAR's field, the trained block length, written into the config."""
    import transformers

    config = transformers.Qwen3Config(vocab_size=len(tokenizer), **_special_tokens(tokenizer),
                                      **configs.COMMON_ARCHITECTURE, **configs.ARCHITECTURES[name])
    if bidirectional:
        config.is_causal = False  # documentation for loaders; the drafter also passes a full 4D mask
        config.mask_token_id = tokenizer.mask_token_id
        config.logits_shift = 1  # Dream: logit at position i predicts token i + 1
    if block_size:
        config.block_size = configs.TRAINING[name]["block_tokens"]
    config.specdiff_role = name
    return transformers.Qwen3ForCausalLM(config)


def _special_tokens(tokenizer) -> dict:
    return dict(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                pad_token_id=tokenizer.pad_token_id)


# A testbed recipe's objective -> the model it trains (`zoo.configs.TRAINING[name]["objective"]`).
ZOO_BUILDERS = {
    "ar": _zoo_qwen,
    "mdlm": lambda name, tokenizer: _zoo_qwen(name, tokenizer, bidirectional=True),
    "block": lambda name, tokenizer: _zoo_qwen(name, tokenizer, bidirectional=True, block_size=True),
    "uniform_block": lambda name, tokenizer: _zoo_qwen(name, tokenizer, bidirectional=True),
    "dflash": _zoo_dflash,
}


def drafter(kind: str, target, settings: dict, d2t: np.ndarray, mask_token_id: int):
    """A fresh distilled drafter of `kind` for the frozen verifier `target` (module docstring)."""
    role = distilled_role(kind, DRAFTERS)
    if role is None:
        raise ValueError(f"no distilled drafter of kind {kind!r}; choose from {', '.join(kind_names(DRAFTERS))}")
    return DRAFTERS[role](target, settings, d2t, mask_token_id)


def distilled_role(kind: str, table: dict) -> str | None:
    """The distilled role of the kind named `kind` (`KindSpec.distilled_role`, "distilled-dflash") when `table`, a
    table keyed by distilled role, has it; None otherwise (an unknown kind, an alias, or a kind not distilled)."""
    spec = registry.find(kind)
    if spec is None or spec.name != kind or spec.distilled_role not in table:
        return None
    return spec.distilled_role


def kind_names(table: dict) -> list[str]:
    """The kind names of a table keyed by distilled role, in the table's order (for error messages)."""
    return [registry.by_distilled_role(role).name for role in table]


def _dflash(target, settings: dict, d2t, mask_token_id: int):
    """The DFlash drafter: the verifier's width, its last layers as a start, the context projection reading its
    last layer."""
    import transformers

    tc = target.config
    config = transformers.MuseGlimmerAssistantConfig(
        hidden_size=tc.hidden_size, intermediate_size=settings["intermediate"],
        num_hidden_layers=settings["layers"], num_attention_heads=tc.num_attention_heads,
        num_key_value_heads=tc.num_key_value_heads, head_dim=tc.hidden_size // tc.num_attention_heads,
        target_layer_ids=target_layers(tc.num_hidden_layers, settings.get("features", "outputs")),
        block_size=max([settings["block"], *(settings.get("widths") or [])]),
        mask_token_id=mask_token_id, rms_norm_eps=tc.rms_norm_eps, max_position_embeddings=tc.max_position_embeddings,
        rope_parameters=dict(tc.rope_parameters), layer_types=["full_attention"] * settings["layers"],
        bos_token_id=tc.bos_token_id, eos_token_id=tc.eos_token_id, pad_token_id=tc.pad_token_id)
    config.specdiff_anchor_state = bool(settings.get("anchor_state", False))
    config.sample_from_anchor = bool(settings.get("read_anchor", False))  # DSpark: the anchor's slot predicts a + 1
    config.markov_rank = int(settings.get("markov_rank", 0) or 0)
    if settings.get("widths"):  # trained at several block widths (`specdiff.drafters.dflash`, "Width")
        config.specdiff_trained_widths = sorted({int(w) for w in settings["widths"]})
    model = transformers.MuseGlimmerAssistantModel(config)
    if config.markov_rank:
        add_markov_head(model, config.markov_rank, len(d2t))
    if not settings.get("init_from_verifier", True):
        return model.float()
    with torch.no_grad():
        for i, layer in enumerate(model.layers):
            _copy_matching(layer, target.model.layers[tc.num_hidden_layers - len(model.layers) + i])
        model.norm.weight.copy_(target.model.norm.weight)
        fc = model.encoder.fc.weight
        fc.mul_(0.1)
        fc[:, -tc.hidden_size:] += torch.eye(tc.hidden_size)
    return model.float()


def _ar(target, settings: dict, d2t, mask_token_id: int):
    """The AR drafter: a causal LM of the verifier's architecture, `ar_layers` of its layers copied, embeddings
    tied and frozen."""
    import transformers

    tc = target.config
    config = transformers.AutoConfig.for_model(**{**tc.to_dict(), "num_hidden_layers": len(settings["ar_layers"]),
                                                  "tie_word_embeddings": True})
    config.layer_types = None if not hasattr(tc, "layer_types") else ["full_attention"] * len(settings["ar_layers"])
    model = transformers.AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        model.model.embed_tokens.weight.copy_(target.model.embed_tokens.weight)
        for layer, source in zip(model.model.layers, settings["ar_layers"]):
            layer.load_state_dict(target.model.layers[source].state_dict())
        model.model.norm.weight.copy_(target.model.norm.weight)
    model.model.embed_tokens.weight.requires_grad_(False)  # tied: the head too; equal to the verifier's
    return model.float()


def target_layers(depth: int, features: str = "outputs") -> list[int]:
    """TARGET_LAYERS layer indices of a `depth`-layer verifier, evenly spread from 1. features "outputs": to the
    last layer, whose output (`hidden_states[depth]`) is the final-normed one; "inputs": to the last layer's input
    (`hidden_states[depth - 1]`), so that every feature is a decoder layer's input, as z-lab's DFlash and
    llama.cpp's graph read them."""
    last = depth - 1 if features == "outputs" else depth - 2
    return sorted({int(round(x)) for x in np.linspace(min(1, last), last, TARGET_LAYERS)})


def _masked(target, settings: dict, d2t, mask_token_id: int):
    """The masked drafter: lm_head [V_d, d] (recomputed from P, as the embeddings), P `specdiff_projection`, and
    the verifier's tables as non-persistent buffers (never saved: `specdiff.zoo.distilled` rebuilds them)."""
    import transformers

    tc, hidden = target.config, settings["hidden"]
    config = transformers.Qwen3Config(
        vocab_size=tc.vocab_size, hidden_size=hidden, num_hidden_layers=settings["layers"],
        num_attention_heads=settings["heads"], num_key_value_heads=settings["kv_heads"],
        head_dim=hidden // settings["heads"], intermediate_size=settings["intermediate"],
        max_position_embeddings=tc.max_position_embeddings, rope_parameters=dict(tc.rope_parameters),
        rms_norm_eps=tc.rms_norm_eps, tie_word_embeddings=False, bos_token_id=tc.bos_token_id,
        eos_token_id=tc.eos_token_id, pad_token_id=tc.pad_token_id)
    config.mask_token_id, config.logits_shift, config.is_causal = int(mask_token_id), 1, False
    model = transformers.Qwen3ForCausalLM(config)
    model.lm_head = torch.nn.Linear(hidden, len(d2t), bias=False)
    model.model.embed_tokens.weight.requires_grad_(False)
    model.lm_head.weight.requires_grad_(False)
    embeddings = target.get_input_embeddings().weight.detach().float()  # [V, H]
    rows = embeddings[torch.as_tensor(d2t)]  # [V_d, H]
    _, _, directions = torch.linalg.svd(rows - rows.mean(0), full_matrices=False)  # [H, H]
    projection = directions[:hidden].T.contiguous()  # [H, d]
    projection /= (rows @ projection).std() * hidden ** 0.5  # logits of unit-RMS states start at std ~1
    model = model.float()
    model.specdiff_projection = torch.nn.Parameter(projection)  # saved, loaded and optimised with the model
    to_draft = torch.full((len(embeddings),), -100, dtype=torch.long)
    to_draft[torch.as_tensor(d2t)] = torch.arange(len(d2t))
    for name, value in (("specdiff_source_embeddings", embeddings), ("specdiff_source_head", rows),
                        ("specdiff_to_draft", to_draft)):
        model.register_buffer(name, value, persistent=False)
    return model


def _copy_matching(layer, source) -> None:
    """Copies every parameter of `source` whose name and shape `layer` shares."""
    theirs = source.state_dict()
    for name, value in layer.state_dict().items():
        if name in theirs and theirs[name].shape == value.shape:
            value.copy_(theirs[name])


# A distilled kind's role (`KindSpec.distilled_role`) -> its fresh model (`specdiff distill --kind`).
DRAFTERS = {"distilled-dflash": _dflash, "distilled-ar": _ar, "distilled-masked": _masked}
