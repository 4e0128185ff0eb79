"""Batches for every objective (`training.objectives`), from the two sources of training text:

- the testbed's arithmetic problems (`specdiff zoo train`): `bos prompt answer eos`, fresh problems of the train
  split per step, a pure function of (seed, step);
- a verifier's regenerated conversations (`specdiff distill`): the shards of `specdiff distill data`
  (`zoo_tools.distill_data`, whose format is frozen), (prompt ids, response ids) each, and the verifier's hidden
  states of them, and its next-token distributions (the soft targets: its last hidden state and its full
  vocabulary's log-sum-exp per token, `teacher_states`), each computed once per shard and cached.

Every builder returns the batch dict its objective reads; random cuts are drawn here, with the step's generator,
before the objective draws its noise.
"""
from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import torch

from specdiff.eval import tasks
from specdiff.zoo import configs

SPACE = "\u2581"  # the tokenizer's word-start marker


# -- the testbed's problems ---------------------------------------------------------------------------------------

def train_problems(seed: int, step: int, n: int) -> list[tasks.Problem]:
    """The `n` training problems of one step: deterministic in (seed, step), train split only."""
    rng = random.Random(seed * 1_000_003 + step * 7919 + 17)
    out = []
    while len(out) < n:
        problem = tasks.make_problem(rng)
        if tasks.split_of(problem.question) == "train":
            out.append(problem)
    return out


def ar_batch(problems, tokenizer) -> dict:
    """next_token's batch: right-padded `bos prompt answer eos`, labels on answer + eos."""
    rows, starts = _rows(problems, tokenizer)
    ids, keys = _right_padded(rows, tokenizer.pad_token_id)
    return dict(ids=ids, keys=keys, labels=_labels(ids, keys, starts))


def mdlm_batch(problems, tokenizer, canvas: int = configs.CANVAS_TOKENS) -> dict:
    """masked_diffusion's batch for the testbed's masked drafter: `bos prompt canvas`, the canvas (noisable) the
    answer then eos up to `canvas` tokens; `groups` [b, L] (on the canvas, each digit token's number by value,
    see `number_groups`; 0 elsewhere) and `result_rank` [b, L] (on canvas digit tokens whose value is not in the
    prompt, a computed result: 1 + the rank of the value's first occurrence among results; else 0)."""
    rows, starts, group_rows, rank_rows = [], [], [], []
    for p in problems:
        prompt = tokenizer(p.prompt).input_ids
        answer = tokenizer(p.answer, add_special_tokens=False).input_ids[: canvas - 1]
        answer = answer + [tokenizer.eos_token_id] * (canvas - len(answer))
        rows.append(prompt + answer)
        starts.append(len(prompt))
        groups = number_groups(prompt + answer, tokenizer)  # ids in order of first occurrence
        in_prompt = set(groups[: len(prompt)])
        rank = {g: i + 1 for i, g in enumerate(sorted({g for g in groups[len(prompt):] if g and g not in in_prompt}))}
        group_rows.append([0] * len(prompt) + groups[len(prompt):])
        rank_rows.append([0] * len(prompt) + [rank.get(g, 0) for g in groups[len(prompt):]])
    ids, keys = _right_padded(rows, tokenizer.pad_token_id)
    noisable = (torch.arange(ids.shape[1])[None, :] >= torch.tensor(starts)[:, None]) & keys
    return dict(ids=ids, keys=keys, noisable=noisable, groups=_right_padded(group_rows, 0)[0],
                result_rank=_right_padded(rank_rows, 0)[0], ratio="stratified")


def number_groups(ids: list[int], tokenizer) -> list[int]:
    """Which number each token belongs to, by value: 0 for a non-digit token, else k >= 1, the same k
    for every occurrence of the same value in `ids`. A number is a run of one-digit tokens; a
    `▁`-prefixed digit starts a new number. `▁5 ▁* ▁1 2 ▁= ▁6 0 . ▁so ▁6 0` -> 1 0 2 2 0 3 3 0 0 3 3."""
    pieces = tokenizer.convert_ids_to_tokens(ids)
    digits = [p.lstrip(SPACE) if len(p.lstrip(SPACE)) == 1 and p.lstrip(SPACE).isdigit() else None for p in pieces]
    groups, values, i = [0] * len(ids), {}, 0
    while i < len(ids):
        if digits[i] is None:
            i += 1
            continue
        end = i + 1
        while end < len(ids) and digits[end] is not None and not pieces[end].startswith(SPACE):
            end += 1
        value = "".join(digits[i:end]).lstrip("0") or "0"
        groups[i:end] = [values.setdefault(value, len(values) + 1)] * (end - i)
        i = end
    return groups


def block_batch(problems, tokenizer, generator, block_tokens: int, uniform: bool = False) -> dict:
    """masked_diffusion's (block drafter) or, with `uniform`, uniform_diffusion's batch: a cut c in answer + eos,
    the block [c, c + B) noisable, the prefix causal. The uniform block is eos-padded to B and nothing after it
    is kept; the masked one ends where the row does."""
    rows, starts = _rows(problems, tokenizer)
    lengths = torch.tensor([len(r) for r in rows])
    span = (lengths - starts).clamp(min=1)
    cut = starts + (torch.rand(len(rows), generator=generator) * span).long().clamp(max=span - 1)  # [b]
    if uniform:
        rows = [(r + [tokenizer.eos_token_id] * block_tokens)[:c + block_tokens] for r, c in zip(rows, cut.tolist())]
    ids, keys = _right_padded(rows, tokenizer.pad_token_id)
    column = torch.arange(ids.shape[1])[None, :]
    block = (column >= cut[:, None]) & (column < cut[:, None] + block_tokens) & keys  # [b, L]
    return dict(ids=ids, keys=keys, noisable=block, cut=cut, attention="block_causal", block_tokens=block_tokens)


def problem_conversations(problems, tokenizer) -> list[tuple[list[int], list[int]]]:
    """(bos + prompt, answer + eos) per problem: the testbed's problems as conversations (DFlash's batch)."""
    rows, starts = _rows(problems, tokenizer)
    return [(r[:s], r[s:]) for r, s in zip(rows, starts.tolist())]


def _rows(problems, tokenizer) -> tuple[list[list[int]], torch.Tensor]:
    """`bos prompt answer eos` per problem, and each answer's first index [b]."""
    rows, starts = [], []
    for p in problems:
        prompt = tokenizer(p.prompt).input_ids
        rows.append(prompt + tokenizer(p.answer, add_special_tokens=False).input_ids + [tokenizer.eos_token_id])
        starts.append(len(prompt))
    return rows, torch.tensor(starts)


# -- a verifier's conversations -----------------------------------------------------------------------------------

def conversations(data_dir, verifier: str, shards: int | None = None) -> list[tuple[list[int], list[int]]]:
    """The stored conversations of `verifier` (the first `shards` shards); data of another verifier is refused."""
    from specdiff.zoo_tools.distill_data import _read_index, load_shards

    _read_index(Path(data_dir), verifier)
    return load_shards(data_dir, shards)


def conversation_batch(chosen, positions: int | None = None) -> dict:
    """next_token's batch: right-padded prompt + response (0-padded), labels on the response."""
    ids, keys = _right_padded([p + r for p, r in chosen], 0)
    return dict(ids=ids, keys=keys, labels=_labels(ids, keys, torch.tensor([len(p) for p, _ in chosen])),
                positions=positions)


def cut_batch(chosen, block: int, generator) -> dict:
    """masked_diffusion's batch of one cut c per conversation, a response position: the block [c, c + B) is
    noisable, nothing after it is kept; `labels` on the kept response tokens (for the next-token loss)."""
    rows, cuts = [], []
    for prompt, response in chosen:
        cut = len(prompt) + int(torch.randint(len(response), (1,), generator=generator))
        rows.append((prompt + response)[: cut + block])
        cuts.append(cut)
    ids, keys = _right_padded(rows, 0)
    cut = torch.tensor(cuts)
    noisable = (torch.arange(ids.shape[1])[None, :] >= cut[:, None]) & keys
    return dict(ids=ids, keys=keys, noisable=noisable, cut=cut,
                labels=_labels(ids, keys, torch.tensor([len(p) for p, _ in chosen])))


def verifier_states(target, layers, data_dir, folder: Path, show_progress: bool = True,
                    shards: int | None = None) -> list[torch.Tensor]:
    """Per conversation [L, len(layers) * H] float16: the verifier's hidden states after decoder layers `layers`,
    cached per shard in `folder` (written under a temporary name, then renamed)."""
    from specdiff.progress import progress
    from specdiff.zoo_tools.distill_data import _read_index

    folder.mkdir(parents=True, exist_ok=True)
    states = []
    for shard in progress(_read_index(Path(data_dir), None)["shards"][:shards], desc="verifier hidden states",
                          unit="shard", enabled=show_progress, leave=True):
        path = folder / (Path(shard["file"]).stem + ".pt")
        if not path.exists():
            computed = []
            with torch.inference_mode():
                for ids, keys in _shard_batches(Path(data_dir) / shard["file"]):
                    computed += [s[:int(n)].clone() for s, n in zip(stacked_states(target, layers, ids, keys).half(),
                                                                    keys.sum(1))]
            _save(computed, path)
        states += torch.load(path)
    return states


@torch.no_grad()
def conversation_states(target, layers, chosen) -> torch.Tensor:
    """[b, W, len(layers) * H]: the verifier's hidden states of right-padded conversations (computed each time)."""
    return stacked_states(target, layers, *_right_padded([p + r for p, r in chosen], 0))


def stacked_states(target, layers, ids: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """[b, L, len(layers) * H]: the verifier's hidden states after decoder layers `layers`, concatenated."""
    out = target(input_ids=ids, attention_mask=keys.long(), output_hidden_states=True, logits_to_keep=1)
    return torch.cat([out.hidden_states[k + 1] for k in layers], dim=-1)


def teacher_states(target, data_dir, folder: Path, show_progress: bool = True,
                   shards: int | None = None) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per conversation (h [L, H] float16, lse [L] float32): the verifier's last hidden state (after its final
    norm) at every token, and the log-sum-exp of its head's logits over its full vocabulary there, computed from
    that float16 h in float32, so that `cached_teacher`'s p = exp(h . w_i - lse) are the verifier's probabilities
    of the float16-rounded state, summing to 1 over the full vocabulary. Cached per shard in `folder` (written
    under a temporary name, then renamed), like `verifier_states`: the soft targets' teacher costs one head
    product on the draft rows per trained position, not a verifier forward per step."""
    from specdiff.progress import progress
    from specdiff.zoo_tools.distill_data import _read_index

    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for shard in progress(_read_index(Path(data_dir), None)["shards"][:shards], desc="verifier distributions",
                          unit="shard", enabled=show_progress, leave=True):
        path = folder / (Path(shard["file"]).stem + ".pt")
        if not path.exists():
            computed, head = [], target.get_output_embeddings().weight.float()  # [V, H]
            with torch.inference_mode():
                for ids, keys in _shard_batches(Path(data_dir) / shard["file"]):
                    last = target.get_decoder()(input_ids=ids, attention_mask=keys.long()).last_hidden_state.half()
                    for row, n in zip(last, keys.sum(1).tolist()):
                        h = row[:n].clone()  # [L, H]
                        computed.append((h, _log_normaliser(h, head)))
            _save(computed, path)
        out += torch.load(path)
    return out


def fill_caches(target, layers, data_dir, hidden: Path, teacher: Path, show_progress: bool = True,
                shards: int | None = None) -> None:
    """Both caches of a data shard from one verifier forward, where neither exists yet: `verifier_states`'s
    hidden states after `layers` (in `hidden`) and `teacher_states`'s last state and log-sum-exp (in `teacher`),
    the same numbers as their own passes (same batches, same decoder call), at the cost of one pass. The two
    functions then only read them. A shard with one of the two already cached is left to its own function."""
    from specdiff.progress import progress
    from specdiff.zoo_tools.distill_data import _read_index

    hidden.mkdir(parents=True, exist_ok=True)
    teacher.mkdir(parents=True, exist_ok=True)
    missing = [s for s in _read_index(Path(data_dir), None)["shards"][:shards]
               if not (hidden / (Path(s["file"]).stem + ".pt")).exists()
               and not (teacher / (Path(s["file"]).stem + ".pt")).exists()]
    head = target.get_output_embeddings().weight.float() if missing else None  # [V, H]
    for shard in progress(missing, desc="verifier states and distributions", unit="shard", enabled=show_progress,
                          leave=True):
        states, dists = [], []
        with torch.inference_mode():
            for ids, keys in _shard_batches(Path(data_dir) / shard["file"]):
                out = target.get_decoder()(input_ids=ids, attention_mask=keys.long(), output_hidden_states=True)
                stacked = torch.cat([out.hidden_states[k + 1] for k in layers], dim=-1).half()  # [b, L, |layers| H]
                for row, last, n in zip(stacked, out.last_hidden_state.half(), keys.sum(1).tolist()):
                    states.append(row[:n].clone())
                    h = last[:n].clone()  # [L, H]
                    dists.append((h, _log_normaliser(h, head)))
        _save(states, hidden / (Path(shard["file"]).stem + ".pt"))
        _save(dists, teacher / (Path(shard["file"]).stem + ".pt"))


def cached_teacher(states: list[tuple[torch.Tensor, torch.Tensor]], picks: list[int], head: torch.Tensor):
    """The soft targets' `teacher` (`training.objectives.soft`) from `teacher_states`: a function (rows [n],
    columns [n]) -> p [n, V_q] float32, the verifier's distribution of token column + 1 of conversation
    picks[row] given the tokens up to column, on the rows of `head` [V_q, H] (the verifier's head on the draft
    vocabulary, or all of it). p_i = exp(h . w_i - lse), lse over the full vocabulary: rows outside the draft
    vocabulary keep their mass out of p (sum_i p_i = 1 - m). No grad."""
    @torch.no_grad()  # not inference_mode: p is saved for the drafter's backward
    def probs(rows: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
        h = torch.stack([states[picks[r]][0][c] for r, c in zip(rows.tolist(), columns.tolist())])  # [n, H]
        lse = torch.stack([states[picks[r]][1][c] for r, c in zip(rows.tolist(), columns.tolist())])  # [n]
        return (h.float() @ head.float().T - lse[:, None]).exp()  # [n, V_q]

    return probs


def padded_states(states: list[torch.Tensor]) -> torch.Tensor:
    """[b, W, H_c] float32, zero-padded: per-conversation states side by side."""
    width = max(len(s) for s in states)
    out = torch.zeros(len(states), width, states[0].shape[-1])
    for b, s in enumerate(states):
        out[b, :len(s)] = s.float()
    return out


# -- shared -------------------------------------------------------------------------------------------------------

def _log_normaliser(h: torch.Tensor, head: torch.Tensor) -> torch.Tensor:
    """lse [L] float32: log sum_i exp(h . w_i) over the full head [V, H] float32, for float16 states h [L, H]
    (256 rows at a time, so that the [rows, V] logits stay small)."""
    return torch.cat([(part.float() @ head.T).logsumexp(-1) for part in h.split(256)])


def _save(obj, path: Path) -> None:
    """torch.save under a temporary name, then renamed: a killed run leaves no half-written cache file."""
    partial = path.with_suffix(".partial")
    torch.save(obj, partial)
    os.replace(partial, path)


def _shard_batches(path: Path, size: int = 8):
    """(ids [b, L], keys [b, L]) right-padded, `size` conversations (prompt + response) of a data shard at a time."""
    data = np.load(path)
    tokens, lengths = data["tokens"].astype(np.int64), data["prompt_lengths"] + data["response_lengths"]
    rows = np.split(tokens, np.cumsum(lengths)[:-1]) if len(lengths) else []
    for i in range(0, len(rows), size):
        yield _right_padded([r.tolist() for r in rows[i:i + size]], 0)


def _right_padded(rows: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """ids [b, L] right-padded with `pad`, and the key mask [b, L] bool."""
    lengths = torch.tensor([len(r) for r in rows])
    length = int(lengths.max())
    ids = torch.tensor([list(r) + [pad] * (length - len(r)) for r in rows], dtype=torch.long)
    return ids, torch.arange(length)[None, :] < lengths[:, None]


def _labels(ids: torch.Tensor, keys: torch.Tensor, starts: torch.Tensor) -> torch.Tensor:
    """ids on the real tokens from each row's start on [b], -100 elsewhere."""
    return torch.where(keys & (torch.arange(ids.shape[1])[None, :] >= starts[:, None]), ids, -100)
