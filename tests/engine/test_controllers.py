"""Run-time controllers (issue 23): lossless generation stays lossless with every policy on, ragged drafts
keep the verifier's cache right, and bad controller names and parameters are refused.

Exactness: the enumerated check of tests/engine/test_exactness.py (a tiny random verifier over V = 4 tokens,
the exact law of its first 3 sampled tokens, 40,000 rows of one prompt in ONE batched call, fixed seed, TV <=
0.03 and chi-square p >= 1e-4), with each policy on: the confidence floor with the effort schedule on a left-to-right masked
drafter (marginal: K per row, drafts cut by confidence), acceptance-tracking B on the
AR drafter (marginal: drafts of different lengths in one batch), and all three at once (the finish level
too) on a random-order masked drafter under block verification (point mass). Greedy: with temperature 0 the controllers reproduce
HF's greedy generate token for token on a hybrid verifier (Qwen3.5: Gated DeltaNet and attention layers),
batch 4, prompts of mixed lengths.
"""
from __future__ import annotations

import pytest
import torch
from architectures import PROMPTS, assert_greedy_equal, build, hf_greedy, perturbed
from tiny_models import LENGTH, PROMPT, ROWS, SAMPLING, VOCAB, assert_matches_exact, exact_continuations, tiny_qwen3

import specdiff as sd
from specdiff.engine.controllers import (AcceptanceTracking, Combined, ConfidenceBounded, EffortSchedule,
                                         parse_controller)

ALL_ON = "confidence:floor=0.6,finish=0.7+acceptance:margin=0,min_block=1+effort:low=1,high=3,early=2"


@pytest.fixture(scope="module")
def models():
    verifier = tiny_qwen3(VOCAB, seed=0, layers=2)
    ar = tiny_qwen3(VOCAB, seed=1)
    masked = tiny_qwen3(VOCAB, seed=2, bidirectional=True)
    return verifier, ar, masked, exact_continuations(verifier, PROMPT, LENGTH, **SAMPLING)


def _masked(model, **kwargs):
    return sd.MaskedDiffusionDrafter(model, temperature=1.0, top_p=1.0, **kwargs)


CASES = [  # (label, drafter factory, proposal, method, controller)
    ("confidence + effort, masked left_to_right, marginal", lambda m: _masked(m[2], order="left_to_right"),
     "marginal", "token", "confidence:floor=0.6+effort:low=1,high=2,early=2"),
    ("acceptance, AR drafter, marginal", lambda m: sd.AutoregressiveDrafter(m[1], temperature=1.0, top_p=1.0, top_k=0),
     "marginal", "token", "acceptance:margin=0,min_block=1"),
    ("all on, masked random order, point mass, block", lambda m: _masked(m[2], steps=2, order="random"),
     "point_mass", "block", ALL_ON),
]


@pytest.mark.parametrize("label, make, proposal, method, controller", CASES, ids=[c[0] for c in CASES])
def test_lossless_with_a_controller_reproduces_the_verifier(models, label, make, proposal, method, controller):
    verifier, _, _, exact = models
    gen = sd.SpeculativeGenerator(make(models), sd.Verifier(verifier, **SAMPLING), block_size=3, method=method,
                                  proposal=proposal, eos_token_id=[], batch_size=ROWS, controller=controller)
    assert gen.exact
    out = gen.generate([PROMPT] * ROWS, max_new_tokens=LENGTH, generator=torch.Generator().manual_seed(0))
    assert all(len(row) == LENGTH for row in out.token_ids) and out.summary.exact
    drafted = [d for s in out.stats for d in s.drafted]
    assert all(a <= d <= 3 for s in out.stats for a, d in zip(s.accepted, s.drafted))
    assert min(drafted) < 3  # drafts of different lengths in one batch
    assert_matches_exact(out.token_ids, exact, label)


@pytest.mark.parametrize("verifier_name", ["qwen3_5"])
def test_greedy_with_every_controller_equals_hf(verifier_name):
    """Ragged drafts scored in one forward (right padding a causal verifier never sees), rows committing
    different numbers of columns, recurrent state rolled back per row: HF greedy, token for token."""
    verifier = build(verifier_name)
    references = [hf_greedy(verifier, p) for p in PROMPTS]
    masked = tiny_qwen3(verifier.config.vocab_size, seed=3, bidirectional=True, context=128)
    drafters = {"ar": lambda: sd.AutoregressiveDrafter(perturbed(verifier), temperature=0.0),
                "masked": lambda: sd.MaskedDiffusionDrafter(masked, steps=2, temperature=0.0)}
    for controller in ("acceptance:margin=1", ALL_ON):
        for kind, make in drafters.items():
            gen = sd.SpeculativeGenerator(make(), sd.Verifier(verifier, temperature=0.0), block_size=6,
                                          eos_token_id=[], batch_size=4, controller=controller,
                                          proposal="point_mass" if kind == "masked" else "marginal")
            out = gen.generate(PROMPTS, max_new_tokens=40)
            assert_greedy_equal(f"{verifier_name}, {kind}, {controller}", out.token_ids, references)


def test_controllers_plan_from_the_past():
    acceptance = AcceptanceTracking(margin=1, decay=0.5, min_block=2)
    acceptance.start(3, 8)
    assert acceptance.plan().block_sizes == [8, 8, 8]
    acceptance.observe([8, 8, 8], [0, 3, 8])
    assert acceptance.plan().block_sizes == [2, 4, 8]  # min_block; 3 + 1; a full accept grows: 8 + 1 + 1 -> B
    acceptance.select([1])
    assert acceptance.plan().block_sizes == [4]
    effort = EffortSchedule(low=2, high=6, early=4)
    effort.start(2, 8)
    assert effort.plan().steps == [2, 2]
    effort.observe([8, 8], [1, 5])
    assert effort.plan().steps == [6, 2]
    both = parse_controller("confidence:floor=0.4,finish=0.9+effort:low=1,high=3")
    assert isinstance(both, Combined) and both.sets_steps
    both.start(1, 4)
    plan = both.plan()
    assert plan.floors == [0.4] and plan.finish == [0.9] and plan.steps == [1]
    assert isinstance(parse_controller("confidence"), ConfidenceBounded) and parse_controller("none") is None


def test_effort_schedule_marks_out_of_order_marginal_inexact(models):
    verifier, _, masked, _ = models
    gen = sd.SpeculativeGenerator(_masked(masked, steps=1), sd.Verifier(verifier), block_size=3, controller="effort")
    assert not gen.exact  # K = 1 is exact, K chosen per round with the entropy order is not
    assert sd.SpeculativeGenerator(_masked(masked, steps=1), sd.Verifier(verifier), block_size=3,
                                   controller="confidence").exact
    left_to_right = _masked(masked, steps=2, order="left_to_right")
    assert sd.SpeculativeGenerator(left_to_right, sd.Verifier(verifier), block_size=3, controller="effort").exact
    # a finish level unmasks confident positions first: no longer left to right
    assert not sd.SpeculativeGenerator(left_to_right, sd.Verifier(verifier), block_size=3,
                                       controller="confidence:finish=0.9").exact


@pytest.mark.parametrize("spec, message", [
    ("bandit", "unknown controller 'bandit'"), ("confidence:floor=2", r"floor must be in \[0, 1\]"),
    ("confidence:level=0.5", "takes floor, finish"), ("effort:low=3,high=2", "must be >= low"),
    ("effort:low=x", "low must be a int"), ("effort+effort", "at most one"), ("acceptance:decay=1", r"\[0, 1\)"),
])
def test_bad_controllers_are_refused(spec, message):
    with pytest.raises(ValueError, match=message):
        parse_controller(spec)


def test_the_sweep_grid_takes_a_controller_axis(tmp_path):
    from sweep_helpers import TINY_CONFIG

    from specdiff.runs.sweep_config import load_config
    from specdiff.eval.sweepconfig import ConfigError

    plain = TINY_CONFIG.format(problems=2, steps=[4])
    _, fixed, _ = load_config(tmp_path / "a.toml", plain)
    both = plain.replace("block_size = [6]", 'block_size = [6]\ncontroller = ["none", "confidence:finish=0.9"]')
    _, configs, _ = load_config(tmp_path / "b.toml", both)
    assert len(configs) == 2 * len(fixed)
    assert [c["config_id"] for c in configs if "controller" not in c["params"]] == [c["config_id"] for c in fixed]
    adaptive = [c for c in configs if "controller" in c["params"]]
    assert {c["params"]["controller"] for c in adaptive} == {"confidence:finish=0.9"}
    assert all(c["name"].endswith("confidence:finish=0.9") for c in adaptive)
    with pytest.raises(ConfigError, match="unknown controller 'bandit'"):
        load_config(tmp_path / "c.toml", plain.replace("block_size = [6]", 'block_size = [6]\ncontroller = ["bandit"]'))
