"""Query routing along the frontier (the first paper's future work: "incoming requests are mapped to
distinct configurations along the Pareto frontier"), fitted on a sweep's per-problem results.

Terms:
- features: cheap numbers known before a request is generated (`specdiff.runs.routing`): the prompt's
  length, the verifier's prefill entropy, the drafter's first-block confidence;
- cell: the quantile bin of every feature (thresholds fitted on the fit problems, `bins` per feature);
  a cell with fewer than `min_cell` fit problems falls back to the default configuration;
- router: one configuration per cell (and a default), any configuration of the sweep, lenient ones
  included, chosen so that the mean accuracy over the fit problems is at least the budget at the least
  mean latency. The choice is a Lagrangian relaxation of that knapsack: for each price lam of accuracy
  every cell takes its configuration of least (latency - lam * accuracy), and the cheapest assignment
  that meets the budget wins;
- static hull (`specdiff.eval.frontier_honest.static_hull`): sending requests at random to two static
  configurations reaches every mix of their (latency, accuracy), so a router earns its keep only by
  beating the hull at the accuracy it reaches, on problems it was not fitted on.
"""
from __future__ import annotations

import numpy as np

FEATURES = ("prompt_tokens", "prefill_entropy", "first_block_confidence")


def cells_of(features: np.ndarray, thresholds: list[list[float]]) -> list[str]:
    """features [n, F] -> each problem's cell, e.g. "0-1-0" (the bin index per feature)."""
    bins = [np.searchsorted(np.asarray(t), features[:, f], side="right") for f, t in enumerate(thresholds)]
    return ["-".join(str(int(b[i])) for b in bins) for i in range(features.shape[0])]


def fit_router(features: np.ndarray, correct: np.ndarray, latency: np.ndarray, budget: float, bins: int = 2,
               min_cell: int = 8, prices: int = 400) -> dict:
    """features [n, F] of the fit problems; correct, latency [C, n] per configuration and problem.
    Returns {"thresholds", "cells": {cell: configuration index}, "default", "fit_accuracy", "fit_latency_s"}.
    ValueError when no configuration, nor any mix, meets the budget on the fit problems."""
    if not 0 < budget <= 1:
        raise ValueError(f"--budget is an accuracy in (0, 1], got {budget}")
    if bins < 1:
        raise ValueError(f"--bins must be >= 1, got {bins}")
    n = features.shape[0]
    thresholds = [list(np.quantile(features[:, f], np.arange(1, bins) / bins)) for f in range(features.shape[1])]
    names = cells_of(features, thresholds)
    groups: dict[str, list[int]] = {}
    for i, name in enumerate(names):
        groups.setdefault(name, []).append(i)
    small = [i for name, members in groups.items() if len(members) < min_cell for i in members]
    units = {name: members for name, members in groups.items() if len(members) >= min_cell}
    if small:
        units["*"] = small  # the default configuration's problems
    keys = sorted(units)
    acc = np.stack([correct[:, units[k]].sum(axis=1) for k in keys])  # [cells, C]: correct answers
    lat = np.stack([latency[:, units[k]].sum(axis=1) for k in keys])  # [cells, C]: seconds
    scale = float(lat.sum(axis=0).max()) or 1.0
    best = None
    for price in np.concatenate([[0.0], np.geomspace(1e-4, 1e4, prices)]) * scale / n:
        choice = np.argmin(lat - price * acc, axis=1)  # [cells]
        total_acc = acc[np.arange(len(keys)), choice].sum() / n
        total_lat = lat[np.arange(len(keys)), choice].sum() / n
        if total_acc >= budget - 1e-12 and (best is None or total_lat < best[1]):
            best = (choice, total_lat, total_acc)
    if best is None:
        raise ValueError(f"no configuration of the sweep reaches accuracy {budget} on the fit problems "
                         f"(the best reaches {correct.mean(axis=1).max():.3f})")
    choice, total_lat, total_acc = best
    cells = {k: int(c) for k, c in zip(keys, choice) if k != "*"}
    default = int(choice[keys.index("*")]) if "*" in keys else _static_choice(correct, latency, budget)
    return {"thresholds": thresholds, "cells": cells, "default": default, "fit_accuracy": float(total_acc),
            "fit_latency_s": float(total_lat)}


def route(router: dict, features: np.ndarray) -> list[int]:
    """The configuration index of each problem (features [n, F])."""
    return [router["cells"].get(cell, router["default"]) for cell in cells_of(features, router["thresholds"])]


def evaluate(choice: list[int], correct: np.ndarray, latency: np.ndarray, summaries: list[dict]) -> dict:
    """The routed (accuracy, latency) on problems with per-configuration results correct, latency [C, n],
    against the static hull of the same problems at the routed accuracy (`summaries`: one per
    configuration, with the same problems' accuracy and latency_s)."""
    from specdiff.eval.frontier_honest import static_hull

    columns = np.arange(correct.shape[1])
    accuracy = float(correct[choice, columns].mean())
    latency_s = float(latency[choice, columns].mean())
    hull = [summaries[i] for i in static_hull(summaries)]
    hull_latency = _hull_latency_at(hull, accuracy)
    return {"accuracy": accuracy, "latency_s": latency_s, "hull_latency_s_at_accuracy": hull_latency,
            "latency_ratio_hull_over_routed": None if hull_latency is None else hull_latency / latency_s,
            "static_hull": [dict(name=s["name"], accuracy=s["accuracy"], latency_s=s["latency_s"]) for s in hull],
            "configurations_used": sorted({summaries[i]["name"] for i in choice})}


def _hull_latency_at(hull: list[dict], accuracy: float) -> float | None:
    """The least latency at which mixing static configurations reaches `accuracy` (None: out of reach)."""
    if accuracy <= hull[0]["accuracy"]:
        return hull[0]["latency_s"]
    for a, b in zip(hull, hull[1:]):
        if a["accuracy"] <= accuracy <= b["accuracy"]:
            t = (accuracy - a["accuracy"]) / (b["accuracy"] - a["accuracy"])
            return a["latency_s"] + t * (b["latency_s"] - a["latency_s"])
    return None


def _static_choice(correct: np.ndarray, latency: np.ndarray, budget: float) -> int:
    """The fastest single configuration meeting the budget (else the most accurate)."""
    accuracy, mean_latency = correct.mean(axis=1), latency.mean(axis=1)
    ok = np.flatnonzero(accuracy >= budget)
    return int(ok[np.argmin(mean_latency[ok])]) if ok.size else int(np.argmax(accuracy))
