"""Issue 22's rules where today's rules go: the engine, `--rule`/`--gate-*`/`--support` and the sweep TOML."""
import json

import pytest
import torch

import specdiff as sd
from specdiff.cli import main


@pytest.fixture(scope="module")
def pair():
    from specdiff import zoo

    tok = zoo.tokenizer()
    verifier = sd.Verifier(zoo.load("verifier"), temperature=0.7, top_p=0.8, top_k=20)
    drafter = sd.MaskedDiffusionDrafter(zoo.load("masked-drafter"), steps=2, tokenizer=tok)
    return tok, verifier, drafter


PROMPTS = ["There are 12 rocks in each of the 7 bags that Omar has. He uses 31 rocks. How many rocks are left?\n",
           "Ana has 5 pens and buys 9 more. How many pens does she have?\n"]


def _generate(pair, rule, seed=0):
    tok, verifier, drafter = pair
    gen = sd.SpeculativeGenerator(drafter, verifier, block_size=8, rule=rule, tokenizer=tok, proposal="point_mass")
    return gen, gen.generate(PROMPTS, max_new_tokens=40, generator=torch.Generator().manual_seed(seed))


def test_a_closed_gate_runs_lossless_draw_for_draw_and_an_open_one_runs_the_inner_rule(pair):
    _, lossless = _generate(pair, sd.Lossless())
    gen, closed = _generate(pair, sd.Gated(sd.Linear(0.5), max_top=0.0))
    assert closed.token_ids == lossless.token_ids and gen.exact is False
    _, linear = _generate(pair, sd.Linear(0.5))
    _, opened = _generate(pair, sd.Gated(sd.Linear(0.5), max_top=1.0))
    assert opened.token_ids == linear.token_ids
    assert linear.token_ids != lossless.token_ids  # not both Lossless (their laws: test_the_engine_accepts_as_...)


def test_typical_and_untruncated_rules_run_in_the_engine_and_are_not_called_exact(pair):
    for rule in (sd.Typical(0.09), sd.Linear(0.2, support="untruncated"), sd.Lossless(support="untruncated"),
                 sd.Gated(sd.Cactus(1.0, support="untruncated"), min_entropy=0.5)):
        gen, out = _generate(pair, rule)
        assert not gen.exact and not out.summary.exact
        assert all(len(ids) > 0 for ids in out.token_ids)
        assert all(s.new_tokens <= 40 for s in out.stats)


# -- the engine applies the rule it was given (issue 33, item 7) ----------------------------------------------
# A tiny random Llama verifier (tests/architectures.py) at temperature 0.3 and its perturbed copy as the AR drafter,
# point-mass proposal, 8 prompts, 24 new tokens, block 4: about 190 verified positions per run, whose p is
# recorded. For every position examined (the accepted ones and the first rejected one) the rule's probability of
# accepting the drafted token is computed from the recorded p (and untruncated p) by tests/leniency_reference.py,
# written from the rules' definitions; so is Lossless's. top_k = 2 makes Typical and the untruncated rules differ
# from Lossless at many positions; Lossless(support="untruncated") is run at top_k = 1, where it accepts a draft
# outside the nucleus (p = 0) about 11 times per run, which Lossless never does.

ENGINE_RULES = [
    pytest.param(sd.Typical(0.09), 2, id="typical"),
    pytest.param(sd.Linear(0.2, support="untruncated"), 2, id="linear-untruncated"),
    pytest.param(sd.Gated(sd.Cactus(1.0, support="untruncated"), min_entropy=0.5), 2, id="gated-cactus-untruncated"),
    pytest.param(sd.Gated(sd.Linear(0.5), max_top=1.0), 2, id="gated-linear-open"),
    pytest.param(sd.Lossless(support="untruncated"), 1, id="lossless-untruncated"),
]
LIKELIHOOD_RATIO = 1e6


@pytest.fixture(scope="module")
def tiny_pair():
    from architectures import build, perturbed

    model = build("llama")
    return model, perturbed(model, scale=0.05)


def _recorded_rounds(tiny_pair, rule, top_k, monkeypatch, lossless_engine=None):
    """Runs the engine under `rule` and records every verify call: (drafted tokens [b, W], p [b, W, V] and
    untruncated p [b, W, V] at the drafted positions, float64, and the accepted counts [b]). lossless_engine: the
    defect, a Lossless rule the engine verifies with whatever its rule (what is recorded is still what it gets)."""
    import specdiff.engine.generate as engine

    model, drafter_model = tiny_pair
    verifier = sd.Verifier(model, temperature=0.3, top_k=top_k)
    drafter = sd.AutoregressiveDrafter(drafter_model, temperature=0.3, top_p=1.0, top_k=0)
    rounds, original = [], engine.verify

    def spy(draft_tokens, draft_probs, target_logits, **kwargs):
        width = draft_tokens.shape[1]
        p = torch.softmax(target_logits[:, :width].double(), -1)
        loose_logits = verifier.untruncated_logits()[:, :width]
        loose = torch.softmax(loose_logits.double(), -1)
        if lossless_engine:  # the rule the defective engine runs
            untruncated = loose_logits if lossless_engine.support == "untruncated" else None
            kwargs.update(rule=lossless_engine, untruncated_probs=untruncated)
        result = original(draft_tokens, draft_probs, target_logits, **kwargs)
        rounds.append((draft_tokens.clone(), p, loose, result.num_accepted.clone()))
        return result

    monkeypatch.setattr(engine, "verify", spy)
    gen = sd.SpeculativeGenerator(drafter, verifier, block_size=4, rule=rule, proposal="point_mass", eos_token_id=[])
    prompts = [[5 + i, 6 + 2 * i, 7] for i in range(8)]
    gen.generate(prompts, max_new_tokens=24, generator=torch.Generator().manual_seed(0))
    monkeypatch.setattr(engine, "verify", original)
    return rounds


def _assert_follows(rule, rounds, not_lossless=True):
    """The accept/reject outcomes of every examined position follow `rule` and (not_lossless) not Lossless: none is
    impossible under the rule, their number is within 4 standard deviations of the rule's expectation, and they
    are at least LIKELIHOOD_RATIO times likelier under the rule than under Lossless, measured against the
    truncated p or against the untruncated one (whichever differs from the rule)."""
    import math

    import numpy as np
    from leniency_reference import draft_acceptance

    def support_of(r):
        return (r.rule if isinstance(r, sd.Gated) else r).support

    alternatives = [r for r in (sd.Lossless(), sd.Lossless(support="untruncated")) if r != rule]
    outcomes = []  # per examined position: the rule's acceptance probability, each alternative's, accepted or not
    for tokens, p, loose, accepted in rounds:
        for row in range(tokens.shape[0]):
            for i in range(min(int(accepted[row]) + 1, tokens.shape[1])):
                y = int(tokens[row, i])
                onehot = np.zeros(p.shape[-1])
                onehot[y] = 1.0
                rows = {"truncated": p[row, i], "untruncated": loose[row, i]}
                outcomes.append([draft_acceptance(r, rows[support_of(r)], onehot, y) for r in [rule] + alternatives]
                                + [i < int(accepted[row])])
    outcomes = np.array(outcomes)
    a, kept = outcomes[:, 0], outcomes[:, -1].astype(bool)
    assert len(a) >= 100
    assert not ((a == 0) & kept).any() and not ((a == 1) & ~kept).any(), "an outcome the rule cannot produce"
    spread = math.sqrt(float((a * (1 - a)).sum()))
    assert abs(kept.sum() - a.sum()) <= 4 * max(spread, 1e-9), (kept.sum(), a.sum(), spread)
    if not not_lossless:
        return
    for column, alternative in enumerate(alternatives, start=1):
        b = outcomes[:, column]
        with np.errstate(divide="ignore"):
            log_ratio = float((np.log(np.where(kept, a, 1 - a)) - np.log(np.where(kept, b, 1 - b)))[a != b].sum())
        assert log_ratio >= math.log(LIKELIHOOD_RATIO), (alternative, log_ratio)


@pytest.mark.parametrize("rule, top_k", ENGINE_RULES)
def test_the_engine_accepts_as_its_rule_does_and_not_as_lossless(tiny_pair, rule, top_k, monkeypatch):
    _assert_follows(rule, _recorded_rounds(tiny_pair, rule, top_k, monkeypatch))


@pytest.mark.parametrize("top_k", [2, 1])
def test_the_check_fails_when_the_engine_silently_runs_lossless(tiny_pair, top_k, monkeypatch):
    """Power of the test above: with the engine verifying with Lossless whatever its rule (against the truncated
    p, or against the untruncated one), each rule's check fails but Lossless's own. The engine's run does not
    depend on the rule it was given then, so one run serves every rule of this top_k."""
    rules = [param.values[0] for param in ENGINE_RULES if param.values[1] == top_k]
    for support in ("truncated", "untruncated"):
        ran = sd.Lossless(support=support)
        rounds = _recorded_rounds(tiny_pair, sd.Lossless(support="untruncated"), top_k, monkeypatch,
                                  lossless_engine=ran)
        _assert_follows(ran, rounds, not_lossless=False)  # what the engine did run passes
        for rule in rules:
            if rule != ran:
                with pytest.raises(AssertionError):
                    _assert_follows(rule, rounds)


def test_untruncated_rules_get_the_verifiers_untruncated_logits(pair, monkeypatch):
    """With support="untruncated" the engine hands verify the chunk's logits before top-p / top-k, [b, B, V]
    (finite where truncation put -inf); truncated rules get none."""
    import specdiff.engine.generate as engine

    seen, original = [], engine.verify

    def spy(draft_tokens, draft_probs, target_probs, **kwargs):
        seen.append((target_probs, kwargs.get("untruncated_probs")))
        return original(draft_tokens, draft_probs, target_probs, **kwargs)

    monkeypatch.setattr(engine, "verify", spy)
    _generate(pair, sd.Lossless(support="untruncated"))
    assert seen and all(loose is not None and loose.shape == target[:, :-1].shape for target, loose in seen)
    target, loose = seen[0]
    assert torch.isfinite(loose).all() and torch.isinf(target[:, :-1]).any()  # top-k 20 of the vocabulary
    kept = torch.isfinite(target[:, :-1])  # inside the nucleus the two differ only by normalisation
    shift = (torch.log_softmax(loose, -1) - torch.log_softmax(target[:, :-1], -1))[kept]
    assert (shift <= 1e-5).all()
    seen.clear()
    _generate(pair, sd.Lossless())
    assert seen and all(loose is None for _, loose in seen)


def test_the_generation_flags_take_the_new_rules(capsys):
    argv = ["generate", "--json", "--drafter", "masked", "-K", "2", "--max-new-tokens", "16", "--rule", "typical",
            "--leniency", "0.09", "--gate-top", "0.9", "--support", "untruncated", "1 + 2 = ?\\n"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["exact"] is False and out["config"]["gate_top"] == 0.9 and out["config"]["support"] == "untruncated"
    assert main(["generate", "--rule", "linear", "--leniency", "0.1", "--gate-top", "1.5", "x"]) == 2
    assert "--gate-top must be in [0, 1]" in capsys.readouterr().err
    assert main(["generate", "--rule", "linear", "--typical-delta", "0.3", "x"]) == 2
    assert "--typical-delta" in capsys.readouterr().err


def test_make_rule_builds_gated_typical_and_supports():
    from specdiff.runs import make_rule

    assert make_rule("typical", 0.09) == sd.Typical(0.09)
    assert make_rule("linear", 0.1, gate_top=0.9) == sd.Gated(sd.Linear(0.1), max_top=0.9)
    assert make_rule("cactus", 2.0, gate_entropy=0.5, support="untruncated") == sd.Gated(
        sd.Cactus(2.0, support="untruncated"), min_entropy=0.5)
    assert make_rule("lossless", support="untruncated") == sd.Lossless(support="untruncated")


def test_the_sweep_grid_expands_gates_and_support_and_keeps_old_ids(tmp_path):
    from sweep_helpers import TINY_CONFIG

    from specdiff.runs.sweep_config import load_config

    base = TINY_CONFIG.format(problems=2, steps=[1, 4])
    old = tmp_path / "old.toml"
    old.write_text(base)
    new = tmp_path / "new.toml"
    new.write_text(base.replace('rule = ["linear"]', 'rule = ["linear", "typical"]\ntypical_epsilon = [0.09]\n'
                                'gate_top = [1.0, 0.9]\nsupport = ["truncated", "untruncated"]'))
    _, old_configs, _ = load_config(old)
    _, new_configs, _ = load_config(new)
    old_ids = {c["config_id"] for c in old_configs}
    new_ids = {c["config_id"] for c in new_configs}
    assert old_ids <= new_ids  # ungated, truncated points keep their ids
    names = [c["name"] for c in new_configs]
    assert any("gated top<=0.9" in n and "untruncated" in n for n in names)
    assert any(n.split()[1] == "typical" for n in names)
    # linear: 2 lam x 2 gates x 2 supports; typical: 1 x 2 x 2; times 2 efforts x 1 block size
    assert len(new_configs) == (2 * 2 * 2 + 1 * 2 * 2) * 2
    for config in new_configs:
        from specdiff.runs import RunConfig
        from specdiff.runs.config import config_rule

        config_rule(RunConfig(name="x", **config["params"]))  # every point builds a rule


def test_bench_leniency_tunes_on_validation_and_reports_held_out_ratios(capsys):
    argv = ["bench", "leniency", "--json", "--steps", "1", "--tune-problems", "2", "--problems", "3", "--repeats", "2",
            "--max-new-tokens", "24", "--first-problem", "5", "--seed", "3"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("chosen", "lossless", "accuracy_lossless", "accuracy_lenient", "tokens_per_call_ratio",
                "throughput_ratio", "priced_throughput_ratio"):
        assert key in out, key
    for key in ("tokens_per_call_ratio", "throughput_ratio", "priced_throughput_ratio", "accuracy_difference"):
        low, high = out[f"{key}_95"]
        assert low <= high
    assert out["test_problems"] == [5, 8] and len(out["throughput_ratios_per_repeat"]) == 2
    names = [row["config"]["name"] for row in out["tuning"]]
    assert len(names) == 10 and names[0] == "K=1 lossless"  # lossless + the 9 candidates at K = 1
    assert out["chosen"] in names and out["lossless"] in names
    if out["no_lenient_rule_qualified"]:
        assert out["chosen"] == out["lossless"] and out["tokens_per_call_ratio"] == 1.0


def test_bench_leniency_tunes_the_block_drafter_over_thresholds(capsys):
    argv = ["bench", "leniency", "--json", "--drafter", "block", "--block-size", "8", "--threshold", "0.9",
            "--tune-problems", "1", "--problems", "2", "--repeats", "1", "--max-new-tokens", "16"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    names = [row["config"]["name"] for row in out["tuning"]]
    assert len(names) == 10 and names[0] == "tau=0.9 lossless" and out["drafter"] == "block"
    assert all(row["config"]["threshold"] == 0.9 and row["config"]["block_size"] == 8 for row in out["tuning"])
    assert out["lossless_config"]["proposal"] == "point_mass"  # the block drafter is exact only in point mass


def test_bench_leniency_refuses_a_threshold_outside_the_unit_interval(capsys):
    assert main(["bench", "leniency", "--json", "--threshold", "1.5"]) != 0
    assert "--threshold values must be in (0, 1]" in capsys.readouterr().err


def test_bench_leniency_pools_repeats_per_problem_for_points_and_intervals():
    from specdiff.bench.leniency import _report

    costs = {"verifier": {"per_forward_ms": 10.0, "per_token_ms": 0.0}}

    def run(tokens, walls, correct, rate):  # one repeat's records; tokens_per_s is the whole-run rate
        records = [dict(new_tokens=t, wall_s=w, correct=c, calls={"verifier_forwards": t // 4, "verifier_tokens": 0})
                   for t, w, c in zip(tokens, walls, correct)]
        return dict(records=records, tokens_per_s=rate, tokens_per_round=4.0)

    runs = {"lossless": [run([8, 8, 8], [1, 1, 1], [1, 1, 0], 8.0), run([8, 8, 8], [1, 1, 2], [1, 0, 0], 6.0)],
            "lenient": [run([8, 8, 8], [0.5, 1, 1], [1, 1, 1], 9.6), run([8, 8, 8], [0.5, 0.5, 1], [1, 1, 0], 12.0)]}
    out = _report(runs, costs, seed=0)
    # pooled over both repeats, problem by problem: 48 tokens in 7 s against 48 tokens in 4.5 s
    assert out["throughput_ratio"] == pytest.approx(7 / 4.5)
    assert out["accuracy_lossless"] == pytest.approx(0.5) and out["accuracy_lenient"] == pytest.approx(5 / 6)
    assert out["accuracy_difference"] == pytest.approx(5 / 6 - 0.5)
    assert out["throughput_ratios_per_repeat"] == pytest.approx([1.2, 2.0])
    for key in ("throughput_ratio", "accuracy_difference"):
        low, high = out[f"{key}_95"]
        assert low <= out[key] <= high, key


def test_bench_leniency_takes_explicit_settings_not_the_namespace():
    """The command turns its flags into a frozen `LeniencySettings` (issue 52): the bench reads no argparse."""
    import dataclasses

    from specdiff.bench.leniency import LeniencySettings
    from specdiff.cli import build_parser
    from specdiff.commands.bench_leniency import settings_of

    args = build_parser().parse_args(["bench", "leniency", "--drafter", "block", "--threshold", "0.9", "0.5",
                                      "--problems", "7", "--seed", "3"])
    settings = settings_of(args)
    assert settings == LeniencySettings(drafter="block", steps=(2, 4), threshold=(0.9, 0.5), problems=7, seed=3)
    assert settings_of(build_parser().parse_args(["bench", "leniency"])).threshold is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.seed = 1
