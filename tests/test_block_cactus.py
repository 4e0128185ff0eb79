"""Block verification with Cactus and a real proposal (issue 11, item 7): C, the fixed target, is
computed without an O(V^2) or [b, B, V] tensor, matches its O(V^2) definition, and the block weights
are the ones that definition gives."""
import pytest
import torch

import specdiff as sd
import specdiff.acceptance as acceptance
from specdiff import theory

from exactness import random_distribution

RULES = [sd.Cactus(0.3), sd.Cactus(0.0), sd.Cactus(0.005), sd.Cactus(2.0), sd.Cactus(0.3, solver="taylor")]


def _pairs(seed, rows=3):
    """p and q [rows, V] with exact zeros in either, and a row where p = q."""
    generator = torch.Generator().manual_seed(seed)
    vocab = int(torch.randint(2, 40, (1,), generator=generator))
    concentration = 0.05 + 2 * float(torch.rand(1, generator=generator))
    p = random_distribution(generator, rows, vocab=vocab, concentration=concentration)
    q = random_distribution(generator, rows, vocab=vocab, concentration=concentration)
    if seed % 3 == 0:
        p[:, : vocab // 3] = 0
    if seed % 4 == 0:
        q[:, vocab // 2 :] = 0
    if seed % 5 == 0:
        q[0] = p[0]
    return p / p.sum(-1, keepdim=True), q / q.sum(-1, keepdim=True)


@pytest.mark.parametrize("kinks", [acceptance.HINGE_KINKS, 0], ids=["hinges", "buckets"])
@pytest.mark.parametrize("rule", RULES, ids=repr)
def test_emitted_distribution_matches_its_quadratic_definition(rule, kinks, monkeypatch):
    monkeypatch.setattr(acceptance, "HINGE_KINKS", kinks)
    for seed in range(60):
        p, q = _pairs(seed)
        expected = theory.emitted_distribution(rule, p, q)  # O(V^2): the mixture over every draft y
        assert torch.allclose(acceptance.cactus_emitted_distribution(p, q, rule), expected, atol=1e-12, rtol=0)
        in_float32 = acceptance.cactus_emitted_distribution(p.float(), q.float(), rule)
        assert in_float32.dtype == torch.float32
        assert torch.allclose(in_float32.double(), expected, atol=2e-6, rtol=0)


def test_block_cactus_weights_follow_the_fixed_target():
    """p_i = min(1, p_{i-1} C_i(y_i) / q_i(y_i)) with C from its definition, at every position."""
    generator = torch.Generator().manual_seed(4)
    batch, block_len, vocab = 6, 4, 300
    rule = sd.Cactus(0.2)
    p = random_distribution(generator, batch, block_len + 1, vocab=vocab, concentration=0.3)
    q = random_distribution(generator, batch, block_len, vocab=vocab, concentration=0.3)
    draft = torch.multinomial(q.reshape(-1, vocab), 1, generator=generator).reshape(batch, block_len)
    result = sd.verify(draft, q, p, rule=rule, method="block", generator=generator)
    emitted = theory.emitted_distribution(rule, p[:, :block_len], q)  # [b, B, V]
    ratio = emitted.gather(-1, draft.unsqueeze(-1)).squeeze(-1) / q.gather(-1, draft.unsqueeze(-1)).squeeze(-1)
    weight, expected = torch.ones(batch, dtype=torch.float64), []
    for i in range(block_len):
        weight = torch.clamp(weight * ratio[:, i], max=1.0)
        expected.append(weight)
    assert torch.allclose(result.accept_prob, torch.stack(expected, 1), atol=1e-10)


@pytest.mark.parametrize("inputs", ["probs", "logits"])
def test_block_cactus_reads_no_dense_block(inputs, monkeypatch):
    """No [b, B, V] tensor of every position: the positions are visited one at a time."""
    from specdiff.distributions import Distributions

    def dense(self, num_positions):
        raise AssertionError("block + Cactus formed a [b, B, V] tensor")

    monkeypatch.setattr(Distributions, "dense", dense)
    generator = torch.Generator().manual_seed(0)
    target = 3.0 * torch.randn(4, 6, 5000, generator=generator)
    draft_logits = target[:, :5] + 1.5 * torch.randn(4, 5, 5000, generator=generator)
    tokens = torch.multinomial(torch.softmax(draft_logits.reshape(-1, 5000), -1), 1, generator=generator).reshape(4, 5)
    if inputs == "probs":
        target, draft_logits = torch.softmax(target, -1), torch.softmax(draft_logits, -1)
    result = sd.verify(tokens, draft_logits, target, rule=sd.Cactus(0.5), method="block", inputs=inputs,
                       generator=generator)
    assert result.tokens.shape == (4, 6)


def test_block_cactus_peak_memory_is_within_four_times_the_inputs():
    """Measured in a fresh process (specdiff.bench.verify_cactus): before the rewrite, ~40x here."""
    pytest.importorskip("resource")
    from pathlib import Path

    if not Path("/proc/self/clear_refs").exists():
        pytest.skip("needs Linux /proc")
    from specdiff.bench.verify_cactus import measure

    result = measure(batch=2, vocab=1 << 18, block_len=4, repeats=1)
    assert result["memory_ratio"] <= 4.0, result
    assert result["block_cactus_s"] > 0 and result["token_cactus_s"] > 0
