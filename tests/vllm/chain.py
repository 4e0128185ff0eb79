"""The exact law of what vLLM emits under a rule, by enumeration (not a test module).

vLLM's chain, per request: the prefill samples x_1 from the target p; then each round drafts B tokens
after the committed ones and verifies them (token verification on the relaxed target p~ of the rule:
accept y_i with probability min(1, p~_i(y_i)/q_i(y_i)), else emit one token from norm([p~_i - q_i]+)
and end the round; after B acceptances emit a bonus token from the unrelaxed p), until at least L
tokens are out; the first L are kept. q is the draft's distribution (probabilistic drafting) or the
point mass on the drafted token (greedy drafting: y_i is the argmax of the draft).

`chain_law` returns the law of (x_1..x_L) as a flat tensor [V^L] (index x_1 V^(L-1) + ... + x_L), the
expected number of rounds and the expected number of rounds whose position i was accepted, i = 1..B.
With method="block" each round is Sun et al.'s block verification on the relaxed targets instead
(`block_round`: the exact law of the number of accepted drafts and of the token after them).
The per-position acceptance of `specdiff.theory.acceptance_rate` is what each round's walk uses.
"""
from __future__ import annotations

import itertools
import math

import torch

from specdiff import theory
from specdiff.acceptance import row_stats
from specdiff.lm.sampling import sampling_probs


class Model:
    """p(. | prefix) of a causal LM at a temperature and top-p, cached per prefix (float64)."""

    def __init__(self, model, temperature=1.0, top_p=1.0):
        self.model, self.temperature, self.top_p, self.cache = model, temperature, top_p, {}

    def __call__(self, prefix: tuple) -> torch.Tensor:
        if prefix not in self.cache:
            with torch.no_grad():
                logits = self.model(input_ids=torch.tensor([prefix])).logits[0, -1].double()
            self.cache[prefix] = sampling_probs(logits[None, None], self.temperature, self.top_p, 0)[0, 0]
        return self.cache[prefix]


def relaxed(rule, p, q, token):
    """p~ at one position for drafted token y (Cactus's and Typical's depend on y; Typical and Gated read
    p's row statistics): [V]."""
    p_draft, q_draft = p[token].reshape(1), q[token].reshape(1)
    tv = theory.total_variation(p, q).reshape(1)
    stats = row_stats(p.reshape(1, -1)) if getattr(rule, "needs_stats", False) else None
    coef = rule.relax(p_draft, q_draft, tv, stats)
    out = coef.p_coef * p + coef.q_coef * q
    out[token] += coef.onehot_coef[0]
    return out.clamp(min=0)


def block_round(p_tilde, q, tokens):
    """Sun et al.'s block verification (Algorithm 2) of one round, exactly: p_tilde [B, V] the relaxed
    targets at the drafted positions, q [B, V], tokens the B drafted tokens. Returns (P(tau = i) for
    i = 0..B, the residual rows [B, V] drawn from at tau = i < B).

    Weights p_0 = 1, p_i = min(1, p_{i-1} p~_i(y_i) / q_i(y_i)); Z_{i+1} = sum_x [p_i p~_{i+1}(x) -
    q_{i+1}(x)]+; h_i = Z_{i+1} / (Z_{i+1} + 1 - p_i) (1 where that is 0/0), h_0 = 1, h_B = p_B; tau is
    the largest i with an independent uniform eta_i <= h_i, so P(tau = i) = h_i prod_{j > i} (1 - h_j);
    the token after tau < B accepted drafts is drawn from norm([p_tau p~_{tau+1} - q_{tau+1}]+)."""
    block = len(tokens)
    weights = [1.0]
    for i, y in enumerate(tokens):
        weights.append(min(1.0, weights[-1] * float(p_tilde[i, y] / q[i, y])))
    h, residuals = [], []
    for i in range(block):
        raw = (weights[i] * p_tilde[i] - q[i]).clamp(min=0)
        mass = float(raw.sum())
        denominator = mass + 1.0 - weights[i]
        h.append(mass / denominator if denominator > 0 else 1.0)
        residuals.append(raw / mass if mass > 0 else raw)
    h.append(weights[block])
    h[0] = 1.0
    stop = [h[i] * math.prod(1.0 - h[j] for j in range(i + 1, block + 1)) for i in range(block + 1)]
    return stop, residuals


def chain_law(target: Model, draft: Model, prompt, length: int, block: int, rule, greedy_draft: bool,
              method: str = "token"):
    vocab = target(tuple(prompt)).shape[-1]
    law = torch.zeros(vocab ** length, dtype=torch.float64)
    rounds = 0.0
    accepted = torch.zeros(block, dtype=torch.float64)

    def drafts(prefix):
        """(draft tokens, their probability, q rows [B, V]) for every possible draft."""
        if greedy_draft:
            tokens, rows, pre = [], [], prefix
            for _ in range(block):
                y = int(draft(pre).argmax())
                rows.append(torch.nn.functional.one_hot(torch.tensor(y), vocab).double())
                tokens.append(y)
                pre = pre + (y,)
            yield tokens, 1.0, rows
            return
        for tokens in itertools.product(range(vocab), repeat=block):
            prob, rows, pre = 1.0, [], prefix
            for y in tokens:
                q = draft(pre)
                prob *= float(q[y])
                rows.append(q)
                pre = pre + (y,)
            if prob > 0:
                yield list(tokens), prob, rows

    def walk(prefix, emitted, mass):
        nonlocal rounds
        if len(emitted) >= length:
            index = 0
            for token in emitted[:length]:
                index = index * vocab + token
            law[index] += mass
            return
        rounds += mass
        if method == "block":
            walk_block(prefix, emitted, mass)
            return
        for tokens, draft_mass, q_rows in drafts(prefix):
            keep = mass * draft_mass
            pre = prefix
            for i, (y, q) in enumerate(zip(tokens, q_rows)):
                p = target(pre)
                p_tilde = relaxed(rule, p, q, y)
                accept = min(1.0, float(p_tilde[y] / q[y]))
                residual = (p_tilde - q).clamp(min=0)
                residual = residual / residual.sum() if residual.sum() > 1e-12 else p_tilde / p_tilde.sum()
                for z in range(vocab):
                    if residual[z] > 0 and accept < 1.0:
                        walk(pre + (z,), emitted + tokens[:i] + [z], keep * (1 - accept) * float(residual[z]))
                keep *= accept
                if keep == 0:
                    break
                accepted[i] += keep
                pre = pre + (y,)
            else:
                bonus = target(pre)
                for z in range(vocab):
                    if bonus[z] > 0:
                        walk(pre + (z,), emitted + tokens + [z], keep * float(bonus[z]))

    def walk_block(prefix, emitted, mass):
        for tokens, draft_mass, q_rows in drafts(prefix):
            keep = mass * draft_mass
            pre, p_tilde = prefix, []
            for y, q in zip(tokens, q_rows):
                p_tilde.append(relaxed(rule, target(pre), q, y))
                pre = pre + (y,)
            stop, residuals = block_round(torch.stack(p_tilde), torch.stack(q_rows), tokens)
            for i, chance in enumerate(stop):
                if chance <= 0:
                    continue
                accepted[:i] += keep * chance
                row = residuals[i] if i < block else target(prefix + tuple(tokens))
                for z in range(vocab):
                    if row[z] > 0:
                        walk(prefix + tuple(tokens[:i]) + (z,), emitted + tokens[:i] + [z],
                             keep * chance * float(row[z]))

    first = target(tuple(prompt))
    for x in range(vocab):
        walk(tuple(prompt) + (x,), [x], float(first[x]))
    return law, rounds, accepted


