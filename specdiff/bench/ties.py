"""`greedy_identical_up_to_ties` (issue 41, item 2): greedy identity with HF up to the verifier's own rounding.

Terms:
- greedy_identical: a row's ids equal HF greedy `generate`'s at the same dtype, prompt by prompt (`figures`);
- near-tie: at a row's first difference from HF, the token specdiff emitted is one of the two largest logits
  of the verifier after HF's prefix, and their gap is at most the dtype's bound;
- bound (`BOUNDS_FILE`): the largest change of the verifier's top-2 logit gap between its one-token forward
  and its multi-token forwards (chains of 2 to 16 tokens, and trees), measured by `tools/tie_bound.py` on the
  verifier's own text, per kernel family (`per_kernels`, each naming its CPU: the kernels round differently,
  issue 54), the largest of them taken (`docs/results/precision/`). In float32 it is ~1e-5; in bfloat16 a
  multi-token forward rounds differently, and the bound is what makes the comparison fair rather than a
  tolerance chosen to pass;
- greedy_identical_up_to_ties: the share of prompts that are identical or differ first at a near-tie.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

BOUNDS_FILE = Path(__file__).resolve().parent / "tie_bounds.json"  # {dtype: bound}, from tools/tie_bound.py


def tie_bound(dtype: str) -> float:
    """The near-tie bound of a dtype (BOUNDS_FILE); 0 where none was measured (only exact identity counts)."""
    bounds = json.loads(BOUNDS_FILE.read_text()) if BOUNDS_FILE.is_file() else {}
    return float(bounds.get(dtype, {}).get("bound", 0.0))


@torch.inference_mode()
def up_to_ties(rows: dict, prompts: list, reference: list[list[int]], records: dict, model, dtype: str) -> None:
    """Adds `greedy_identical_up_to_ties`, `near_ties` (prompt index -> the gap) and `tie_bound` to every row that
    has `greedy_identical`; one verifier forward per distinct (prompt, first difference)."""
    bound, gaps = tie_bound(dtype), {}
    for name, row in rows.items():
        if "greedy_identical" not in row:
            continue
        near, counted = {}, 0
        for prompt, record, ids in zip(prompts, records[name], reference):
            if record["ids"] == ids:
                counted += 1
                continue
            k = next((i for i, (a, b) in enumerate(zip(record["ids"], ids)) if a != b), None)
            if k is None:  # one is a prefix of the other: a length difference, never a tie
                continue
            if (prompt.index, k) not in gaps:
                logits = model(input_ids=torch.tensor([prompt.ids + ids[:k]], device=model.device)).logits[0, -1]
                top = logits.float().topk(2)
                gaps[(prompt.index, k)] = (top.indices.tolist(), float(top.values[0] - top.values[1]))
            top2, gap = gaps[(prompt.index, k)]
            if record["ids"][k] in top2 and gap <= bound:
                near[str(prompt.index)] = gap
                counted += 1
        row.update(greedy_identical_up_to_ties=counted / len(prompts), near_ties=near, tie_bound=bound)
