"""Training drafters for a user's verifier on its own regenerated conversations (issue 31).

`specdiff distill --verifier V --kind dflash|ar|masked --out DIR` runs `train`. Every kind reads the conversations
of `specdiff distill data` (`zoo_tools.distill_data`) and keep the verifier frozen.

Terms:
- draft vocabulary: the `draft_size` most frequent tokens of the regenerated data (EOS always in), as
  `draft_to_target` [V_d] (d2t: the verifier id of draft row i, EAGLE-3's d2t, FR-Spec's frequency-ranked
  vocabulary). Ties and tokens never seen are ranked by id (a BPE vocabulary's merge order). The drafter's
  head is the verifier's LM head restricted to those rows, so it costs V_d / V of the verifier's head; q is
  0 outside (`specdiff.drafters.base.Drafter.trim`).
- anchor a: the last committed token of a round. A block is [token a, B masks]; it predicts tokens
  a + 1..a + B of the response.

dflash (Chen et al. 2026, DFlash): a `MuseGlimmerAssistantModel` of the verifier's width whose keys and
values also read a projection of the verifier's hidden states at `target_layer_ids` of the tokens before
the anchor; the block is embedded by the verifier's frozen embeddings and read out by the draft vocabulary's
rows of its frozen LM head. specdiff adds the anchor state (`anchor_state`, recorded in the config as
`specdiff_anchor_state`): the projected verifier state of the token before the anchor is added to every
block input, so no position has to find the verifier's latest state by attention
(`specdiff.drafters.dflash`). Loss, per block (DFlash's position weighting, k = 1..B):

    L = sum_k w_k CE(logits_k, x_{a+k}) / sum_k w_k,   w_k = exp(-(k - 1) / gamma)

Several anchors per conversation share one forward: the queries are every block's tokens; block j attends
to the context before its anchor and bidirectionally to itself. The hidden states are computed once per data
shard and cached under `<out>/hidden-<layers>/` (float16; recomputed if missing, never committed).

ar: a small causal LM of the verifier's architecture and width (`ar_layers` of its decoder layers, copied
as a start) with tied, frozen embeddings equal to the verifier's (so only the layers and final norm are
trained and shipped) and the full vocabulary, so that Hugging Face assisted generation can use it as its
assistant. Loss: next-token cross-entropy on `positions` random response positions per conversation (the
full-vocabulary head dominates the cost).

masked (issue 32): a standalone Dream-style masked diffusion drafter with its own (projected) embeddings over
the draft vocabulary; its model and objective are `zoo_tools.distill_masked`'s.

Resumable: every `save_every_s` seconds the trainable weights, the optimiser, the step and the generator
state are written to `<out>/checkpoint.pt` (temporary name, then renamed) with the run's settings; a rerun
resumes there, with those settings, and ends with the same weights as an uninterrupted run.
"""
from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from specdiff.zoo_tools import distill_masked

TARGET_LAYERS = 5  # DFlash reads this many verifier layers, spread evenly: 1, 8, 15, 22, 29 of SmolLM2's 30
DEFAULTS = {
    "dflash": dict(steps=4500, batch=4, anchors=16, lr=2e-3, block=16, gamma=4.0, layers=1, intermediate=1536,
                   anchor_state=True),
    "ar": dict(steps=400, batch=8, lr=1e-3, ar_layers=(0,), positions=64),
    "masked": dict(steps=3000, batch=16, lr=2e-3, block=16, hidden=192, layers=2, heads=3, kv_heads=1,
                   intermediate=640, ar_weight=1.0, positions=64, all_masked=0.25),
}
DRAFT_VOCAB_KINDS = ("dflash", "masked")  # kinds whose head is the draft vocabulary
DRAFT_SIZE = 8192
WARMUP = 50


def draft_vocabulary(conversations, size: int, verifier_vocab: int, always=()) -> np.ndarray:
    """draft_to_target [size] int64, sorted by id: the `size` most frequent response tokens (`always` forced in;
    ties broken by prompt counts, then by id)."""
    counts = np.zeros(verifier_vocab, dtype=np.float64)
    for prompt, response in conversations:
        np.add.at(counts, np.asarray(response, dtype=np.int64), 1.0)
        np.add.at(counts, np.asarray(prompt, dtype=np.int64), 1e-6)  # prompts only break ties
    counts[list(always)] = np.inf
    order = np.lexsort((np.arange(verifier_vocab), -counts))  # by count descending, then id
    return np.sort(order[: min(size, verifier_vocab)])  # sorted ids: d2t is monotone


def train(kind: str, verifier: str, data_dir: str | Path, out: str | Path, steps: int | None = None,
          draft_size: int = DRAFT_SIZE, seed: int = 0, show_progress: bool = True, save_every_s: float = 120.0,
          until_step: int | None = None, shards: int | None = None, **options) -> dict:
    """Trains (or resumes) a `kind` drafter for `verifier` into `out`; writes the final weights there and
    returns a summary (steps, seconds, final loss, draft vocabulary size). until_step: stop there (saved, to
    be resumed: the schedule is still the one of `steps`). shards: train on the first `shards` data shards
    only (default all; a resumed run keeps its own)."""
    from specdiff import models
    from specdiff.progress import progress
    from specdiff.zoo_tools.distill_data import _read_index, load_shards

    if kind not in DEFAULTS:
        raise ValueError(f"unknown drafter kind {kind!r} to distill; choose from {', '.join(DEFAULTS)}")
    settings = {**DEFAULTS[kind], **{k: v for k, v in options.items() if v is not None}}
    settings["steps"] = steps or settings["steps"]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    checkpoint = out / "checkpoint.pt"
    state = torch.load(checkpoint, weights_only=False) if checkpoint.exists() else None
    if state is not None:
        if state["kind"] != kind or state["verifier"] != verifier:
            raise ValueError(f"{checkpoint} is a {state['kind']} drafter for {state['verifier']}, not a {kind} "
                             f"drafter for {verifier}: use another --out")
        settings = {**state.get("settings", settings), "steps": steps or state.get("settings", settings)["steps"]}
    _read_index(Path(data_dir), verifier)  # data written by another verifier is refused, naming both
    settings["shards"] = settings.get("shards", shards)
    conversations = load_shards(data_dir, settings["shards"])
    if not conversations:
        raise ValueError(f"{data_dir} holds no conversations: run `specdiff distill data --verifier {verifier}`")
    target = models.load(verifier).model.float().eval()
    for p in target.parameters():
        p.requires_grad_(False)
    vocab = int(target.config.vocab_size)
    eos = [int(e) for e in np.atleast_1d(target.generation_config.eos_token_id or [])]
    d2t = (draft_vocabulary(conversations, draft_size, vocab, always=eos) if kind in DRAFT_VOCAB_KINDS
           else np.arange(vocab))
    if state is not None:
        d2t = np.asarray(state["d2t"])
    with torch.random.fork_rng():  # the fresh parts' initialisation is a function of the seed
        torch.manual_seed(seed)
        model = _build(kind, target, settings, d2t)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=settings["lr"],
                                  weight_decay=0.01, betas=(0.9, 0.95))
    generator = torch.Generator().manual_seed(seed)
    step, seconds, losses = 0, 0.0, []
    if state is not None:  # a resumed run keeps the settings it started with (the steps may change)
        model.load_state_dict(state["model"], strict=False)
        optimizer.load_state_dict(state["optimizer"])
        generator.set_state(state["generator"])
        step, seconds, losses = state["step"], state["seconds"], state["losses"]
    draft_head = target.get_output_embeddings().weight[torch.as_tensor(d2t)]  # [V_d, H] frozen
    draft_rows = target.get_input_embeddings().weight[torch.as_tensor(d2t)]  # [V_d, H] frozen: the masked drafter's
    to_draft = torch.full((vocab,), -100, dtype=torch.long)
    to_draft[torch.as_tensor(d2t)] = torch.arange(len(d2t))
    layers = list(getattr(model.config, "target_layer_ids", []) or [])
    hidden = _hidden_states(target, layers, data_dir, out / ("hidden-" + "-".join(map(str, layers))),
                            show_progress, settings["shards"]) if kind == "dflash" else None
    bar = progress(total=settings["steps"], initial=step, desc=f"distill {kind}", unit="step",
                   enabled=show_progress, leave=True)
    last_save = time.monotonic()
    model.train()
    while step < min(settings["steps"], until_step or settings["steps"]):
        begin = time.perf_counter()
        lr = settings["lr"] * min(1.0, (step + 1) / WARMUP) * 0.5 * (1 + math.cos(math.pi * step / settings["steps"]))
        for group in optimizer.param_groups:
            group["lr"] = lr
        picks = torch.randint(len(conversations), (settings["batch"],), generator=generator).tolist()
        if kind == "dflash":
            loss = _dflash_loss(model, target, draft_head, to_draft, [conversations[i] for i in picks],
                                [hidden[i] for i in picks], settings, generator)
        elif kind == "masked":
            loss = distill_masked.loss(model, model.specdiff_projection, target.get_input_embeddings().weight,
                                       draft_rows, to_draft, [conversations[i] for i in picks], settings, generator)
        else:
            loss = _ar_loss(model, [conversations[i] for i in picks], generator, settings.get("positions"))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        step += 1
        seconds += time.perf_counter() - begin
        losses.append(float(loss.detach()))
        bar.update()
        bar.set_postfix(loss=f"{np.mean(losses[-50:]):.3f}")
        if time.monotonic() - last_save > save_every_s or step in (settings["steps"], until_step):
            _save_checkpoint(checkpoint, dict(kind=kind, verifier=verifier, model=_trainable_state(model),
                                              optimizer=optimizer.state_dict(), generator=generator.get_state(), settings=settings,
                                              step=step, seconds=seconds, losses=losses, d2t=d2t.tolist()))
            last_save = time.monotonic()
    bar.close()
    summary = dict(kind=kind, verifier=verifier, steps=step, train_seconds=round(seconds, 1),
                   final_loss=round(float(np.mean(losses[-50:])), 4), draft_vocab=len(d2t),
                   conversations=len(conversations), settings={k: v for k, v in settings.items()})
    if step == settings["steps"]:
        _save_drafter(model, kind, verifier, d2t, out, summary, target)
    return summary


def _build(kind: str, target, settings: dict, d2t):
    """A fresh drafter whose trainable parts are started from the verifier where shapes allow."""
    import transformers

    tc = target.config
    if kind == "masked":
        model, projection = distill_masked.build(target, settings, d2t, _mask_token(target))
        model.specdiff_projection = projection  # a parameter of the model: saved, loaded and optimised with it
        return model
    if kind == "dflash":
        config = transformers.MuseGlimmerAssistantConfig(
            hidden_size=tc.hidden_size, intermediate_size=settings["intermediate"],
            num_hidden_layers=settings["layers"], num_attention_heads=tc.num_attention_heads,
            num_key_value_heads=tc.num_key_value_heads, head_dim=tc.hidden_size // tc.num_attention_heads,
            target_layer_ids=target_layers(tc.num_hidden_layers), block_size=settings["block"], mask_token_id=_mask_token(target),
            rms_norm_eps=tc.rms_norm_eps, max_position_embeddings=tc.max_position_embeddings,
            rope_parameters=dict(tc.rope_parameters), layer_types=["full_attention"] * settings["layers"],
            bos_token_id=tc.bos_token_id, eos_token_id=tc.eos_token_id, pad_token_id=tc.pad_token_id)
        config.specdiff_anchor_state = bool(settings.get("anchor_state", False))
        model = transformers.MuseGlimmerAssistantModel(config)
        if not settings.get("init_from_verifier", True):
            return model.float()
        with torch.no_grad():  # the verifier's last layers as a start; the context projection reads its last layer
            for i, layer in enumerate(model.layers):
                source = target.model.layers[tc.num_hidden_layers - len(model.layers) + i]
                _copy_matching(layer, source)
            model.norm.weight.copy_(target.model.norm.weight)
            fc = model.encoder.fc.weight
            fc.mul_(0.1)
            fc[:, -tc.hidden_size:] += torch.eye(tc.hidden_size)
        return model.float()
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


def target_layers(depth: int) -> list[int]:
    """TARGET_LAYERS layer indices of a `depth`-layer verifier, evenly spread from 1 to the last."""
    return sorted({int(round(x)) for x in np.linspace(min(1, depth - 1), depth - 1, TARGET_LAYERS)})


def _copy_matching(layer, source) -> None:
    """Copies every parameter of `source` whose name and shape `layer` shares."""
    theirs = source.state_dict()
    for name, value in layer.state_dict().items():
        if name in theirs and theirs[name].shape == value.shape:
            value.copy_(theirs[name])


def _mask_token(target) -> int:
    """A special token the chat never uses, as DFlash's mask (its embedding is frozen: only a marker)."""
    return int(getattr(target.config, "specdiff_mask_token_id", None) or 4)


def _hidden_states(target, layers, data_dir, folder: Path, show_progress: bool,
                   shards: int | None = None) -> list[torch.Tensor]:
    """Per conversation [L, len(layers) * H] float16: the verifier's hidden states (cached per shard)."""
    from specdiff.progress import progress
    from specdiff.zoo_tools.distill_data import _read_index

    folder.mkdir(parents=True, exist_ok=True)
    records = _read_index(Path(data_dir), None)["shards"][:shards]
    states = []
    for shard in progress(records, desc="verifier hidden states", unit="shard", enabled=show_progress, leave=True):
        path = folder / (Path(shard["file"]).stem + ".pt")
        if not path.exists():
            data = np.load(Path(data_dir) / shard["file"])
            tokens, lengths = data["tokens"].astype(np.int64), data["prompt_lengths"] + data["response_lengths"]
            rows, start = [], 0
            for n in lengths:
                rows.append(tokens[start:start + int(n)])
                start += int(n)
            computed = []
            with torch.inference_mode():
                for i in range(0, len(rows), 8):
                    chunk = rows[i:i + 8]
                    width = max(len(r) for r in chunk)
                    ids = torch.zeros(len(chunk), width, dtype=torch.long)
                    mask = torch.zeros(len(chunk), width, dtype=torch.long)
                    for j, r in enumerate(chunk):
                        ids[j, :len(r)], mask[j, :len(r)] = torch.as_tensor(r), 1
                    out = target(input_ids=ids, attention_mask=mask, output_hidden_states=True, logits_to_keep=1)
                    both = torch.cat([out.hidden_states[k + 1] for k in layers], dim=-1).half()
                    computed += [both[j, :len(r)].clone() for j, r in enumerate(chunk)]
            partial = path.with_suffix(".partial")
            torch.save(computed, partial)
            os.replace(partial, path)
        states += torch.load(path)
    return states


def _dflash_loss(model, target, draft_head, to_draft, conversations, hidden, settings, generator) -> torch.Tensor:
    """The module docstring's weighted cross-entropy over `anchors` blocks of each conversation."""
    logits, targets = _dflash_logits(model, target, draft_head, to_draft, conversations, hidden, settings, generator)
    predicted = settings["block"] - 1  # DFlash's block counts the anchor
    weights = torch.exp(-torch.arange(predicted, dtype=torch.float) / settings["gamma"]).expand_as(targets)
    weights = weights * (targets >= 0)
    losses = F.cross_entropy(logits.flatten(0, 2), targets.flatten(), ignore_index=-100, reduction="none")
    return (losses * weights.flatten()).sum() / weights.sum().clamp(min=1)


def _dflash_logits(model, target, draft_head, to_draft, conversations, hidden, settings, generator, anchors_at=None):
    """(logits [b, A, B, V_d], targets [b, A, B] draft-vocabulary indices, -100 where none) of `anchors` random
    blocks per conversation (or at anchors_at [b, A]), all in one forward."""
    block, anchors = settings["block"], settings["anchors"]
    rows = [torch.as_tensor(p + r) for p, r in conversations]
    width = max(len(r) for r in rows)
    batch = len(rows)
    size = hidden[0].shape[-1]
    context = torch.zeros(batch, width, size)
    starts = torch.zeros(batch, anchors, dtype=torch.long)
    for b, ((prompt, response), states) in enumerate(zip(conversations, hidden)):
        context[b, :len(states)] = states.float()
        low, high = len(prompt) - 1, len(prompt) + len(response) - 2  # anchor a predicts a + 1.. (in the response)
        starts[b] = low + torch.randint(max(high - low + 1, 1), (anchors,), generator=generator)
    if anchors_at is not None:
        starts = torch.as_tensor(anchors_at).view(batch, anchors)
    offsets = torch.arange(block)
    positions = starts[:, :, None] + offsets  # [b, A, block]
    ids = torch.stack([torch.nn.functional.pad(r, (0, width + block - len(r)), value=-1) for r in rows])  # [b, W+block]
    gathered = ids.gather(1, positions.flatten(1)).view(batch, anchors, block)  # [b, A, block], -1 beyond the end
    noise_ids = torch.full_like(gathered, model.config.mask_token_id)
    noise_ids[:, :, 0] = gathered[:, :, 0]
    embed = target.get_input_embeddings()
    noise = embed(noise_ids.flatten(1))  # [b, A * block, H]
    if getattr(model.config, "specdiff_anchor_state", False):  # + the projected state of the token before the anchor
        before = context.gather(1, (starts - 1).clamp(min=0)[:, :, None].expand(-1, -1, size))  # [b, A, W_h]
        noise = noise + model.encoder(before).repeat_interleave(block, dim=1)  # [b, A * block, H]
    lengths = torch.tensor([len(r) for r in rows])
    columns = torch.arange(width)
    context_keys = (columns[None, None, :] < starts[:, :, None]) & (columns[None, None, :] < lengths[:, None, None])
    own = torch.eye(anchors, dtype=torch.bool)[None, :, :, None].expand(batch, anchors, anchors, block)  # [b, A, A, block]
    keys = torch.cat([context_keys, own.flatten(2)], dim=2)  # [b, A, W + A * block]
    attend = keys[:, :, None, :].expand(batch, anchors, block, keys.shape[-1]).reshape(batch, 1, anchors * block, -1)
    position_ids = torch.cat([columns.expand(batch, width), positions.flatten(1)], dim=1)
    out = model(noise_embeds=noise, context_hidden_states=context, position_ids=position_ids,
                attention_mask={t: attend for t in set(model.config.layer_types)})
    states = out.last_hidden_state.view(batch, anchors, block, -1)[:, :, 1:]  # [b, A, B, H]
    logits = states @ draft_head.T  # [b, A, B, V_d]
    targets = gathered[:, :, 1:]
    targets = torch.where(targets >= 0, to_draft[targets.clamp(min=0)], -100)  # out of vocabulary: no loss
    return logits, targets


def _ar_loss(model, conversations, generator=None, positions: int | None = None) -> torch.Tensor:
    """Next-token cross-entropy on the responses (prompt tokens are context only); with `positions`, on that
    many random response positions per conversation (the full-vocabulary head dominates the cost)."""
    rows = [p + r for p, r in conversations]
    width = max(len(r) for r in rows)
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for b, (prompt, response) in enumerate(conversations):
        n = len(prompt) + len(response)
        ids[b, :n] = torch.as_tensor(prompt + response)
        labels[b, len(prompt):n] = torch.as_tensor(response)
        mask[b, :n] = 1
    hidden = model.model(input_ids=ids, attention_mask=mask).last_hidden_state[:, :-1]  # [b, L - 1, H]
    labels = labels[:, 1:]  # [b, L - 1]: the token each position predicts
    if positions is not None:
        keep = torch.zeros_like(labels, dtype=torch.bool)
        for b in range(len(rows)):
            valid = (labels[b] >= 0).nonzero().squeeze(-1)
            chosen = valid[torch.randperm(len(valid), generator=generator)[:positions]]
            keep[b, chosen] = True
        hidden, labels = hidden[keep], labels[keep]  # [n, H], [n]
    logits = model.lm_head(hidden)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)


def _trainable_state(model) -> dict:
    names = {n for n, p in model.named_parameters() if p.requires_grad}
    return {n: v.detach().clone() for n, v in model.state_dict().items() if n in names}


def _save_checkpoint(path: Path, state: dict) -> None:
    partial = path.with_suffix(".partial")
    torch.save(state, partial)
    os.replace(partial, path)


def _save_drafter(model, kind: str, verifier: str, d2t: np.ndarray, out: Path, summary: dict, target) -> None:
    """config.json + model.safetensors (trainable weights only, float16) + draft_vocab.json."""
    from safetensors.torch import save_file

    from specdiff.zoo.distilled import fingerprint

    config = model.config.to_dict()
    config.update(specdiff_role=f"distilled-{kind}", specdiff_target=verifier, specdiff_target_fingerprint=fingerprint(target),
                  specdiff_shared_from_target=["embeddings", "lm_head"] if kind in DRAFT_VOCAB_KINDS else ["embeddings"])
    if kind in ("ar", "masked"):
        config["architectures"] = [type(model).__name__]
    weights = {n: v.to(torch.float16).contiguous() for n, v in _trainable_state(model).items()}
    save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    if kind in DRAFT_VOCAB_KINDS:
        (out / "draft_vocab.json").write_text(json.dumps({"draft_to_target": [int(i) for i in d2t]},
                                                         separators=(",", ":")) + "\n")
    (out / "training.json").write_text(json.dumps(summary, indent=2) + "\n")
