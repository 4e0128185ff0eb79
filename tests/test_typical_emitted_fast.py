"""theory.emitted_distribution's O(V) Typical path (used on real vocabularies) against the enumeration over
drafted tokens (`_by_drafted_token`, itself checked against sampled verification in
tests/test_verify_leniency_rules.py), on random rows of several shapes and thresholds."""
import pytest
import torch

import specdiff as sd
from specdiff import theory


@pytest.mark.parametrize("epsilon, delta", [(0.09, None), (0.3, 0.8), (0.05, 0.5), (1.0, 1.0)])
def test_typical_closed_form_equals_the_enumeration(epsilon, delta):
    generator = torch.Generator().manual_seed(7)
    p = torch.softmax(3 * torch.randn(6, 12, generator=generator, dtype=torch.float64), dim=-1)
    q = torch.softmax(3 * torch.randn(6, 12, generator=generator, dtype=torch.float64), dim=-1)
    q[0] = p[0]  # p = q: nothing is rejected
    q[1, :6] = 0
    q[1] /= q[1].sum()  # q with zeros
    rule = sd.Typical(epsilon, delta)
    accept, residual = theory._by_drafted_token(rule, p, q)
    enumerated = q * accept + ((q * (1 - accept)).unsqueeze(-1) * residual).sum(dim=-2)
    fast = theory.emitted_distribution(rule, p, q)
    assert torch.allclose(fast, enumerated, atol=1e-12)
    assert torch.allclose(fast.sum(-1), torch.ones(6, dtype=torch.float64), atol=1e-12)
    assert torch.allclose(fast[0], p[0], atol=1e-12)  # q = p: the emitted law is p
