"""`lm.sampling.sample_fast` (distillation data's sampler) draws from the same law as the engine's
`sample_rows(sampling_probs(...))`: 200,000 rows in one batched call, a fixed seed, TV <= 0.01 against the
exact nucleus law, and the wide-nucleus fallback and greedy covered."""
import torch

from specdiff.lm.sampling import TOP_P_CANDIDATES, sample_fast, sampling_probs


def _tv(draws, law):
    counts = torch.bincount(draws, minlength=law.shape[-1]).double()
    return 0.5 * float((counts / counts.sum() - law.double()).abs().sum())


def test_the_fast_sampler_draws_the_nucleus_law():
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(1, 500, generator=generator) * 3  # a peaked row: its nucleus inside the candidates
    law = sampling_probs(logits, 0.7, 0.9)[0]
    assert int((law > 0).sum()) < TOP_P_CANDIDATES
    draws = sample_fast(logits.expand(200_000, -1), 0.7, 0.9, 0, generator)
    assert set(draws.unique().tolist()) <= set(law.nonzero()[:, 0].tolist())
    assert _tv(draws, law) <= 0.01


def test_a_wide_nucleus_takes_the_full_path_and_greedy_is_the_argmax():
    generator = torch.Generator().manual_seed(1)
    flat = torch.randn(1, 400, generator=generator) * 0.1  # a flat row: nucleus wider than the candidates
    peaked = torch.randn(1, 400, generator=generator) * 4
    law_flat, law_peaked = sampling_probs(flat, 1.0, 0.95)[0], sampling_probs(peaked, 1.0, 0.95)[0]
    assert int((law_flat > 0).sum()) > TOP_P_CANDIDATES
    rows = torch.cat([flat.expand(100_000, -1), peaked.expand(100_000, -1)])
    draws = sample_fast(rows, 1.0, 0.95, 0, generator)
    assert _tv(draws[:100_000], law_flat) <= 0.03 and _tv(draws[100_000:], law_peaked) <= 0.01
    assert torch.equal(sample_fast(rows[:3], 0.0, 0.9), rows[:3].argmax(-1))
