"""The exact law of what vLLM emits under a rule, by enumeration (not a test module).

vLLM's chain, per request: the prefill samples x_1 from the target p; then each round drafts B tokens
after the committed ones and verifies them (token verification on the relaxed target p~ of the rule:
accept y_i with probability min(1, p~_i(y_i)/q_i(y_i)), else emit one token from norm([p~_i - q_i]+)
and end the round; after B acceptances emit a bonus token from the unrelaxed p), until at least L
tokens are out; the first L are kept. q is the draft's distribution (probabilistic drafting) or the
point mass on the drafted token (greedy drafting: y_i is the argmax of the draft).

`chain_law` returns the law of (x_1..x_L) as a flat tensor [V^L] (index x_1 V^(L-1) + ... + x_L), the
expected number of rounds and the expected number of rounds whose position i was accepted, i = 1..B.
The per-position acceptance of `specdiff.theory.acceptance_rate` is what each round's walk uses.
"""
from __future__ import annotations

import itertools

import torch

from specdiff import theory
from specdiff.lm.sampling import sampling_probs


class Model:
    """p(. | prefix) of a causal LM at a temperature, cached per prefix (float64)."""

    def __init__(self, model, temperature=1.0):
        self.model, self.temperature, self.cache = model, temperature, {}

    def __call__(self, prefix: tuple) -> torch.Tensor:
        if prefix not in self.cache:
            with torch.no_grad():
                logits = self.model(input_ids=torch.tensor([prefix])).logits[0, -1].double()
            self.cache[prefix] = sampling_probs(logits[None, None], self.temperature, 1.0, 0)[0, 0]
        return self.cache[prefix]


def relaxed(rule, p, q, token):
    """p~ at one position for drafted token y (Cactus's depends on y): [V]."""
    p_draft, q_draft = p[token].reshape(1), q[token].reshape(1)
    tv = theory.total_variation(p, q).reshape(1)
    coef = rule.relax(p_draft, q_draft, tv)
    out = coef.p_coef * p + coef.q_coef * q
    out[token] += coef.onehot_coef[0]
    return out.clamp(min=0)


def chain_law(target: Model, draft: Model, prompt, length: int, block: int, rule, greedy_draft: bool):
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

    first = target(tuple(prompt))
    for x in range(vocab):
        walk(tuple(prompt) + (x,), [x], float(first[x]))
    return law, rounds, accepted


