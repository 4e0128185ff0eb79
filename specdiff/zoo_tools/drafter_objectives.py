"""Models and training objectives of the block, uniform and DFlash zoo drafters (`zoo_tools/train.py` runs
them; `zoo/configs.py` holds the recipes).

- `block_loss` (SDAR / BD3-LM, Arriola et al. 2025, at one block per sequence): a cut c in the answer;
  the block [c, c + B) is masked at ratio t ~ U(eps, 1) (at least one token); the prefix attends
  causally (as the drafter caches it), the block to the prefix and bidirectionally to itself, nothing
  after the block is seen. Dream's shift (the drafter starts from an autoregressive model): the logit at
  j - 1 predicts token j. Loss: 1/t-weighted cross-entropy on the masked block tokens.
- `uniform_loss` (uniform diffusion, Austin et al. 2021, Sahoo et al. 2025; DiffusionGemma's
  encoder-decoder): the encoder reads `bos prompt answer[:c]` causally into a KV cache; the decoder
  denoises answer[c:c + B] (eos-padded) after each position was replaced by a uniform random token with
  probability t; cross-entropy on every block position. Self-conditioning: on a share of the batches a
  first no-grad pass gives the logits the second pass is conditioned on.
- `uniform_block_loss` (uniform diffusion on the block drafter's attention pattern; the zoo's shipped
  uniform drafter): a Qwen3 backbone with Dream's shift, the prefix `bos prompt answer[:c]` causal (as
  the drafter caches it), the block answer[c:c + B] (eos-padded to B) attending to the prefix and
  bidirectionally to itself; each block token is replaced by a uniform random token of the vocabulary
  with probability t ~ U(t_min, t_max) (a noise curriculum: the stage sets the range); on a
  `suffix_prob` share of the rows a random cut inside the block keeps the tokens before it clean and
  noises every token from it on (left-to-right decoding's states). Cross-entropy on every block position (noised ones
  weighted `noised_weight`, clean ones 1: copying and correcting are both learned).
- `dflash_loss` (Chen et al. 2026): the frozen verifier's hidden states at `target_layer_ids` of the
  tokens before an anchor a condition one pass over [token a, B masks], embedded and read out by the
  verifier's own embeddings and LM head; cross-entropy on answer tokens a + 1..a + B, several anchors
  per problem.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from specdiff.zoo import configs

MASK_EPS = 1e-3


def build_model(name: str, tokenizer):
    """A fresh (randomly initialised) block, uniform or DFlash zoo drafter."""
    import transformers

    arch, common = dict(configs.ARCHITECTURES[name]), configs.COMMON_ARCHITECTURE
    special = dict(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                   pad_token_id=tokenizer.pad_token_id)
    if name == "uniform-drafter":
        text = dict(vocab_size=len(tokenizer), max_position_embeddings=common["max_position_embeddings"],
                    rms_norm_eps=common["rms_norm_eps"], **special, **arch)
        vision = dict(model_type="gemma4_vision", hidden_size=8, intermediate_size=8, num_hidden_layers=1,
                      num_attention_heads=1, num_key_value_heads=1, head_dim=8, position_embedding_size=4,
                      patch_size=2)  # unused (text only), as small as the class allows
        config = transformers.DiffusionGemmaConfig(text_config=text, vision_config=vision,
                                                   canvas_length=configs.BLOCK_TOKENS)
        model_class = transformers.DiffusionGemmaForBlockDiffusion
    elif name == "dflash-drafter":
        config = transformers.MuseGlimmerAssistantConfig(
            mask_token_id=tokenizer.mask_token_id, max_position_embeddings=common["max_position_embeddings"],
            rope_parameters=dict(rope_type="default", rope_theta=common["rope_theta"]),
            rms_norm_eps=common["rms_norm_eps"], **special, **arch)
        config.specdiff_target = configs.TRAINING[name]["target"]  # the verifier it was trained for
        model_class = transformers.MuseGlimmerAssistantModel
    else:
        raise ValueError(f"{name!r} is not built here (Qwen3 recipes: zoo.train.model_config)")
    config.specdiff_role = name
    return model_class(config)


def _cuts(lengths: torch.Tensor, starts: torch.Tensor, generator) -> torch.Tensor:
    """A position in [start, length - 1] per row (the first block token, or anchor + 1)."""
    span = (lengths - starts).clamp(min=1)
    return starts + (torch.rand(len(lengths), generator=generator) * span).long().clamp(max=span - 1)


def _rows(problems, tokenizer) -> tuple[list[list[int]], torch.Tensor]:
    """`bos prompt answer eos` per problem, and each answer's first index [b]."""
    rows, starts = [], []
    for p in problems:
        prompt = tokenizer(p.prompt).input_ids
        rows.append(prompt + tokenizer(p.answer, add_special_tokens=False).input_ids + [tokenizer.eos_token_id])
        starts.append(len(prompt))
    return rows, torch.tensor(starts)


def _right_padded(rows: list[list[int]], pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """ids [b, L] right-padded with pad_token_id, each row's length [b], and the key mask [b, L]."""
    lengths = torch.tensor([len(r) for r in rows])
    length = int(lengths.max())
    ids = torch.tensor([r + [pad_token_id] * (length - len(r)) for r in rows])
    return ids, lengths, torch.arange(length)[None, :] < lengths[:, None]


def block_loss(model, problems, tokenizer, generator, block_tokens: int) -> torch.Tensor:
    """SDAR-style block diffusion loss (module docstring) for a Qwen3 backbone with Dream's shift."""
    rows, starts = _rows(problems, tokenizer)
    x0, lengths, _ = _right_padded(rows, tokenizer.pad_token_id)  # [b, L]
    length = x0.shape[1]
    cut = _cuts(lengths, starts, generator)[:, None]  # [b, 1]
    column = torch.arange(length)[None, :]
    block = (column >= cut) & (column < cut + block_tokens) & (column < lengths[:, None])  # [b, L]
    t = MASK_EPS + (1 - MASK_EPS) * torch.rand(len(rows), 1, generator=generator)
    masked = block & (torch.rand(x0.shape, generator=generator) < t)
    masked |= column == cut  # at least one
    tokens = torch.where(masked, torch.full_like(x0, tokenizer.mask_token_id), x0)
    query, key = column[..., None], column[:, None, :]  # [1, L, 1], [1, 1, L]
    in_block_q, in_block_k = block[:, :, None], block[:, None, :]
    allowed = ((key <= query) & (key < cut[..., None])) | (in_block_q & in_block_k) | (key == query)
    allowed &= (column < lengths[:, None])[:, None, :]
    logits = model(input_ids=tokens, attention_mask=allowed[:, None], position_ids=column.expand_as(x0)).logits
    ce = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), x0[:, 1:].flatten(), reduction="none")
    weight = (masked / t)[:, 1:].flatten()
    return (ce * weight).sum() / block.sum()


def uniform_block_loss(model, problems, tokenizer, generator, block_tokens: int, t_min: float = MASK_EPS,
                       t_max: float = 1.0, suffix_prob: float = 0.0, noised_weight: float = 1.0,
                       targets: list[list[int]] | None = None) -> torch.Tensor:
    """Uniform diffusion loss on a block after a random cut, block-causal attention, Dream's shift (module
    docstring). targets: answer token rows to train on instead of the problems' references (the
    verifier's own samples: on-policy distillation), one per problem."""
    if targets is None:
        rows, starts = _rows(problems, tokenizer)
    else:
        rows, starts = [], []
        for p, answer in zip(problems, targets):
            prompt = tokenizer(p.prompt).input_ids
            rows.append(prompt + list(answer) + [tokenizer.eos_token_id])
            starts.append(len(prompt))
        starts = torch.tensor(starts)
    lengths = torch.tensor([len(r) for r in rows])
    cut = _cuts(lengths, starts, generator)  # [b]: the first block token, inside answer + eos
    rows = [r + [tokenizer.eos_token_id] * block_tokens for r in rows]  # the block is eos-padded to B
    x0, _, _ = _right_padded([r[:c + block_tokens] for r, c in zip(rows, cut.tolist())], tokenizer.pad_token_id)
    length = x0.shape[1]
    ends = cut + block_tokens  # [b]
    column = torch.arange(length)[None, :]
    block = (column >= cut[:, None]) & (column < ends[:, None])  # [b, L]
    batch = len(rows)
    t = t_min + (t_max - t_min) * torch.rand(batch, 1, generator=generator)  # [b, 1]
    noised = block & (torch.rand(x0.shape, generator=generator) < t)
    if suffix_prob > 0:
        offset = (torch.rand(batch, 1, generator=generator) * block_tokens).long()  # [b, 1] in 0..B-1
        use = torch.rand(batch, 1, generator=generator) < suffix_prob
        suffix = block & (column >= cut[:, None] + offset)
        noised = torch.where(use, suffix, noised)
    vocab = model.config.get_text_config().vocab_size
    tokens = torch.where(noised, torch.randint(0, vocab, x0.shape, generator=generator), x0)
    query, key = column[..., None], column[:, None, :]  # [1, L, 1], [1, 1, L]
    in_block_q, in_block_k = block[:, :, None], block[:, None, :]
    allowed = ((key <= query) & (key < cut[:, None, None])) | (in_block_q & in_block_k) | (key == query)
    allowed &= (column < ends[:, None])[:, None, :]
    logits = model(input_ids=tokens, attention_mask=allowed[:, None], position_ids=column.expand_as(x0)).logits
    ce = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), x0[:, 1:].flatten(), reduction="none")
    weight = torch.where(noised, noised_weight, 1.0)[:, 1:] * block[:, 1:]
    return (ce * weight.flatten()).sum() / block.sum()


def _causal_masks(key_mask: torch.Tensor, types) -> dict:
    """{layer type: [b, 1, L, L]} causal over a left-padded key mask (each query sees itself)."""
    length = key_mask.shape[1]
    lower = torch.ones(length, length, dtype=torch.bool).tril()
    mask = (lower[None] & key_mask[:, None, :]) | torch.eye(length, dtype=torch.bool)[None]
    return {kind: mask[:, None] for kind in types}


def uniform_loss(model, problems, tokenizer, generator, block_tokens: int, self_conditioning_prob: float = 0.5,
                 ar_weight: float = 1.0, noised_weight: str = "one") -> torch.Tensor:
    """DiffusionGemma-style uniform diffusion loss plus the encoder's next-token loss (module docstring).
    noised_weight: "one", every block position's cross-entropy counts once; "inverse_t", a noised
    position's counts 1/t (MDLM's weighting: low-noise canvases, the drafter's last steps, weigh most),
    a clean one's once."""
    from transformers import DynamicCache

    from specdiff.lm.masks import position_ids

    rows, starts = _rows(problems, tokenizer)
    lengths = torch.tensor([len(r) for r in rows])
    cut = _cuts(lengths, starts, generator)
    prefix_rows = [r[:c] for r, c in zip(rows, cut.tolist())]
    width = max(map(len, prefix_rows))
    prefix = torch.tensor([[tokenizer.pad_token_id] * (width - len(r)) + r for r in prefix_rows])  # left-padded
    prefix_mask = torch.tensor([[False] * (width - len(r)) + [True] * len(r) for r in prefix_rows])
    x0 = torch.tensor([(r[c:c + block_tokens] + [tokenizer.eos_token_id] * block_tokens)[:block_tokens]
                       for r, c in zip(rows, cut.tolist())])  # [b, B]
    vocab = model.config.get_text_config().vocab_size
    t = MASK_EPS + (1 - MASK_EPS) * torch.rand(len(rows), 1, generator=generator)
    noised = torch.rand(x0.shape, generator=generator) < t  # [b, B]
    noisy = torch.where(noised, torch.randint(0, vocab, x0.shape, generator=generator), x0)
    types = set(model.config.get_text_config().layer_types)
    full = torch.cat([prefix_mask, torch.ones_like(x0, dtype=torch.bool)], dim=1)
    positions = position_ids(full)
    decoder_masks = {kind: full[:, None, None, :].expand(-1, 1, block_tokens, -1) for kind in types}

    def forward(conditioning):
        return model(input_ids=prefix, attention_mask=_causal_masks(prefix_mask, types), cache=DynamicCache(),
                     position_ids=positions[:, :width], decoder_input_ids=noisy, decoder_attention_mask=decoder_masks,
                     decoder_position_ids=positions[:, width:], self_conditioning_logits=conditioning).logits

    conditioning = None
    if float(torch.rand(1, generator=generator)) < self_conditioning_prob:
        with torch.no_grad():
            conditioning = forward(None)
    ce = F.cross_entropy(forward(conditioning).flatten(0, 1).float(), x0.flatten(), reduction="none").view(x0.shape)
    weight = torch.where(noised, 1 / t, torch.ones_like(t)) if noised_weight == "inverse_t" else torch.ones_like(ce)
    loss = (ce * weight).mean()
    if ar_weight > 0:  # the encoder as a causal LM over the whole problem (weights shared with the decoder)
        loss = loss + ar_weight * encoder_ar_loss(model, problems, tokenizer)
    return loss


def encoder_ar_loss(model, problems, tokenizer) -> torch.Tensor:
    """Next-token cross-entropy on the answer (and eos) of DiffusionGemma's causal encoder, read out by the
    shared LM head with its final logit soft-capping: the dense causal signal the uniform drafter learns from."""
    from transformers import DynamicCache

    rows, starts = _rows(problems, tokenizer)
    ids, lengths, key_mask = _right_padded(rows, tokenizer.pad_token_id)  # [b, L]
    length = ids.shape[1]
    types = set(model.config.get_text_config().layer_types)
    hidden = model.model.encoder(input_ids=ids, attention_mask=_causal_masks(key_mask, types),
                                 cache=DynamicCache()).last_hidden_state
    cap = model.final_logit_softcapping
    logits = torch.tanh(model.lm_head(hidden).float() / cap) * cap if cap else model.lm_head(hidden).float()
    labels = torch.where(key_mask & (torch.arange(length)[None, :] >= starts[:, None]), ids, -100)
    return F.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), ignore_index=-100)


def dflash_loss(model, target, problems, tokenizer, generator, block_tokens: int, anchors: int = 4) -> torch.Tensor:
    """DFlash loss (module docstring): `target` is the frozen verifier (a causal LM)."""
    rows, starts = _rows(problems, tokenizer)
    ids, lengths, key_mask = _right_padded(rows, tokenizer.pad_token_id)  # [b, L]
    length = ids.shape[1]
    with torch.no_grad():
        states = target(input_ids=ids, attention_mask=key_mask.long(), output_hidden_states=True).hidden_states
        context = torch.cat([states[i + 1] for i in model.config.target_layer_ids], dim=-1)  # [b, L, W]
        embed = target.get_input_embeddings()
    batch = len(rows)
    index = torch.arange(batch).repeat_interleave(anchors)  # [R]
    anchor = _cuts(lengths[index] - 1, starts[index] - 1, generator)  # [R] in [start - 1, length - 2]
    offsets = torch.arange(block_tokens + 1)[None, :]
    block_ids = torch.full((len(index), block_tokens + 1), tokenizer.mask_token_id)
    block_ids[:, 0] = ids[index, anchor]
    targets_at = anchor[:, None] + offsets[:, 1:]  # [R, B]
    valid = targets_at < lengths[index][:, None]
    targets = torch.where(valid, ids[index].gather(1, targets_at.clamp(max=length - 1)), -100)
    columns = torch.arange(length)[None, :]
    context_keys = (columns < anchor[:, None]) & key_mask[index]  # [R, L]
    keys = torch.cat([context_keys, torch.ones(len(index), block_tokens + 1, dtype=torch.bool)], dim=1)
    attend = keys[:, None, None, :].expand(-1, 1, block_tokens + 1, -1)
    types = set(model.config.layer_types)
    positions = torch.cat([columns.expand(len(index), -1), anchor[:, None] + offsets], dim=1)
    out = model(noise_embeds=embed(block_ids), context_hidden_states=context[index], position_ids=positions,
                attention_mask={kind: attend for kind in types})
    logits = target.get_output_embeddings()(out.last_hidden_state[:, 1:])  # [R, B, V]
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=-100)
