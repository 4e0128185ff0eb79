"""`specdiff demo --rules`: memory flat in --samples and --vocab, a bounded --vocab, and a plot
that tells the rules apart (issue 11, item 8)."""
import json

import matplotlib
import pytest
import torch

import specdiff as sd
from specdiff import theory
from specdiff.cli import main
from specdiff.runs import rules_demo
from specdiff.runs.rules_demo_plot import save_tradeoff_plot


def test_rule_target_is_the_quadratic_mixture_without_it():
    p, q = rules_demo.synthetic_pair(40, seed=3)
    for rule in rules_demo.demo_rules():
        assert torch.allclose(rules_demo.rule_target(rule, p, q), theory.emitted_distribution(rule, p, q), atol=1e-12)


def test_measure_rule_verifies_in_bounded_chunks_and_never_builds_v_by_v(monkeypatch):
    """Before: one verify() call on every row ([N, B+1, V] dense block tensors: 8 GB at V = 8,000)
    and theory's O(V^2) Cactus mixture. Now no call sees more than ROW_ELEMENTS entries."""
    calls = []
    real_verify = sd.verify

    def spy(draft, draft_probs, target_probs, **kwargs):
        calls.append(target_probs.shape)
        return real_verify(draft, draft_probs, target_probs, **kwargs)

    def quadratic(*args, **kwargs):
        raise AssertionError("theory.emitted_distribution builds a V x V tensor for Cactus")

    monkeypatch.setattr(sd, "verify", spy)
    monkeypatch.setattr(rules_demo, "ROW_ELEMENTS", 1 << 14)
    monkeypatch.setattr(theory, "emitted_distribution", quadratic)
    p, q = rules_demo.synthetic_pair(600, seed=0)
    row = rules_demo.measure_rule(sd.Cactus(0.02), p, q, samples=300, block_len=3, seed=0)
    assert len(calls) > 2
    assert all(rows * positions * vocab <= 1 << 14 for rows, positions, vocab in calls)
    assert 0.0 <= row["accept_measured"] <= 1.0 and row["block_rows"] == 300


def test_default_samples_shrink_with_the_vocabulary():
    assert rules_demo.default_samples(64) == 100_000
    assert rules_demo.default_samples(8_000) * 8_000 <= rules_demo.WORK_ELEMENTS
    assert rules_demo.default_samples(rules_demo.MAX_VOCAB) >= 1_000


@pytest.mark.parametrize("argv", [["--vocab", str(rules_demo.MAX_VOCAB + 1)], ["--vocab", "1"], ["--samples", "0"],
                                  ["--block", "0"], ["--vocab", "many"]])
def test_bad_rules_flags_are_refused_by_name(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["demo", "--rules", *argv])
    assert exit_info.value.code == 2
    assert f"argument {argv[0]}" in capsys.readouterr().err


def test_default_samples_reported(capsys):
    assert main(["demo", "--rules", "--json", "--vocab", "3000", "--block", "2", "--plot", ""]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["samples"] == rules_demo.default_samples(3000)
    assert result["tv_noise_floor"] > 0.02  # 5,592 rows over 3,000 tokens: histogram TV is noise


def _draw_plot(monkeypatch, p, q, rows, samples, tmp_path):
    figures = []
    import matplotlib.pyplot as plt

    real_close = plt.close
    monkeypatch.setattr(plt, "close", lambda figure=None: figures.append(figure))
    save_tradeoff_plot(p, q, rows, str(tmp_path / "plot.png"), samples)
    real_close("all")
    return figures[0]


def test_plot_shows_the_bound_above_the_curves_and_names_every_measured_rule(monkeypatch, tmp_path):
    matplotlib.use("Agg")
    p, q = rules_demo.synthetic_pair(24, seed=0)
    rows = [rules_demo.measure_rule(rule, p, q, 2000, 2, 0) for rule in rules_demo.demo_rules()]
    figure = _draw_plot(monkeypatch, p, q, rows, 2000, tmp_path)
    left, right = figure.axes
    bound = [line for line in left.get_lines() if line.get_label().startswith("Theorem 1")]
    assert len(bound) == 1
    theory_marks = [c for c in left.collections if "(theory)" in str(c.get_label())]
    assert len(theory_marks) == 4
    assert all(bound[0].get_zorder() > mark.get_zorder() for mark in theory_marks)  # drawn on top, visible
    # the four families do not share one marker and colour
    assert len({(str(mark.get_paths()[0].vertices.round(2).tolist())) for mark in theory_marks}) == 4
    labels = "\n".join(text.get_text() for text in left.texts)
    for row in rows:
        assert row["rule"] in labels
    assert len(right.get_lines()) == 4  # the KL panel: one curve per family
