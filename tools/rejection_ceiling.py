"""Where lossless verification rejects, and how much of it any accuracy-preserving rule could take back
(issue 22, item 4's ceiling).

Runs the masked drafter losslessly (K steps, draft length B, marginal proposal, batch 1) on arith
validation problems. At every round that ends in a rejection, at the first rejected position j of
the row, it records:
  - the verifier's truncated target p (after temperature, top-p, top-k) and untruncated p_u;
  - top-1 mass, entropy H (nats) and nucleus size |{v: p(v) > 0}| of p;
  - p(y) and p_u(y) of the rejected drafted token y, and q(y);
  - for each rule of RULES, the probability that it accepts this y: min(1, p~(y) / q(y)), with p~ the
    rule's relaxed target (acceptance.py's affine form) built from p, or from p_u for the untruncated
    variants. Lossless's is min(1, p(y) / q(y)); the rejection happened, so this is the chance of a
    different outcome, not a count of rescues.

The ceiling: an accuracy-preserving rule may only take back rejections where the verifier itself is
unsure. At a position where its top-1 mass is >= 0.99, the rejected y is a token the verifier is sure
is wrong (usually a wrong digit), and accepting it is an error. So the share of rejections at unsure
positions bounds what any such rule can take back, and `rescued_share` shows how much of that share
each rule reaches.

    PYTHONPATH=. python tools/rejection_ceiling.py --problems 60 --steps 4 --block-size 16 \
        > docs/results/leniency/rejection_ceiling.json

The measurement hooks `specdiff.engine.generate.verify` in this process only: the engine is not changed.
"""
from __future__ import annotations

import argparse
import json
import statistics

import torch

import specdiff.engine.generate as engine_generate
from specdiff.acceptance import Cactus, Gated, Linear, Lossless, Typical, row_stats
from specdiff.eval import tasks
from specdiff.models import ModelCache
from specdiff.runs import RunConfig, build_generator
from specdiff.models import quiet_transformers
from specdiff.theory import total_variation

CERTAIN, UNSURE = 0.99, 0.7  # top-1 mass: certain at >= 0.99, unsure below 0.7
RULES = {  # name -> (rule, support measured against)
    "lossless": (Lossless(), "truncated"),
    "typical eps=0.09": (Typical(0.09), "truncated"),
    "typical eps=0.2": (Typical(0.2), "truncated"),
    "cactus delta=8": (Cactus(8.0), "truncated"),
    "gated linear lam=0.3 top<=0.7": (Gated(Linear(0.3), max_top=0.7), "truncated"),
    "gated linear lam=1 top<=0.7 (oracle gate)": (Gated(Linear(1.0), max_top=0.7), "truncated"),
    "gated cactus delta=8 H>=0.5": (Gated(Cactus(8.0), min_entropy=0.5), "truncated"),
    "lossless untruncated": (Lossless(), "untruncated"),
    "typical eps=0.09 untruncated": (Typical(0.09), "untruncated"),
    "gated cactus delta=8 H>=0.5 untruncated": (Gated(Cactus(8.0), min_entropy=0.5), "untruncated"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=60)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    quiet_transformers()
    torch.set_num_threads(1)
    problems = tasks.arith_problems("validation", args.problems)
    cache = ModelCache()
    config = RunConfig("lossless", drafter="masked-drafter", steps=args.steps, block_size=args.block_size)
    speculative = build_generator(config, cache)
    records = []
    real_verify = engine_generate.verify

    def recording_verify(tokens, draft_logits, target_logits, **kwargs):  # tokens [b, B], logits [b, B(+1), V]
        result = real_verify(tokens, draft_logits, target_logits, **kwargs)
        untruncated = speculative.verifier.untruncated_logits()
        for row, j in enumerate(result.num_accepted.tolist()):
            if j < tokens.shape[1]:
                records.append(_record(tokens[row, j], draft_logits[row, j], target_logits[row, j],
                                       untruncated[row, j]))
        return result

    engine_generate.verify = recording_verify
    generator = torch.Generator().manual_seed(args.seed)
    correct, rounds, tokens = 0, 0, 0
    try:
        for problem in problems:
            out = speculative.generate([problem.prompt], max_new_tokens=96, generator=generator)
            correct += tasks.is_correct(out.texts[0], problem.target)
            rounds += out.stats[0].rounds
            tokens += out.stats[0].new_tokens
    finally:
        engine_generate.verify = real_verify
    print(json.dumps(_summary(records, args, correct, rounds, tokens), indent=1))


def _record(y, draft_logits, target_logits, untruncated_logits) -> dict:
    q = draft_logits.double().softmax(-1)  # [V]
    p = target_logits.double().softmax(-1)  # truncated
    p_u = untruncated_logits.double().softmax(-1)
    y = int(y)
    stats = row_stats(p)
    out = dict(top=float(stats.top), entropy=float(stats.entropy), nucleus=int((p > 0).sum()),
               p_y=float(p[y]), p_u_y=float(p_u[y]), q_y=float(q[y]))
    out["accept"] = {name: _acceptance(rule, p if support == "truncated" else p_u, q, y)
                     for name, (rule, support) in RULES.items()}
    return out


def _acceptance(rule, p, q, y) -> float:
    """min(1, p~(y) / q(y)) of one position: p, q [V]."""
    tv = total_variation(p, q).reshape(1, 1)
    stats = row_stats(p.reshape(1, 1, -1))
    p_y, q_y = p[y].reshape(1, 1), q[y].reshape(1, 1)
    relaxed = rule.relax(p_y, q_y, tv, stats).at_draft(p_y, q_y)
    return float(torch.clamp(relaxed / q_y, max=1.0)) if float(q_y) > 0 else 1.0


def _summary(records, args, correct, rounds, tokens) -> dict:
    n = len(records)
    certain = [r for r in records if r["top"] >= CERTAIN]
    unsure = [r for r in records if r["top"] < UNSURE]
    share = lambda rows: round(len(rows) / n, 3) if n else None  # noqa: E731
    mean = lambda values: round(statistics.fmean(values), 4) if values else None  # noqa: E731
    rules = {}
    for name in RULES:
        taken = [r["accept"][name] for r in records]
        rules[name] = dict(rescued_share=mean(taken),  # expected share of all rejections it would accept
                           at_certain=mean([r["accept"][name] for r in certain]),
                           at_unsure=mean([r["accept"][name] for r in unsure]))
    return dict(
        setting=dict(drafter="masked-drafter", steps=args.steps, block_size=args.block_size, rule="lossless",
                     proposal="marginal", problems=args.problems, split="validation", seed=args.seed),
        accuracy=round(correct / args.problems, 4),
        rounds=rounds, tokens_per_round=round(tokens / rounds, 3), rejections=n,
        share_certain=share(certain), share_unsure=share(unsure),
        share_between=share([r for r in records if UNSURE <= r["top"] < CERTAIN]),
        share_outside_nucleus=share([r for r in records if r["p_y"] == 0]),
        share_outside_nucleus_at_certain=round(sum(r["p_y"] == 0 for r in certain) / len(certain), 3) if certain else None,
        outside_nucleus_p_u_y_quartiles=[float(f"{v:.3g}") for v in statistics.quantiles(
            [r["p_u_y"] for r in records if r["p_y"] == 0], n=4)] if sum(r["p_y"] == 0 for r in records) > 1 else None,
        share_outside_nucleus_with_p_u_y_over_0_01=share([r for r in records if r["p_y"] == 0 and r["p_u_y"] > 0.01]),
        mean_nucleus=mean([r["nucleus"] for r in records]),
        ceiling_note=f"an accuracy-preserving rule can take back at most the share of rejections at unsure positions "
                     f"(top-1 < {UNSURE}), plus some of those in between; rules' rescued_share is measured against it",
        rules=rules)


if __name__ == "__main__":
    main()
