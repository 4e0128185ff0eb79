"""What speculative generation is compared against, on the same prompts and sampling settings:

- `autoregressive_generate`: plain decoding of the verifier with its KV cache, one token per
  forward, the minimal loop (prefill, then sample and feed one token at a time), with the same
  sampling code (`lm.sampling`) as the speculative engine, so that neither side gains from it;
- `verifier_generate`: the same plain decoding through a `Verifier`'s own rounds (start, score one token,
  commit it): with an `engine.compiled.CompiledVerifier`, compiled plain decoding on the very graphs and
  static cache its speculative rounds use;
- `hf_generate`: Hugging Face `generate(do_sample=True)` (greedy, `do_sample=False`, at temperature 0),
  optionally with `assistant_model=` (transformers' assisted generation, its speculative decoding) or
  `prompt_lookup_num_tokens=` (its prompt lookup decoding), one prompt at a time.

Both return (token_ids per row, wall seconds), token ids ending with EOS if emitted.
"""
from __future__ import annotations

import time
from collections.abc import Callable

import torch

from specdiff.lm.cache import cache_kwargs, keep_columns, new_cache, select_rows
from specdiff.lm.masks import left_pad, position_ids
from specdiff.lm.sampling import sample_fast, sample_rows, sampling_probs

STOP_EVERY = 8  # tokens between two checks of autoregressive_generate's stop_row


@torch.inference_mode()
def autoregressive_generate(model, rows: list[list[int]], max_new_tokens: int, eos_token_ids: set[int],
                            temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0,
                            generator: torch.Generator | None = None, pad_token_id: int = 0,
                            greedy_rows: list[bool] | None = None, fast_sampling: bool = False,
                            stop_row: Callable[[list[int]], bool] | None = None):
    """Plain cached decoding of a batch of prompts (rows of token ids). Returns (ids per row, seconds).
    greedy_rows: rows decoded by argmax whatever the sampling settings (distillation data mixes both);
    fast_sampling: `lm.sampling.sample_fast` (the same law, other draws: for large batches); stop_row: a row
    whose ids so far make it True is finished (checked every STOP_EVERY tokens; the distillation data stops a
    row once it loops, which it would cut there anyway).

    A row is finished at EOS (kept) or when stop_row says so. Once a quarter of the rows in the batch are
    finished, they leave it: their cache rows are dropped, and (attention-only models) so are the padding
    columns no remaining row needs (positions are explicit, so the rest see the same keys)."""
    from transformers import DynamicCache

    begin = time.perf_counter()
    device = next(model.parameters()).device
    ids, key_mask = left_pad(rows, pad_token_id, device)
    cache = new_cache(model)
    attention = None if bool(key_mask.all()) else key_mask.long()
    logits = model(input_ids=ids, attention_mask=attention, position_ids=position_ids(key_mask), logits_to_keep=1,
                   **cache_kwargs(model, cache)).logits[:, -1]
    positions = key_mask.sum(-1, keepdim=True) - 1  # [b, 1]
    outputs = [[] for _ in rows]
    slots = list(range(len(rows)))  # the row of `rows` in each batch slot
    done = torch.zeros(len(rows), dtype=torch.bool, device=device)
    eos = torch.tensor(sorted(eos_token_ids) or [-1], device=device)
    greedy = None if greedy_rows is None else torch.tensor(greedy_rows, dtype=torch.bool, device=device)[:, None]
    for step in range(max_new_tokens):
        if fast_sampling:
            token = sample_fast(logits, temperature, top_p, top_k, generator)[:, None]  # [b, 1]
        else:
            token = sample_rows(sampling_probs(logits, temperature, top_p, top_k), generator)[:, None]  # [b, 1]
        if greedy is not None:
            token = torch.where(greedy, logits.argmax(-1, keepdim=True), token)
        finished = done.tolist()
        for slot, value in enumerate(token.squeeze(1).tolist()):
            if not finished[slot]:
                outputs[slots[slot]].append(value)
        done |= torch.isin(token.squeeze(1), eos)
        if stop_row is not None and (step + 1) % STOP_EVERY == 0:
            done |= torch.tensor([stop_row(outputs[row]) for row in slots], device=device)
        finished_now = int(done.sum())  # one host read for both tests
        if finished_now == len(slots):
            break
        if 4 * finished_now >= len(slots):  # a quarter finished: they leave the batch
            keep = (~done).nonzero().squeeze(1)  # [b']
            select_rows(cache, keep)
            slots = [slots[i] for i in keep.tolist()]
            token, positions, done = token[keep], positions[keep], done[keep]
            greedy = None if greedy is None else greedy[keep]
            if attention is not None:
                attention = attention[keep]  # [b', L]
                if type(cache) is DynamicCache:  # attention only: drop the padding columns nobody needs
                    attention = keep_columns(cache, attention.bool()).long()  # [b', L']
        positions = positions + 1
        if attention is not None:
            attention = torch.cat([attention, torch.ones_like(token)], dim=1)
        logits = model(input_ids=token, attention_mask=attention, position_ids=positions, logits_to_keep=1,
                       **cache_kwargs(model, cache)).logits[:, -1]
    return outputs, time.perf_counter() - begin


@torch.inference_mode()
def verifier_generate(verifier, rows: list[list[int]], max_new_tokens: int, eos_token_ids: set[int],
                      generator: torch.Generator | None = None):
    """Plain decoding of a batch of prompts through `verifier` (sampling settings its own): each step scores the
    last token [b, 1], samples the next from p (argmax at temperature 0), and commits the scored column. A row is
    finished at EOS (kept) and leaves the batch. Returns (ids per row, seconds)."""
    begin = time.perf_counter()
    ids, key_mask = left_pad(rows, pad_token_id=int(getattr(verifier.model.config, "pad_token_id", None) or 0),
                             device=verifier.device)
    if hasattr(verifier, "reserve"):  # a static cache: the longest row it will hold
        verifier.reserve(ids.shape[1] + max_new_tokens + 1)
    verifier.start(ids, key_mask)
    token = ids[:, -1:]  # [b, 1]: the last prompt token, never cached by start
    outputs = [[] for _ in rows]
    live = list(range(len(rows)))
    for _ in range(max_new_tokens):
        logits, _ = verifier.score(token)  # [b, 1, V] sampling logits
        token = sample_rows(torch.softmax(logits[:, -1], dim=-1), generator)[:, None]  # [b, 1]
        verifier.commit(torch.ones(len(live), dtype=torch.long, device=token.device))
        keep = []
        for position, value in enumerate(token.squeeze(1).tolist()):
            outputs[live[position]].append(value)
            if value not in eos_token_ids and len(outputs[live[position]]) < max_new_tokens:
                keep.append(position)
        if len(keep) < len(live):
            if not keep:
                break
            selected = torch.tensor(keep, device=token.device)
            verifier.select(selected)
            token, live = token[selected], [live[position] for position in keep]
    return outputs, time.perf_counter() - begin


@torch.inference_mode()
def hf_generate(model, rows: list[list[int]], max_new_tokens: int, eos_token_ids: set[int], temperature: float,
                top_p: float, top_k: int, assistant_model=None, seed: int = 0,
                prompt_lookup_num_tokens: int | None = None):
    """transformers' generate(do_sample=True), or generate(do_sample=False) at temperature 0 (greedy), one
    prompt at a time (assisted generation takes batch 1); with assistant_model or prompt_lookup_num_tokens,
    transformers' assisted generation or prompt lookup decoding. Returns (ids per row, seconds)."""
    device = next(model.parameters()).device
    outputs = []
    torch.manual_seed(seed)
    begin = time.perf_counter()
    for row in rows:
        ids = torch.tensor([row], device=device)
        kwargs = {} if assistant_model is None else {"assistant_model": assistant_model}
        if prompt_lookup_num_tokens is not None:
            kwargs["prompt_lookup_num_tokens"] = int(prompt_lookup_num_tokens)
        if temperature == 0:  # greedy; the checkpoint's own sampling settings are switched off with it
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        else:
            kwargs.update(do_sample=True, temperature=temperature, top_p=top_p, top_k=top_k)
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                             eos_token_id=sorted(eos_token_ids), pad_token_id=model.config.pad_token_id, **kwargs)
        new = out[0, len(row):].tolist()
        cut = next((i + 1 for i, token in enumerate(new) if token in eos_token_ids), len(new))
        outputs.append(new[:cut])
    return outputs, time.perf_counter() - begin
