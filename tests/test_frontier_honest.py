"""The honest frontier (issue 22, item 3) on synthetic sweeps whose answers are known."""
import numpy as np
import pytest

from specdiff.eval.frontier import summarize
from specdiff.eval.frontier_honest import analyse_honest, margin_over_hull, static_hull


def _sweep(specs, n=200, seed=0):
    """specs: name -> (params, accuracy, seconds per problem, tokens per problem, verifier forwards)."""
    rng = np.random.default_rng(seed)
    configurations, rows = [], []
    for name, (params, accuracy, seconds, tokens, forwards) in specs.items():
        configurations.append(dict(config_id=name, name=name, effort="K=1", params=params))
        correct = rng.permutation(np.arange(n) < round(accuracy * n))
        for j in range(n):
            rows.append(dict(config_id=name, problem_id=f"p{j}", problem_index=j, correct=int(correct[j]),
                             wall_s=seconds, new_tokens=tokens, rounds=1, accepted=[0], draft_s=0, verify_s=0,
                             exact=1, calls={"verifier_forwards": forwards, "rows": 1}))
    return summarize(configurations, rows), rows


LOSSLESS = {"rule": "lossless", "leniency": 0.0, "block_size": 8}


def test_the_static_hull_is_the_upper_concave_hull_and_mixing_points_are_not_above_it():
    summaries, _ = _sweep({
        "fast": (LOSSLESS, 0.50, 1.0, 50, 10), "mid": (LOSSLESS, 0.70, 2.0, 50, 10),
        "slow": (LOSSLESS, 0.90, 3.0, 50, 10), "under": (LOSSLESS, 0.55, 2.0, 50, 10),
        "dominated": (LOSSLESS, 0.80, 3.5, 50, 10)})
    hull = [summaries[i]["name"] for i in static_hull(summaries)]
    assert hull == ["fast", "slow"]  # mid lies on the chord (a mix reaches it); under and dominated lie below
    points = [summaries[i] for i in static_hull(summaries)]
    mixture = {"latency_s": 2.5, "accuracy": 0.80}  # a 50/50 mix of mid and slow
    assert margin_over_hull(mixture, points) == pytest.approx(0.0, abs=1e-9)
    assert margin_over_hull({"latency_s": 2.0, "accuracy": 0.80}, points) == pytest.approx(0.10, abs=1e-9)


def test_speedup_at_a_point_loss_picks_the_fastest_configuration_within_the_loss():
    lenient = {"rule": "linear", "leniency": 0.2, "block_size": 8, "gate_top": 0.9}
    summaries, rows = _sweep({
        "lossless": (LOSSLESS, 0.90, 2.0, 100, 20),
        "gated keeps accuracy": (lenient, 0.895, 1.6, 100, 16),  # 0.5 point loss, 1.25x, 1.25x per call
        "linear loses": ({**lenient, "gate_top": None} | {"rule": "linear"}, 0.80, 1.0, 100, 10)})
    for s in summaries:
        s["params"] = {k: v for k, v in s["params"].items() if v is not None}
    out = analyse_honest(summaries, rows, plain={"latency": 4.0, "throughput": 25.0}, resamples=200)
    at_half = out["speedup_at_0.5_point_loss"]
    assert at_half["configuration"] == "gated keeps accuracy"
    assert at_half["throughput_ratio"] == pytest.approx(1.25)
    assert at_half["tokens_per_call_ratio"] == pytest.approx(1.25)
    low, high = at_half["throughput_ratio_95"]
    assert low - 1e-9 <= 1.25 <= high + 1e-9 and low >= 1.0 - 1e-9
    # the floor is 0.85: "linear loses" (0.80) adds nothing; the gated point adds area over Linear alone
    hv = out["constrained_hypervolume_throughput"]
    assert hv["ratio"] > 1.0 and hv["all"] > hv["linear_alone"] > 0
    # linear (1.0 s, 0.80) -> gated (1.6 s, 0.895) -> lossless (2.0 s, 0.90) is concave: all three on the hull
    assert out["static_hull"] == ["linear loses", "gated keeps accuracy", "lossless"]
    assert out["above_static_hull"] == [] and out["accuracy_floor"] == pytest.approx(0.85)


def test_without_a_lossless_configuration_it_says_so():
    summaries, rows = _sweep({"a": ({"rule": "linear", "leniency": 0.3}, 0.5, 1.0, 10, 2)})
    assert "no lossless configuration" in analyse_honest(summaries, rows, resamples=10)["note"]
