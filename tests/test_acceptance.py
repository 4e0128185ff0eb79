import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import specdiff as sd
from specdiff.acceptance import bernoulli_kl, cactus_gamma, cactus_gamma_taylor


@pytest.mark.parametrize("lam", [-0.1, 1.5, float("nan")])
def test_linear_rejects_lambda_outside_unit_interval(lam):
    with pytest.raises(ValueError, match="lam"):
        sd.Linear(lam)


def test_tvbudget_rejects_negative_eps():
    with pytest.raises(ValueError, match="eps must be >= 0"):
        sd.TVBudget(-0.01)


def test_cactus_rejects_negative_delta_and_unknown_solver():
    with pytest.raises(ValueError, match="delta must be >= 0"):
        sd.Cactus(-1e-3)
    with pytest.raises(ValueError, match="solver"):
        sd.Cactus(0.1, solver="bisect")


def test_boundary_leniencies_are_valid():
    assert sd.Linear(0.0).lossless and not sd.Linear(1.0).lossless
    assert sd.TVBudget(0.0).lossless and sd.Cactus(0.0).lossless


probabilities = st.floats(min_value=1e-12, max_value=1 - 1e-9, allow_nan=False)
budgets = st.floats(min_value=1e-9, max_value=30.0, allow_nan=False)


@settings(max_examples=300, deadline=None)
@given(p=probabilities, delta=budgets)
def test_cactus_gamma_solves_eq17(p, delta):
    gamma = cactus_gamma(torch.tensor([p], dtype=torch.float64), delta).item()
    assert p <= gamma <= 1.0
    if delta >= math.log(1.0 / p):
        assert gamma == 1.0
    else:
        # gamma* < 1 in exact arithmetic; it may round to 1.0 when the root lies within 1e-16 of 1
        phi = bernoulli_kl(torch.tensor(gamma, dtype=torch.float64), torch.tensor(p, dtype=torch.float64)).item()
        assert abs(phi - delta) <= 1e-6, (p, delta, gamma, phi)


@settings(max_examples=200, deadline=None)
@given(p=probabilities, delta=st.floats(min_value=1e-6, max_value=5.0))
def test_cactus_gamma_is_the_largest_feasible(p, delta):
    """Phi is increasing on [p, 1]: a slightly larger gamma must break the budget."""
    gamma = cactus_gamma(torch.tensor([p], dtype=torch.float64), delta).item()
    if gamma < 1.0:
        bigger = torch.tensor(min(1.0, gamma + 1e-6 + 1e-3 * (1 - gamma)), dtype=torch.float64)
        assert bernoulli_kl(bigger, torch.tensor(p, dtype=torch.float64)).item() > delta


@settings(max_examples=100, deadline=None)
@given(p=st.floats(min_value=0.0, max_value=1.0))
def test_cactus_gamma_is_p_at_zero_budget(p):
    gamma = cactus_gamma(torch.tensor([p], dtype=torch.float64), 0.0).item()
    assert gamma == p


def test_cactus_gamma_extremes_are_stable():
    p = torch.tensor([0.0, 1e-300, 1e-30, 1e-8, 0.5, 1 - 1e-8, 1 - 1e-15, 1.0], dtype=torch.float64)
    for delta in (1e-10, 1e-3, 0.5, 10.0, 1000.0):
        gamma = cactus_gamma(p, delta)
        assert torch.isfinite(gamma).all()
        assert (gamma >= p).all() and (gamma <= 1).all()
        assert gamma[0] == 0.0  # p(y) = 0 cannot be lifted with a finite KL
        assert gamma[-1] == 1.0
    # delta >= log(1/p) reaches 1
    assert cactus_gamma(torch.tensor([0.25], dtype=torch.float64), math.log(4.0) + 1e-9).item() == 1.0


def test_cactus_gamma_float32_inputs_match_float64():
    p = torch.rand(1000, generator=torch.Generator().manual_seed(0)) * 0.999 + 1e-4
    assert torch.allclose(cactus_gamma(p, 0.2), cactus_gamma(p.double(), 0.2), atol=1e-6)


def test_taylor_agrees_with_newton_for_small_budgets_and_not_for_large():
    p = torch.tensor([0.3], dtype=torch.float64)
    small = 1e-6
    assert abs(cactus_gamma(p, small).item() - cactus_gamma_taylor(p, small).item()) < 1e-6
    # For a large budget the second-order expansion misses the exact KL budget (Appendix E).
    big = 0.3
    taylor = cactus_gamma_taylor(p, big)
    assert abs(bernoulli_kl(taylor, p).item() - big) > 1e-2
    assert abs(cactus_gamma(p, big).item() - taylor.item()) > 1e-2


def test_cactus_relaxation_is_a_distribution():
    torch.manual_seed(0)
    vocab = 7
    p = torch.distributions.Dirichlet(torch.ones(vocab)).sample((50,)).double()
    y = torch.randint(0, vocab, (50,))
    p_y = p.gather(1, y[:, None]).squeeze(1)
    relax = sd.Cactus(0.4).relax(p_y[:, None], torch.ones(50, 1, dtype=torch.float64))
    relaxed = relax.p_coef * p + relax.onehot_coef * torch.nn.functional.one_hot(y, vocab)
    assert torch.allclose(relaxed.sum(-1), torch.ones(50, dtype=torch.float64))
    assert (relaxed >= -1e-12).all()
    gamma = cactus_gamma(p_y, 0.4)
    assert torch.allclose(relaxed.gather(1, y[:, None]).squeeze(1), gamma)
    kl = (torch.xlogy(relaxed, relaxed) - torch.xlogy(relaxed, p)).sum(-1)
    assert (kl <= 0.4 + 1e-6).all()


def test_scalar_and_tensor_newton_agree():
    """Small CPU batches take the scalar path, large ones the tensor path: same answers."""
    from specdiff.acceptance import _newton_gamma_scalar, _newton_gamma_tensor

    generator = torch.Generator().manual_seed(1)
    p = torch.cat([torch.rand(300, generator=generator, dtype=torch.float64) ** 6,
                   torch.tensor([0.0, 1.0, 1e-300, 1 - 1e-12], dtype=torch.float64)])
    for delta in (0.0, 1e-4, 0.3, 4.0):
        tensor_path = _newton_gamma_tensor(p, delta, 60, 1e-12)
        scalar_path = torch.tensor([_newton_gamma_scalar(v, delta, 60, 1e-12) for v in p.tolist()], dtype=torch.float64)
        assert torch.allclose(tensor_path, scalar_path, atol=1e-9, rtol=0), delta
