"""Teacher-forced diagnosis of a block-causal uniform diffusion drafter (the zoo's `uniform-drafter`, a
Qwen3 backbone with Dream's shift): how well its denoiser copies, finds and corrects uniform noise, with
the reference answer given (no sampling). On `n` validation problems, a block of B tokens after a random
cut in the answer (eos-padded), the prefix clean, argmax predictions:

- `copy`: clean canvas; share of block positions predicted as the token already there;
- `one_corrupted_recovery`: one block position replaced by a different uniform random token; share of
  those positions whose argmax is the original token (docs/drafters.md's "71-75%" for the old drafter);
- `one_corrupted_block`: share of those blocks whose every position's argmax is right;
- `half_noised_recovery`: each position noised with probability 0.5; share of noised positions recovered;
- `all_noised_first` / `all_noised_all`: canvas all noise; the first position right (pure causal
  prediction), every position right.

    python -m specdiff.zoo_tools.uniform_diagnosis runs/zoo/uniform-drafter/model
"""
from __future__ import annotations

import json
import sys

import torch

from specdiff.eval import tasks
from specdiff.zoo import configs


def _block_logits(model, prefix_rows, canvas):
    """Logits [b, B, V] of each canvas position (Dream's shift), prefix causal, canvas bidirectional."""
    width = max(map(len, prefix_rows))
    block = canvas.shape[1]
    ids = torch.tensor([[0] * (width - len(r)) + r for r in prefix_rows])
    key_mask = torch.tensor([[False] * (width - len(r)) + [True] * len(r) for r in prefix_rows])
    tokens = torch.cat([ids, canvas], 1)
    full = torch.cat([key_mask, torch.ones_like(canvas, dtype=torch.bool)], 1)
    length = tokens.shape[1]
    q = torch.arange(length)[:, None]
    k = torch.arange(length)[None, :]
    in_block = k >= width
    allowed = ((k <= q) | (in_block & (q >= width)))[None] & full[:, None, :]
    allowed |= (k == q)[None]
    positions = (full.long().cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=tokens, attention_mask=allowed[:, None], position_ids=positions).logits
    return logits[:, width - 1:width - 1 + block]  # row j - 1 predicts token j


@torch.no_grad()
def diagnose(model, tokenizer, n: int = 128, block: int = configs.BLOCK_TOKENS, seed: int = 0) -> dict:
    model.eval()
    gen = torch.Generator().manual_seed(seed)
    problems = tasks.arith_problems("validation", n)
    prefix_rows, blocks = [], []
    for p in problems:
        prompt = tokenizer(p.prompt).input_ids
        answer = tokenizer(p.answer, add_special_tokens=False).input_ids + [tokenizer.eos_token_id]
        cut = int(torch.randint(0, len(answer), (1,), generator=gen))
        prefix_rows.append(prompt + answer[:cut])
        blocks.append((answer[cut:] + [tokenizer.eos_token_id] * block)[:block])
    x0 = torch.tensor(blocks)  # [n, B]
    vocab = model.config.vocab_size
    out = {}
    pred = _block_logits(model, prefix_rows, x0).argmax(-1)
    out["copy"] = (pred == x0).float().mean().item()
    where = torch.randint(0, block, (n,), generator=gen)
    noise = (x0[torch.arange(n), where] + torch.randint(1, vocab, (n,), generator=gen)) % vocab  # a different token
    corrupted = x0.clone()
    corrupted[torch.arange(n), where] = noise
    pred = _block_logits(model, prefix_rows, corrupted).argmax(-1)
    out["one_corrupted_recovery"] = (pred[torch.arange(n), where] == x0[torch.arange(n), where]).float().mean().item()
    out["one_corrupted_block"] = (pred == x0).all(-1).float().mean().item()
    half = torch.rand(x0.shape, generator=gen) < 0.5
    noisy = torch.where(half, torch.randint(0, vocab, x0.shape, generator=gen), x0)
    pred = _block_logits(model, prefix_rows, noisy).argmax(-1)
    out["half_noised_recovery"] = ((pred == x0) & half).sum().item() / max(1, int(half.sum()))
    pred = _block_logits(model, prefix_rows, torch.randint(0, vocab, x0.shape, generator=gen)).argmax(-1)
    out["all_noised_first"] = (pred[:, 0] == x0[:, 0]).float().mean().item()
    out["all_noised_all"] = (pred == x0).all(-1).float().mean().item()
    out["n"] = n
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in out.items()}


def main(argv=None) -> int:
    from specdiff import zoo
    from specdiff.models import ModelCache

    argv = sys.argv[1:] if argv is None else argv
    torch.set_num_threads(1)
    model = ModelCache(dtype="float32").model(argv[0] if argv else "uniform-drafter")  # a zoo name or a folder
    print(json.dumps(diagnose(model, zoo.tokenizer()), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
