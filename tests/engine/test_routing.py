"""Query routing (issue 23, item 3): the fit meets its budget on the fit problems at the least latency,
beats the static hull where request kinds differ, buys nothing where they do not, and a router file is
applied per request by `specdiff generate --router`."""
from __future__ import annotations

import json

import numpy as np
import pytest

from specdiff.cli import main
from specdiff.eval.routing import evaluate, fit_router, route


def _two_kinds(n=200, seed=0):
    """Problems of two kinds, alternating (feature 0 near -1 or near +1; the others noise): config 0 is
    fast and right on kind A only, config 1 slow and right on both."""
    rng = np.random.default_rng(seed)
    kind_a = np.arange(n) % 2 == 0
    features = np.stack([np.where(kind_a, -1.0, 1.0) + 0.1 * rng.normal(size=n), rng.normal(size=n),
                         rng.normal(size=n)], axis=1)
    correct = np.stack([kind_a.astype(float), np.ones(n)])
    latency = np.stack([np.full(n, 1.0), np.full(n, 3.0)])
    return features, correct, latency


def _summaries(correct, latency):
    return [dict(name=f"c{i}", accuracy=float(correct[i].mean()), latency_s=float(latency[i].mean()))
            for i in range(correct.shape[0])]


def test_routing_beats_the_static_hull_when_kinds_differ():
    features, correct, latency = _two_kinds()
    router = fit_router(features[:100], correct[:, :100], latency[:, :100], budget=0.99, min_cell=4)
    assert router["fit_accuracy"] >= 0.99
    choice = route(router, features[100:])
    held = evaluate(choice, correct[:, 100:], latency[:, 100:], _summaries(correct[:, 100:], latency[:, 100:]))
    assert held["accuracy"] == 1.0 and held["latency_s"] == pytest.approx(2.0)  # fast on kind A, slow on kind B
    assert held["latency_ratio_hull_over_routed"] > 1.3  # the hull needs config 1 everywhere: 3.0


def test_routing_buys_nothing_when_features_carry_no_signal():
    features, correct, latency = _two_kinds()
    shuffled = features[np.random.default_rng(1).permutation(len(features))]  # features unrelated to the kind
    router = fit_router(shuffled[:100], correct[:, :100], latency[:, :100], budget=0.99, min_cell=4)
    held = evaluate(route(router, shuffled[100:]), correct[:, 100:], latency[:, 100:],
                    _summaries(correct[:, 100:], latency[:, 100:]))
    assert held["latency_ratio_hull_over_routed"] == pytest.approx(1.0, abs=0.35)


def test_an_unreachable_budget_is_refused():
    features, correct, latency = _two_kinds()
    with pytest.raises(ValueError, match="no configuration of the sweep reaches accuracy"):
        fit_router(features, correct * 0.5, latency, budget=0.9)
    with pytest.raises(ValueError, match="--budget"):
        fit_router(features, correct, latency, budget=1.5)


def test_generate_applies_a_router_per_request(tmp_path, capsys):
    params = dict(drafter="masked-drafter", verifier="verifier", block_size=8, prefix_cache="persistent")
    router = {"version": 1, "thresholds": [[30.0], [100.0], [2.0]], "cells": {"0-0-0": 0, "1-0-0": 1}, "default": 0,
              "features": ["prompt_tokens", "prefill_entropy", "first_block_confidence"],
              "configurations": [dict(name="K=1", params=dict(params, steps=1)),
                                 dict(name="K=2 acceptance", params=dict(params, steps=2, controller="acceptance"))],
              "feature_models": dict(verifier="verifier", drafter="masked-drafter", block=8)}
    path = tmp_path / "router.json"
    path.write_text(json.dumps(router))
    short, long = "What is 2 + 3?", "Tom has 4 bags of coins with 3 coins in each and then finds 5 more coins. " * 3
    assert main(["generate", short, long, "--router", str(path), "--max-new-tokens", "16", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    configs = [g["config"]["name"] for g in out["generations"]]
    assert configs == ["K=1", "K=2 acceptance"] and out["summary"]["sequences"] == 2
    path.write_text("{}")
    assert main(["generate", "x", "--router", str(path)]) == 2
    assert "not a router file" in capsys.readouterr().err
