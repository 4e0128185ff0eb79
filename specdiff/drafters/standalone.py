"""A drafter on its own: block after block, every drafted token kept (no verifier), until EOS or a
token limit. This is how a diffusion drafter's standalone accuracy is measured (`specdiff zoo eval`,
tools/drafter_standalone.py). Not for DFlash, which reads the verifier's hidden states."""
from __future__ import annotations

import torch

from specdiff.lm.masks import left_pad


@torch.inference_mode()
def standalone_ids(drafter, rows: list[list[int]], block: int, max_new_tokens: int, eos_token_id: int,
                   pad_token_id: int = 0, generator: torch.Generator | None = None) -> list[list[int]]:
    """The drafter's own continuation of each prompt (token id rows), batched: each round drafts `block`
    tokens per row and commits all of them; a row's answer ends before its first EOS."""
    if getattr(drafter, "verifier_hidden_layers", None):
        raise ValueError(f"{type(drafter).__name__} reads the verifier's hidden states: it has no standalone mode")
    ids, key_mask = left_pad(rows, pad_token_id)
    drafter.start(ids, key_mask)
    new = torch.empty(len(rows), 0, dtype=ids.dtype)
    done = torch.zeros(len(rows), dtype=torch.bool)
    while new.shape[1] < max_new_tokens and not bool(done.all()):
        draft = drafter.propose(ids, key_mask, block, generator)
        tokens = draft.tokens.to(new.device)
        new = torch.cat([new, tokens], dim=1)
        done |= (tokens == eos_token_id).any(1)
        ids = torch.cat([ids, draft.tokens], dim=1)
        key_mask = torch.cat([key_mask, torch.ones_like(draft.tokens, dtype=torch.bool)], dim=1)
        drafter.commit(torch.full((len(rows),), block, device=ids.device))
    answers = []
    for row in new.tolist():
        row = row[:max_new_tokens]
        answers.append(row[: row.index(eos_token_id)] if eos_token_id in row else row)
    return answers


def standalone_texts(drafter, tokenizer, prompts: list[str], block: int, max_new_tokens: int, seed: int = 0,
                     batch_size: int = 50) -> list[str]:
    """Decoded standalone answers to `prompts` (see `standalone_ids`), `batch_size` prompts at a time."""
    generator = torch.Generator().manual_seed(seed)
    texts = []
    for start in range(0, len(prompts), batch_size):
        rows = [tokenizer(p).input_ids for p in prompts[start:start + batch_size]]
        for answer in standalone_ids(drafter, rows, block, max_new_tokens, tokenizer.eos_token_id,
                                     tokenizer.pad_token_id or 0, generator):
            texts.append(tokenizer.decode(answer, skip_special_tokens=True))
    return texts
