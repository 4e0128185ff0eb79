"""`specdiff bench verify`'s measurement: our batched verify() beside transformers' _speculative_sampling.

The drafts are a noisy copy of the target logits (moderate acceptance). The Cactus overhead is
also measured at equal work, where q = p and every row accepts all B tokens under both rules.

Both sides start from the same logits. transformers handles one sequence per call, so it is
called row by row over the same tensors. The floor is one pass that reads the target and draft
logits once (a sum over each). Times are medians over repeats after a warm-up, with a fixed
torch thread count (`eval.timing`); ratios compare runs made side by side in this one process.
"""
from __future__ import annotations

from specdiff.eval.timing import interleaved_median_ms


def bench_case(batch: int, vocab: int, block_len: int, repeats: int, delta: float, seed: int) -> dict:
    import torch
    from transformers.generation.utils import _speculative_sampling

    import specdiff as sd

    generator = torch.Generator().manual_seed(seed)
    # Target logits with a realistic spread; the draft is a noisy copy, so acceptance is moderate.
    target_logits = 3.0 * torch.randn(batch, block_len + 1, vocab, generator=generator)  # [b, B+1, V]
    draft_logits = target_logits[:, :block_len] + 1.5 * torch.randn(batch, block_len, vocab, generator=generator)  # [b, B, V]
    draft_tokens = torch.multinomial(
        torch.softmax(draft_logits.reshape(-1, vocab), dim=-1), 1, generator=generator
    ).reshape(batch, block_len)  # [b, B]

    def ours(rule):
        return lambda: sd.verify(draft_tokens, draft_logits, target_logits, rule=rule, inputs="logits", generator=generator)

    def hf_rows():
        for row in range(batch):
            _speculative_sampling(draft_tokens[row : row + 1], draft_logits[row : row + 1], block_len, target_logits[row : row + 1])

    def floor():
        return target_logits.sum(), draft_logits.sum()

    timings = interleaved_median_ms(
        {
            "lossless": ours(sd.Lossless()),
            "cactus": ours(sd.Cactus(delta)),
            "linear": ours(sd.Linear(0.4)),
            "hf": hf_rows,
            "floor": floor,
        },
        repeats,
    )
    lossless_ms, cactus_ms, linear_ms = timings["lossless"], timings["cactus"], timings["linear"]
    hf_ms, floor_ms = timings["hf"], timings["floor"]
    accepted = sd.verify(draft_tokens, draft_logits, target_logits, inputs="logits", generator=generator).num_accepted
    accepted_cactus = sd.verify(
        draft_tokens, draft_logits, target_logits, rule=sd.Cactus(delta), inputs="logits", generator=generator
    ).num_accepted

    # Equal work: with q = p every row accepts all B drafted tokens under both rules, so both
    # normalise the same rows and the difference is the rule itself (the Cactus solve).
    equal_draft_logits = target_logits[:, :block_len].clone()
    equal = interleaved_median_ms(
        {
            "lossless": lambda: sd.verify(draft_tokens, equal_draft_logits, target_logits, inputs="logits", generator=generator),
            "cactus": lambda: sd.verify(
                draft_tokens, equal_draft_logits, target_logits, rule=sd.Cactus(delta), inputs="logits", generator=generator
            ),
        },
        repeats,
    )
    return {
        "batch": batch,
        "vocab": vocab,
        "block": block_len,
        "lossless_ms": round(lossless_ms, 3),
        "cactus_ms": round(cactus_ms, 3),
        "linear_ms": round(linear_ms, 3),
        "hf_ms": round(hf_ms, 3),
        "floor_ms": round(floor_ms, 3),
        "ratio_vs_hf": round(lossless_ms / hf_ms, 3),
        "ratio_vs_floor": round(lossless_ms / floor_ms, 3),
        "ratio_cactus_vs_lossless": round(equal["cactus"] / equal["lossless"], 3),
        "equal_work_lossless_ms": round(equal["lossless"], 3),
        "equal_work_cactus_ms": round(equal["cactus"], 3),
        "ratio_cactus_vs_lossless_same_drafts": round(cactus_ms / lossless_ms, 3),
        "mean_accepted": round(accepted.double().mean().item(), 3),
        "mean_accepted_cactus": round(accepted_cactus.double().mean().item(), 3),
        "ms_per_emitted_token_lossless": round(lossless_ms / (accepted.double().sum().item() + batch), 4),
        "ms_per_emitted_token_cactus": round(cactus_ms / (accepted_cactus.double().sum().item() + batch), 4),
    }


def verify_bench(threads: int, repeats: int, block: int, vocabs, batches, delta: float, seed: int,
                 say=None) -> dict:
    """Every (vocabulary, batch) case and the headline ratios."""
    import torch
    import transformers

    torch.set_num_threads(threads)
    cases = []
    for vocab in vocabs:
        for batch in batches:
            case = bench_case(batch, vocab, block, repeats, delta, seed)
            cases.append(case)
            if say:
                say(f"V={vocab:>7} b={batch}: ours {case['lossless_ms']:8.2f} ms  hf {case['hf_ms']:8.2f} ms  "
                      f"floor {case['floor_ms']:7.2f} ms  cactus {case['cactus_ms']:8.2f} ms")
    headline = next((c for c in cases if c["batch"] == 8 and c["vocab"] == 151_936), cases[-1])
    result = {
        "bench": "verify",
        "ratio_vs_hf": headline["ratio_vs_hf"],
        "ratio_vs_floor": headline["ratio_vs_floor"],
        "ratio_cactus_vs_lossless": headline["ratio_cactus_vs_lossless"],
        "ratio_cactus_vs_lossless_same_drafts": headline["ratio_cactus_vs_lossless_same_drafts"],
        "cactus_ratio_note": (
            "ratio_cactus_vs_lossless compares equal work (q = p: every row accepts all B tokens under both "
            "rules). On the same noisy drafts Cactus accepts more tokens, and verification reads the rows up "
            "to where each row stops, so its time grows with what it accepts: see *_same_drafts and "
            "ms_per_emitted_token_*."
        ),
        "headline_case": {"batch": headline["batch"], "vocab": headline["vocab"], "block": headline["block"]},
        "targets": {"ratio_vs_hf": 0.7, "ratio_vs_floor": 3.0, "ratio_cactus_vs_lossless": 1.5},
        "cases": cases,
        "threads": threads,
        "repeats": repeats,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }
    return result
