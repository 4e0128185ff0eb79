"""The honest frontier (issue 22, item 3): what leniency buys against what mixing static
configurations already buys, at an accuracy a user would accept, with intervals.

Terms, for one sweep (configurations x the same problems):
- **lossless** configuration: rule lossless (or leniency 0), ungated gates aside, truncated support;
- **reference point** (constrained): accuracy floor = the best lossless accuracy - FLOOR_LOSS, and the
  speed of plain decoding of the verifier. Only what beats both counts in the hypervolume;
- **static hull**: sending each request to one of two static configurations at random gives every
  convex combination of their (cost, accuracy), because cost per problem is additive and accuracy is
  a mean. The upper hull of (latency, accuracy) is therefore free; a configuration earns its place
  only by lying above it (`margin_over_hull`);
- **speedup at <= L points**: among configurations whose accuracy is at least the reference lossless
  configuration's minus L, the best throughput (and tokens per verifier forward) over the reference's;
  the reference is the lossless configuration of highest throughput;
- **paired bootstrap**: problems are resampled with replacement (the same draw for every
  configuration, so problem difficulty cancels), every figure is recomputed, and the 2.5 / 97.5
  percentiles are its 95% interval.
"""
from __future__ import annotations

import numpy as np

FLOOR_LOSS = 0.05
LOSSES = (0.005, 0.01)
BOOTSTRAP = 1000


def is_lossless(params: dict) -> bool:
    if params.get("support", "truncated") != "truncated":
        return False
    return params.get("rule") == "lossless" or (params.get("rule") != "typical" and float(params.get("leniency", 0)) == 0)


def is_linear_alone(params: dict) -> bool:
    """The paper's Linear family, ungated and truncated (lossless included: lam = 0)."""
    return (params.get("rule") in ("lossless", "linear") and "gate_top" not in params and "gate_entropy" not in params
            and params.get("support", "truncated") == "truncated")


def per_problem(summaries: list[dict], rows: list[dict]) -> dict:
    """Aligned arrays [configurations, problems]: correct, wall_s (or priced seconds), new_tokens and
    verifier forwards (NaN where a row has no call counts)."""
    index = {s["config_id"]: i for i, s in enumerate(summaries)}
    problems = sorted({r["problem_index"] for r in rows if r["config_id"] in index})
    column = {p: j for j, p in enumerate(problems)}
    shape = (len(summaries), len(problems))
    out = {name: np.full(shape, np.nan) for name in ("correct", "wall_s", "new_tokens", "verifier_forwards")}
    for row in rows:
        if row["config_id"] not in index:
            continue
        i, j = index[row["config_id"]], column[row["problem_index"]]
        out["correct"][i, j] = float(row["correct"])
        out["wall_s"][i, j] = row["wall_s"]
        out["new_tokens"][i, j] = row["new_tokens"]
        if row.get("calls"):
            out["verifier_forwards"][i, j] = row["calls"]["verifier_forwards"]
    if np.isnan(out["correct"]).any():
        raise ValueError("the honest frontier needs every configuration on the same problems (complete configurations)")
    return out


def _figures(arrays: dict, summaries: list[dict], plain: dict | None) -> dict:
    """Every figure of one (re)sample: arrays [c, n] -> dict of floats."""
    accuracy = arrays["correct"].mean(axis=1)  # [c]
    latency = arrays["wall_s"].mean(axis=1)  # [c]
    throughput = arrays["new_tokens"].sum(axis=1) / arrays["wall_s"].sum(axis=1)  # [c]
    per_call = arrays["new_tokens"].sum(axis=1) / arrays["verifier_forwards"].sum(axis=1)  # [c] NaN without calls
    lossless = np.array([is_lossless(s["params"]) for s in summaries])
    linear = np.array([is_linear_alone(s["params"]) for s in summaries])
    out = {}
    if not lossless.any():
        return out
    reference = int(np.flatnonzero(lossless)[np.argmax(throughput[lossless])])
    floor = float(accuracy[lossless].max()) - FLOOR_LOSS
    out["reference"], out["floor"] = reference, floor
    for loss in LOSSES:
        ok = accuracy >= accuracy[reference] - loss - 1e-12
        best = int(np.flatnonzero(ok)[np.argmax(throughput[ok])])
        out[f"best_at_{loss}"] = best
        out[f"throughput_ratio_at_{loss}"] = float(throughput[best] / throughput[reference])
        out[f"tokens_per_call_ratio_at_{loss}"] = float(np.nanmax(np.where(ok, per_call, np.nan)) / per_call[reference]) \
            if not np.isnan(per_call).all() else None
    for axis, speed, higher in (("latency", latency, False), ("throughput", throughput, True)):
        plain_speed = None if plain is None else plain[axis]
        ref_speed = plain_speed if plain_speed is not None else (0.0 if higher else 1.1 * float(speed.max()))
        everything = _hypervolume(accuracy, speed, floor, ref_speed, higher)
        alone = _hypervolume(accuracy[linear], speed[linear], floor, ref_speed, higher) if linear.any() else 0.0
        out[f"{axis}_hv"], out[f"{axis}_hv_linear"] = everything, alone
        out[f"{axis}_hv_ratio_vs_linear"] = everything / alone if alone > 0 else None
    return out


def _hypervolume(accuracy, speed, floor: float, ref_speed: float, higher: bool) -> float:
    import moocore

    points = np.stack([accuracy, speed], axis=1)
    keep = (points[:, 0] > floor) & ((points[:, 1] > ref_speed) if higher else (points[:, 1] < ref_speed))
    if not keep.any():
        return 0.0
    return float(moocore.hypervolume(points[keep], ref=[floor, ref_speed], maximise=[True, higher]))


def static_hull(summaries: list[dict]) -> list[int]:
    """Indices of the upper hull of (latency, accuracy), fastest first: what mixing static
    configurations per request reaches (see the module)."""
    points = sorted(range(len(summaries)), key=lambda i: (summaries[i]["latency_s"], -summaries[i]["accuracy"]))
    hull: list[int] = []
    for i in points:
        if hull and summaries[i]["accuracy"] <= summaries[hull[-1]]["accuracy"]:
            continue  # slower and no more accurate: never on the upper hull
        while len(hull) >= 2 and _turns_up(summaries[hull[-2]], summaries[hull[-1]], summaries[i]):
            hull.pop()
        hull.append(i)
    return hull


def _turns_up(a: dict, b: dict, c: dict) -> bool:
    """True when b lies on or below the chord from a to c (so b is not on the upper concave hull)."""
    cross = (b["latency_s"] - a["latency_s"]) * (c["accuracy"] - a["accuracy"]) - \
            (b["accuracy"] - a["accuracy"]) * (c["latency_s"] - a["latency_s"])
    return cross >= 0


def margin_over_hull(summary: dict, hull_points: list[dict]) -> float:
    """Accuracy above the static hull at the summary's latency (negative: below it); past its slowest
    point the hull extends flat (more time buys nothing)."""
    x = summary["latency_s"]  # never below the fastest hull point: the fastest configuration is on the hull
    for a, b in zip(hull_points, hull_points[1:]):
        if a["latency_s"] <= x <= b["latency_s"]:
            t = (x - a["latency_s"]) / (b["latency_s"] - a["latency_s"]) if b["latency_s"] > a["latency_s"] else 1.0
            return summary["accuracy"] - (a["accuracy"] + t * (b["accuracy"] - a["accuracy"]))
    return summary["accuracy"] - hull_points[-1]["accuracy"]


def analyse_honest(summaries: list[dict], rows: list[dict], plain: dict | None = None,
                   resamples: int = BOOTSTRAP, seed: int = 0) -> dict:
    """The honest frontier's figures with paired-bootstrap 95% intervals. `plain`: plain decoding's
    {"latency": s per problem, "throughput": tokens / s} on the same axis (None: the old reference)."""
    arrays = per_problem(summaries, rows)
    point = _figures(arrays, summaries, plain)
    if "reference" not in point:
        return {"note": "no lossless configuration in the sweep: nothing to measure leniency against"}
    rng = np.random.default_rng(seed)
    n = arrays["correct"].shape[1]
    samples: dict[str, list[float]] = {}
    for _ in range(resamples):
        pick = rng.integers(0, n, n)
        figures = _figures({k: v[:, pick] for k, v in arrays.items()}, summaries, plain)
        for key, value in figures.items():
            if isinstance(value, float):
                samples.setdefault(key, []).append(value)
    intervals = {key: [float(np.percentile(v, 2.5)), float(np.percentile(v, 97.5))] for key, v in samples.items()}
    hull = static_hull(summaries)
    hull_points = [summaries[i] for i in hull]
    name = lambda i: summaries[i]["name"]  # noqa: E731
    out = {
        "reference_lossless": name(point["reference"]),
        "accuracy_floor": point["floor"],
        "plain": plain,
        "static_hull": [name(i) for i in hull],
        "above_static_hull": [dict(name=s["name"], margin=margin_over_hull(s, hull_points)) for i, s in
                              enumerate(summaries) if i not in hull and margin_over_hull(s, hull_points) > 0],
        "bootstrap": {"resamples": resamples, "seed": seed, "paired": True},
    }
    for loss in LOSSES:
        points = f"{100 * loss:g}"
        out[f"speedup_at_{points}_point_loss"] = {
            "configuration": name(point[f"best_at_{loss}"]),
            "throughput_ratio": point[f"throughput_ratio_at_{loss}"],
            "throughput_ratio_95": intervals.get(f"throughput_ratio_at_{loss}"),
            "tokens_per_call_ratio": point[f"tokens_per_call_ratio_at_{loss}"],
            "tokens_per_call_ratio_95": intervals.get(f"tokens_per_call_ratio_at_{loss}"),
        }
    for axis in ("latency", "throughput"):
        out[f"constrained_hypervolume_{axis}"] = {
            "all": point[f"{axis}_hv"], "linear_alone": point[f"{axis}_hv_linear"],
            "ratio": point[f"{axis}_hv_ratio_vs_linear"], "ratio_95": intervals.get(f"{axis}_hv_ratio_vs_linear")}
    return out


def plain_decoding(rows: list[dict], summaries: list[dict], costs: dict) -> dict:
    """Plain decoding of the verifier priced like the rows (`--cost calls`): per problem, a prefill of
    the prompt and one forward per generated token (T + 1 forwards over P + T tokens), with T the
    lossless configurations' answer lengths. {"latency": s per problem, "throughput": tokens / s}."""
    lossless = {s["config_id"] for s in summaries if is_lossless(s["params"])}
    verifier = costs["verifier"]
    seconds, tokens = [], 0
    for row in rows:
        if row["config_id"] in lossless:
            t, prompt = row["new_tokens"], row.get("prompt_tokens") or 0
            seconds.append((verifier["per_forward_ms"] * (t + 1) + verifier["per_token_ms"] * (prompt + t)) / 1000)
            tokens += t
    if not seconds:
        return None
    return {"latency": float(np.mean(seconds)), "throughput": tokens / float(np.sum(seconds))}
