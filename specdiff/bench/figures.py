"""A row's figures from its timer records (`timer.measure`).

Terms: tokens_per_s is the row's generated tokens over the sum of its per-prompt median seconds
(tokens_per_cpu_s: over CPU seconds instead); mean_accepted: accepted drafted tokens per round (HF rows: new
tokens per verifier forward, minus one; plain decoding: 0); tokens_per_round: new tokens per round;
ms_per_round, draft_ms, verify_ms (the verifier's forward), accept_ms (the acceptance rule) and overhead_ms
(everything else, accept_ms and the prefill included) per round of speculative rows; prefill_ms per prompt (the
verifier's and the drafter's prefill) and round_outside_forwards_ms per round (the round's work outside the
drafter's and the verifier's calls: the acceptance rule, the commits and the bookkeeping; the prefill excluded); accuracy: the share of right answers where the suite scores
them; greedy_identical: the share of prompts whose ids equal a reference's (HF greedy), per_kind: the
acceptance figures per prompt kind, per_prompt: each prompt's figures.
"""
from __future__ import annotations


def figures(records: list[dict], prompts: list, reference: list | None = None, score=None, decode=None) -> dict:
    """The figures of one row (module docstring); `score(text, prompt)` with `decode(ids)` gives accuracy."""
    tokens = sum(len(r["ids"]) for r in records)
    seconds = sum(r["seconds"] for r in records)
    cpu = sum(r["cpu_s"] for r in records)
    out = {"tokens_per_s": tokens / seconds if seconds else 0.0, "tokens_per_cpu_s": tokens / cpu if cpu else 0.0,
           **_acceptance(records), "new_tokens": tokens, "wall_s": seconds, "prompts": len(records)}
    rounds = sum(r["rounds"] for r in records)
    out["ms_per_round"] = 1000 * seconds / rounds if rounds else 0.0
    if rounds and all("draft_s" in r for r in records):
        draft, forward, verify = (sum(r[key] for r in records) for key in ("draft_s", "forward_s", "verify_s"))
        out.update(rounds=rounds, draft_ms=1000 * draft / rounds, verify_ms=1000 * forward / rounds,
                   accept_ms=1000 * (verify - forward) / rounds, overhead_ms=1000 * (seconds - draft - forward) / rounds)
        if all("prefill_s" in r for r in records):  # the round's own work: the prefill taken out
            prefill = sum(r["prefill_s"] for r in records)
            out.update(prefill_ms=1000 * prefill / len(records),
                       round_outside_forwards_ms=1000 * (seconds - draft - forward - prefill) / rounds)
    if score is not None:
        correct = [score(decode(r["ids"]), p) for r, p in zip(records, prompts)]
        out["accuracy"] = sum(correct) / len(correct)
    if reference is not None:
        same = [r["ids"] == ids for r, ids in zip(records, reference)]
        out["greedy_identical"] = sum(same) / len(same)
        out["greedy_differs_at"] = {str(p.index): _first_difference(r["ids"], ids)
                                    for p, r, ids, s in zip(prompts, records, reference, same) if not s}
    out["per_kind"] = {}
    for kind in sorted({p.kind for p in prompts}):
        mine = [(p, r) for p, r in zip(prompts, records) if p.kind == kind]
        kind_tokens = sum(len(r["ids"]) for _, r in mine)
        kind_seconds = sum(r["seconds"] for _, r in mine)
        out["per_kind"][kind or "none"] = {"prompts": len(mine), **_acceptance([r for _, r in mine]),
                                           "tokens_per_s": kind_tokens / kind_seconds if kind_seconds else 0.0}
    out["per_prompt"] = [{"index": p.index, "kind": p.kind, "new_tokens": len(r["ids"]), "seconds": r["seconds"],
                          "rounds": r["rounds"], "accepted": r["accepted"]} for p, r in zip(prompts, records)]
    return out


def _acceptance(records: list[dict]) -> dict:
    rounds = sum(r["rounds"] for r in records)
    return {"mean_accepted": sum(r["accepted"] for r in records) / rounds if rounds else 0.0,
            "tokens_per_round": sum(len(r["ids"]) for r in records) / rounds if rounds else 0.0}


def _first_difference(ids: list[int], reference: list[int]) -> int:
    return next((i for i, (a, b) in enumerate(zip(ids, reference)) if a != b), min(len(ids), len(reference)))
