"""Typical and Gated against values computed by hand and an independent reference (tests/leniency_reference.py,
numpy written from the definitions, one drafted token at a time; nothing from specdiff's relax(), threshold() or
gate()), and a power check: a threshold or gate perturbed by 10 % (or written with a plausible wrong formula)
makes the same comparisons fail (issue 33, item 6).

The statistical positions sit at the edges: for Typical(0.2, 0.9) one position where epsilon binds with a
token at 1.05 epsilon and one at 0.95 epsilon, one where delta exp(-H) binds with tokens at 1.09 and 0.96 of it,
each with q > p there (so whether it is typical changes what is emitted); for Gated(Linear(0.5), max_top=0.6,
min_entropy=1.12) positions at top-1 mass 0.95 m and 1.05 m (entropy far below tau) and at entropy 1.04 tau and
0.96 tau (top-1 mass far above m). Each statistical case is one verify() call over 200,000 rows shared by the
positions; tolerances as in tests/test_verify_exact.py: TV <= 0.012, chi-square p >= 1e-4.
"""
from __future__ import annotations

import math

import leniency_reference as ref
import numpy as np
import pytest
import torch
from exactness import (CHI2_MIN_PVALUE, TV_TOLERANCE, chi_square_pvalue, histogram, random_distribution,
                       total_variation_to)

import specdiff as sd
from specdiff import acceptance, theory

reference, reference_law, reference_acceptance = ref.reference, ref.reference_law, ref.reference_acceptance

NUM_ROWS = 200_000


# -- the edge positions ---------------------------------------------------------------------------------------

TYPICAL = sd.Typical(0.2, 0.9)
TYPICAL_P = torch.tensor([[0.58, 0.21, 0.19, 0.02, 0.0, 0.0, 0.0, 0.0],  # H = 1.04: 0.9 e^-H = 0.32, epsilon binds
                          [0.25, 0.13, 0.115, 0.11, 0.10, 0.10, 0.10, 0.095]],  # H = 2.02: 0.9 e^-H = 0.1197 binds
                         dtype=torch.float64)
TYPICAL_Q = torch.tensor([[0.04, 0.40, 0.40, 0.04, 0.03, 0.03, 0.03, 0.03],
                          [0.05, 0.35, 0.35, 0.05, 0.05, 0.05, 0.05, 0.05]], dtype=torch.float64)

GATED = sd.Gated(sd.Linear(0.5), max_top=0.6, min_entropy=1.12)
GATED_P = torch.tensor([[0.57, 0.40, 0.02, 0.01, 0.0, 0.0, 0.0, 0.0],  # top 0.95 m, H 0.81: open
                        [0.63, 0.35, 0.01, 0.01, 0.0, 0.0, 0.0, 0.0],  # top 1.05 m, H 0.75: closed
                        [0.70, 0.08, 0.06, 0.05, 0.04, 0.03, 0.02, 0.02],  # top 0.7, H 1.161 = 1.04 tau: open
                        [0.70, 0.12, 0.08, 0.04, 0.03, 0.01, 0.01, 0.01]],  # top 0.7, H 1.078 = 0.96 tau: closed
                       dtype=torch.float64)
GATED_Q = torch.tensor([0.05, 0.05, 0.30, 0.30, 0.10, 0.10, 0.05, 0.05], dtype=torch.float64).expand(4, -1)


def test_the_edge_positions_are_where_the_header_says():
    eps, delta = TYPICAL.epsilon, TYPICAL.delta
    entropies = [ref.entropy(p) for p in TYPICAL_P.numpy()]
    assert delta * math.exp(-entropies[0]) > 1.5 * eps  # epsilon binds at position 0
    assert TYPICAL_P[0, 1] / eps == pytest.approx(1.05) and TYPICAL_P[0, 2] / eps == pytest.approx(0.95)
    threshold = delta * math.exp(-entropies[1])
    assert threshold < eps / 1.5  # delta e^-H binds at position 1
    assert 1.05 < TYPICAL_P[1, 1] / threshold < 1.1 and 0.9 < TYPICAL_P[1, 2] / threshold < 0.97
    assert (TYPICAL_Q[:, 1:3] > TYPICAL_P[:, 1:3]).all()
    tops, gate_entropies = GATED_P.max(-1).values, [ref.entropy(p) for p in GATED_P.numpy()]
    assert tops[0] / 0.6 == pytest.approx(0.95) and tops[1] / 0.6 == pytest.approx(1.05)
    assert max(gate_entropies[:2]) < 0.85 * 1.12 and min(tops[2:]) > 1.15 * 0.6
    assert 1.03 < gate_entropies[2] / 1.12 < 1.1 and 0.9 < gate_entropies[3] / 1.12 < 0.97
    assert [ref.gate_open(p, 0.6, 1.12) for p in GATED_P.numpy()] == [True, False, True, False]
    for rows in (TYPICAL_P, TYPICAL_Q, GATED_P, GATED_Q):
        assert torch.allclose(rows.sum(-1), torch.ones(len(rows), dtype=torch.float64), atol=1e-12)


# -- values computed by hand ----------------------------------------------------------------------------------
# p = [1/2, 1/4, 1/4, 0]: H = 1.5 ln 2, e^-H = 2^-1.5 = 0.35355.
HAND_P = torch.tensor([0.5, 0.25, 0.25, 0.0], dtype=torch.float64)
HAND_Q = torch.tensor([0.1, 0.5, 0.2, 0.2], dtype=torch.float64)
HAND_TYPICAL = [
    # Typical(0.3, 0.8): threshold min(0.3, 0.8 * 0.35355 = 0.28284) = 0.28284 (delta binds): typical {0}.
    #   a = [1, min(1, .25/.5) = .5, min(1, .25/.2) = 1, 0/.2 = 0]; acceptance sum q a = .1 + .25 + .2 = .55;
    #   r = .5 * .5 + .2 * 1 = .45; [p - q]+ = [.4, 0, .05, 0], TV = .45; E = q a + r [p - q]+ / TV = p.
    #   Point mass: a typical y is accepted (q(0) = .1 to token 0), an atypical y with p(y) and otherwise
    #   replaced by p off y, which together emit q(y) p: E = .1 e0 + .9 p, acceptance .1 + .25 (.5 + .2) = .275.
    (sd.Typical(0.3, 0.8), [1, 0, 0, 0], 0.55, [0.5, 0.25, 0.25, 0.0], 0.275, [0.55, 0.225, 0.225, 0.0]),
    # Typical(0.3, 1.0): threshold min(0.3, 0.35355) = 0.3 (epsilon binds): typical {0}, the same numbers.
    (sd.Typical(0.3, 1.0), [1, 0, 0, 0], 0.55, [0.5, 0.25, 0.25, 0.0], 0.275, [0.55, 0.225, 0.225, 0.0]),
    # Typical(0.2, 0.8): threshold min(0.2, 0.28284) = 0.2 (epsilon binds): typical {0, 1, 2}.
    #   a = [1, 1, 1, 0]; acceptance .8; r = .2; E = [.1, .5, .2, 0] + .2 [.4, 0, .05, 0] / .45
    #   = [.1 + 8/45, .5, .2 + 1/45, 0]. Point mass: y in {0, 1, 2} accepted, y = 3 (p = 0) emits p:
    #   E = [.1, .5, .2, 0] + .2 p = [.2, .55, .25, 0], acceptance .8.
    (sd.Typical(0.2, 0.8), [1, 1, 1, 0], 0.8, [0.1 + 8 / 45, 0.5, 0.2 + 1 / 45, 0.0], 0.8, [0.2, 0.55, 0.25, 0.0]),
    # Typical(0.3, 0.6): threshold min(0.3, 0.6 * 0.35355 = 0.21213) = 0.21213 (delta binds): typical {0, 1, 2}.
    (sd.Typical(0.3, 0.6), [1, 1, 1, 0], 0.8, [0.1 + 8 / 45, 0.5, 0.2 + 1 / 45, 0.0], 0.8, [0.2, 0.55, 0.25, 0.0]),
]
# Gated(Linear(0.5), ...) on the same pair: open, E = (p + q) / 2 = [.3, .375, .225, .1], acceptance
# 1 - TV / 2 = .775; closed, E = p, acceptance 1 - TV = .55. top-1 mass .5, H = 1.0397.
HAND_GATED = [
    (dict(max_top=0.5), True),  # .5 <= .5
    (dict(max_top=0.49), False),
    (dict(min_entropy=1.03), True),  # 1.0397 >= 1.03
    (dict(min_entropy=1.05), False),
    (dict(max_top=0.4, min_entropy=1.0), True),  # either one opens it
    (dict(max_top=0.4, min_entropy=1.1), False),
]


@pytest.mark.parametrize("rule, typical, accept, law, accept_pm, law_pm", HAND_TYPICAL,
                         ids=["delta-binds", "epsilon-binds", "epsilon-binds-wider", "delta-binds-wider"])
def test_typical_hand_computed_values(rule, typical, accept, law, accept_pm, law_pm):
    assert ref.typical_tokens(HAND_P.numpy(), rule.epsilon, rule.delta).tolist() == [bool(t) for t in typical]
    threshold = rule.threshold(acceptance.row_stats(HAND_P))
    assert ((HAND_P > threshold).tolist()) == [bool(t) for t in typical]
    law, law_pm = torch.tensor(law, dtype=torch.float64), torch.tensor(law_pm, dtype=torch.float64)
    onehots = torch.eye(4, dtype=torch.float64)
    for got_accept, got_law in (reference(rule)(HAND_P.numpy(), HAND_Q.numpy(), False),
                                (float(theory.acceptance_rate(rule, HAND_P, HAND_Q)),
                                 theory.emitted_distribution(rule, HAND_P, HAND_Q))):
        assert got_accept == pytest.approx(accept, abs=1e-12)
        assert torch.allclose(torch.as_tensor(got_law), law, atol=1e-12)
    assert reference_acceptance(rule, HAND_P, HAND_Q, True) == pytest.approx(accept_pm, abs=1e-12)
    assert torch.allclose(reference_law(rule, HAND_P, HAND_Q, True), law_pm, atol=1e-12)
    theory_pm = sum(HAND_Q[y] * theory.emitted_distribution(rule, HAND_P, onehots[y]) for y in range(4))
    assert torch.allclose(theory_pm, law_pm, atol=1e-12)
    assert float(sum(HAND_Q[y] * theory.acceptance_rate(rule, HAND_P, onehots[y]) for y in range(4))) == pytest.approx(
        accept_pm, abs=1e-12)


@pytest.mark.parametrize("gate, is_open", HAND_GATED, ids=[str(g) for g, _ in HAND_GATED])
def test_gated_hand_computed_values(gate, is_open):
    rule = sd.Gated(sd.Linear(0.5), **gate)
    law = [0.3, 0.375, 0.225, 0.1] if is_open else [0.5, 0.25, 0.25, 0.0]
    accept = 0.775 if is_open else 0.55
    assert ref.gate_open(HAND_P.numpy(), gate.get("max_top"), gate.get("min_entropy")) is is_open
    assert bool(rule.gate(acceptance.row_stats(HAND_P))) is is_open
    for got_accept, got_law in (reference(rule)(HAND_P.numpy(), HAND_Q.numpy(), False),
                                (float(theory.acceptance_rate(rule, HAND_P, HAND_Q)),
                                 theory.emitted_distribution(rule, HAND_P, HAND_Q))):
        assert got_accept == pytest.approx(accept, abs=1e-12)
        assert torch.allclose(torch.as_tensor(got_law), torch.tensor(law, dtype=torch.float64), atol=1e-12)


# -- theory (the library's relax() enumerated) against the reference, exactly ---------------------------------

THEORY_RULES = [
    sd.Typical(0.2, 0.9), sd.Typical(0.09), sd.Typical(0.4, 0.2),
    sd.Gated(sd.Linear(0.5), max_top=0.6, min_entropy=1.12), sd.Gated(sd.TVBudget(0.2), min_entropy=1.0),
    sd.Gated(sd.Cactus(0.5), max_top=0.6, min_entropy=1.0), sd.Gated(sd.Typical(0.2, 0.9), max_top=0.7),
]


def _theory(rule, p, q, point_mass):
    """theory's acceptance and law at one position; point mass: the mixture over y ~ q of verifying onehot(y)."""
    if not point_mass:
        return float(theory.acceptance_rate(rule, p, q)), theory.emitted_distribution(rule, p, q)
    onehots = torch.eye(p.shape[-1], dtype=p.dtype)
    return (float(sum(q[y] * theory.acceptance_rate(rule, p, onehots[y]) for y in range(len(q)))),
            sum(q[y] * theory.emitted_distribution(rule, p, onehots[y]) for y in range(len(q))))


def _theory_gap(rule, pairs, point_mass) -> float:
    """The largest difference between theory and the reference over the pairs, acceptance or law."""
    gap = 0.0
    for p, q in pairs:
        accept, law = _theory(rule, p, q, point_mass)
        ref_accept, ref_law = reference(rule)(p.numpy(), q.numpy(), point_mass)
        gap = max(gap, abs(accept - ref_accept), float((law - torch.from_numpy(ref_law)).abs().max()))
    return gap


def _pairs():
    generator = torch.Generator().manual_seed(33)
    pairs = [(p, q) for p, q in zip(TYPICAL_P, TYPICAL_Q)] + [(p, q) for p, q in zip(GATED_P, GATED_Q)]
    for concentration in (0.3, 0.7, 3.0):  # peaked to flat rows: gates open and closed, small and large typical sets
        for _ in range(8):
            pairs.append((random_distribution(generator, vocab=8, concentration=concentration),
                          random_distribution(generator, vocab=8, concentration=concentration)))
    return pairs


PAIRS = _pairs()


@pytest.mark.parametrize("point_mass", [False, True], ids=["marginal", "pointmass"])
@pytest.mark.parametrize("rule", THEORY_RULES, ids=repr)
def test_theory_equals_the_independent_reference(rule, point_mass):
    assert _theory_gap(rule, PAIRS, point_mass) <= 1e-9
    if isinstance(rule, sd.Gated):  # both states of the gate occur among the pairs
        assert {ref.gate_open(p.numpy(), rule.max_top, rule.min_entropy) for p, _ in PAIRS} == {True, False}
    else:  # and tokens on both sides of the threshold with q > p
        sides = {bool(ref.typical_tokens(p.numpy(), rule.epsilon, rule.delta)[v])
                 for p, q in PAIRS for v in range(8) if q[v] > p[v] > 0}
        assert sides == {True, False}


# -- verify() against the reference at the edges, and the power check ------------------------------------------


def _measure(rule, p_rows, q_rows, method="token", point_mass=False, seed=2024):
    """One verify() call: rows split evenly over the positions (p_rows, q_rows [K, V]); draft y ~ q of the row's
    position. Returns (counts of (position, first emitted token) [K * V], acceptance per position [K])."""
    positions, vocab = p_rows.shape
    generator = torch.Generator().manual_seed(seed)
    position = torch.arange(NUM_ROWS) % positions
    q = q_rows[position]  # [N, V]
    draft = torch.multinomial(q, 1, replacement=True, generator=generator)  # [N, 1]
    bonus = torch.full((NUM_ROWS, 1, vocab), 1.0 / vocab, dtype=torch.float64)
    target = torch.cat([p_rows[position].unsqueeze(1), bonus], dim=1)  # [N, 2, V]
    result = sd.verify(draft, None if point_mass else q.unsqueeze(1), target, rule=rule, method=method,
                       generator=generator)
    counts = histogram(position * vocab + result.tokens[:, 0], positions * vocab)
    accepted = torch.stack([(result.num_accepted[position == k] >= 1).double().mean() for k in range(positions)])
    return counts, accepted


def _compare(rule, p_rows, q_rows, counts, accepted, point_mass):
    """The comparison the tests make: (TV of the (position, token) histogram to the reference's joint law,
    chi-square p-value, largest acceptance gap over the positions)."""
    positions = len(p_rows)
    laws = [reference_law(rule, p, q, point_mass) / positions for p, q in zip(p_rows, q_rows)]
    expected = torch.cat(laws)
    wanted = torch.tensor([reference_acceptance(rule, p, q, point_mass) for p, q in zip(p_rows, q_rows)])
    return (total_variation_to(counts, expected), chi_square_pvalue(counts, expected),
            float((accepted - wanted).abs().max()))


ACCEPTANCE_TOLERANCE = 0.011  # 5 binomial standard errors at 50,000 rows per position


CASES = {  # id: (rule, positions p, q, method, point mass)
    "typical-token-marginal": (TYPICAL, TYPICAL_P, TYPICAL_Q, "token", False),
    "typical-token-pointmass": (TYPICAL, TYPICAL_P, TYPICAL_Q, "token", True),
    "gated-token-marginal": (GATED, GATED_P, GATED_Q, "token", False),
    "gated-block-marginal": (GATED, GATED_P, GATED_Q, "block", False),
    "gated-token-pointmass": (GATED, GATED_P, GATED_Q, "token", True),
}


@pytest.mark.parametrize("case", list(CASES))
def test_verify_emits_the_reference_law_at_the_edges(case):
    rule, p_rows, q_rows, method, point_mass = CASES[case]
    counts, accepted = _measure(rule, p_rows, q_rows, method, point_mass)
    tv, pvalue, acceptance_gap = _compare(rule, p_rows, q_rows, counts, accepted, point_mass)
    assert tv <= TV_TOLERANCE and pvalue >= CHI2_MIN_PVALUE, (tv, pvalue)
    assert acceptance_gap <= ACCEPTANCE_TOLERANCE


def _typical_threshold(kind):
    """Typical.threshold written wrongly: a parameter off by 10 %, the whole threshold off by 10 %, max for min,
    H in bits, or e^+H."""
    def threshold(self, stats):
        eps, delta, h = self.epsilon, self.delta, stats.entropy
        if kind == "epsilon*1.1":
            eps *= 1.1
        elif kind == "epsilon*0.9":
            eps *= 0.9
        elif kind == "delta*1.1":
            delta *= 1.1
        elif kind == "delta*0.9":
            delta *= 0.9
        elif kind == "bits":
            h = h / math.log(2)
        elif kind == "exp(+H)":
            h = -h
        value = delta * torch.exp(-h)
        bound = torch.full_like(value, eps)
        out = torch.maximum(value, bound) if kind == "max" else torch.minimum(value, bound)
        return {"threshold*1.1": 1.1, "threshold*0.9": 0.9}.get(kind, 1.0) * out
    return threshold


def _gated_gate(kind):
    """Gated.gate written wrongly: max_top or min_entropy off by 10 %, "and" for "or", or inverted."""
    def gate(self, stats):
        top = stats.top <= self.max_top * {"max_top*1.1": 1.1, "max_top*0.9": 0.9}.get(kind, 1.0)
        unsure = stats.entropy >= self.min_entropy * {"min_entropy*1.1": 1.1, "min_entropy*0.9": 0.9}.get(kind, 1.0)
        if kind == "and":
            return top & unsure
        if kind == "inverted":
            return ~(top | unsure)
        return top | unsure
    return gate


PERTURBATIONS = (
    [("typical", kind) for kind in ("epsilon*1.1", "epsilon*0.9", "delta*1.1", "delta*0.9", "threshold*1.1",
                                    "threshold*0.9", "max", "bits", "exp(+H)")]
    + [("gated", kind) for kind in ("max_top*1.1", "max_top*0.9", "min_entropy*1.1", "min_entropy*0.9", "and",
                                    "inverted")])


@pytest.mark.parametrize("family, kind", PERTURBATIONS, ids=[f"{f}-{k}" for f, k in PERTURBATIONS])
def test_a_perturbed_threshold_or_gate_fails_the_comparisons(family, kind, monkeypatch):
    """Power: with the library's threshold (or gate) written wrongly, theory no longer equals the reference and
    verify()'s histogram at the edge positions is further than the tolerance from the reference's law."""
    if family == "typical":
        monkeypatch.setattr(acceptance.Typical, "threshold", _typical_threshold(kind))
        rule, p_rows, q_rows = TYPICAL, TYPICAL_P, TYPICAL_Q
    else:
        monkeypatch.setattr(acceptance.Gated, "gate", _gated_gate(kind))
        rule, p_rows, q_rows = GATED, GATED_P, GATED_Q
    assert _theory_gap(rule, PAIRS, point_mass=False) > 1e-3
    counts, accepted = _measure(rule, p_rows, q_rows)
    tv, pvalue, acceptance_gap = _compare(rule, p_rows, q_rows, counts, accepted, False)
    assert tv > TV_TOLERANCE and pvalue < CHI2_MIN_PVALUE, (tv, pvalue)
    assert acceptance_gap > ACCEPTANCE_TOLERANCE


def test_the_unperturbed_threshold_and_gate_written_here_are_the_library_s(monkeypatch):
    """The perturbation helpers with no perturbation pass the comparisons: what fails above is the perturbation."""
    monkeypatch.setattr(acceptance.Typical, "threshold", _typical_threshold("none"))
    monkeypatch.setattr(acceptance.Gated, "gate", _gated_gate("none"))
    for rule, p_rows, q_rows in ((TYPICAL, TYPICAL_P, TYPICAL_Q), (GATED, GATED_P, GATED_Q)):
        assert _theory_gap(rule, PAIRS, point_mass=False) <= 1e-9
        counts, accepted = _measure(rule, p_rows, q_rows)
        tv, pvalue, acceptance_gap = _compare(rule, p_rows, q_rows, counts, accepted, False)
        assert tv <= TV_TOLERANCE and pvalue >= CHI2_MIN_PVALUE and acceptance_gap <= ACCEPTANCE_TOLERANCE


@pytest.mark.parametrize("rule", THEORY_RULES + [sd.Lossless(), sd.Linear(0.3), sd.Cactus(1.0)], ids=repr)
def test_the_per_draft_acceptance_averages_to_the_reference_acceptance(rule):
    """ref.draft_acceptance (what tests/engine/test_leniency_engine.py predicts each engine position with) is the
    per-draft form of the reference: its average over y ~ q is the reference's acceptance, marginal and point mass."""
    for p, q in PAIRS:
        per_draft = sum(float(q[y]) * ref.draft_acceptance(rule, p, q, y) for y in range(8))
        assert per_draft == pytest.approx(reference_acceptance(rule, p, q), abs=1e-12)
        onehots = np.eye(8)
        point_mass = sum(float(q[y]) * ref.draft_acceptance(rule, p, onehots[y], y) for y in range(8))
        assert point_mass == pytest.approx(reference_acceptance(rule, p, q, True), abs=1e-12)
