"""Shared reference computations for the exactness tests (not a test module)."""
from __future__ import annotations

import torch
from scipy import stats

from specdiff import theory

# With n samples over k cells the expected TV of an empirical histogram is about
# 0.4 * sum_i sqrt(P_i / n) <= 0.4 * sqrt(k / n); for k = 16, n = 200,000 that is 0.0036.
TV_TOLERANCE = 0.012
CHI2_MIN_PVALUE = 1e-4


def random_distribution(generator, *shape, vocab, concentration=0.7, dtype=torch.float64):
    gamma = torch.distributions.Gamma(torch.full((vocab,), concentration), torch.ones(vocab))
    torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=generator)))
    sample = gamma.sample(shape).to(dtype) + 1e-6
    return sample / sample.sum(-1, keepdim=True)


def expected_first_token(rule, p, q, point_mass):
    """What one position emits: the rule's target (mixture over y ~ q in point-mass mode)."""
    if not point_mass:
        return theory.emitted_distribution(rule, p, q)
    vocab = p.shape[-1]
    onehots = torch.eye(vocab, dtype=p.dtype)
    return sum(q[v] * theory.emitted_distribution(rule, p, onehots[v]) for v in range(vocab))


def expected_acceptance(rule, p, q, point_mass):
    if not point_mass:
        return float(theory.acceptance_rate(rule, p, q))
    vocab = p.shape[-1]
    onehots = torch.eye(vocab, dtype=p.dtype)
    return float(sum(q[v] * theory.acceptance_rate(rule, p, onehots[v]) for v in range(vocab)))


def histogram(values, num_cells):
    return torch.bincount(values.long(), minlength=num_cells).double()


def total_variation_to(counts, expected):
    return 0.5 * (counts / counts.sum() - expected).abs().sum().item()


def chi_square_pvalue(counts, expected):
    """Chi-square goodness of fit; cells with tiny expectation are pooled."""
    n = counts.sum()
    expected_counts = expected * n
    keep = expected_counts >= 5
    observed = torch.cat([counts[keep], counts[~keep].sum().reshape(1)])
    wanted = torch.cat([expected_counts[keep], expected_counts[~keep].sum().reshape(1)])
    if wanted[-1] < 5:  # merge the pooled tail into the largest cell
        observed, wanted = observed[:-1].clone(), wanted[:-1].clone()
        observed[0] += counts[~keep].sum()
        wanted[0] += expected_counts[~keep].sum()
    wanted = wanted * observed.sum() / wanted.sum()
    return stats.chisquare(observed.numpy(), wanted.numpy()).pvalue
