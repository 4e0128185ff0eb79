"""Speed-quality Pareto frontiers of a sweep, and their hypervolumes (the first paper's Section 4.2,
Figure 4; Figure 5 compares a joint frontier with a single-effort one).

Each configuration is a point: accuracy (higher is better, with its binomial standard error) against
a speed, as the paper measures it (Section 4.2): **latency**, wall seconds to finish a problem (mean
over the problems; lower is better), or **throughput**, generated tokens over wall seconds (all the
configuration's tokens over all its seconds; higher is better).

The **joint** frontier is taken over every configuration (all efforts K or tau, all leniencies);
the **per-effort** frontiers over the configurations of one effort (one K, every leniency). Their
hypervolumes (the area they dominate up to a reference point) are computed with moocore, against
one reference point for all of them, so that they compare: accuracy 0, and for latency 1.1 x the
slowest configuration's latency (for throughput, 0 tokens/s). `hypervolume_ratio` = joint / best
single effort >= 1: how much the joint variation of effort and leniency extends the frontier.

A frontier point's **lead** is its accuracy over the most accurate faster configuration (the next
frontier point towards speed); it exceeds the noise when McNemar's test on the shared problems
gives z > 1.96 (specdiff.eval.statistics.paired_lead).
"""
from __future__ import annotations

import statistics

import numpy as np

from specdiff.eval.statistics import binomial_stderr, mean_stderr, paired_lead, unpaired_lead

# axis -> (summary key, higher is better, label)
AXES = {
    "latency": ("latency_s", False, "latency (wall s per problem)"),
    "throughput": ("throughput", True, "throughput (generated tokens / wall s)"),
}
LATENCY_MARGIN = 1.1


def library() -> str:
    import moocore

    return f"moocore {moocore.__version__}"


def summarize(configurations: list[dict], rows: list[dict]) -> list[dict]:
    """One summary per configuration that has rows: accuracy and its s.e., latency and its s.e.,
    throughput, acceptance figures, per-round costs, and the per-problem verdicts (for paired tests)."""
    by_config: dict[str, list[dict]] = {}
    for row in rows:
        by_config.setdefault(row["config_id"], []).append(row)
    out = []
    for config in configurations:
        mine = sorted(by_config.get(config["config_id"], []), key=lambda r: r["problem_index"])
        if not mine:
            continue
        n = len(mine)
        correct = [bool(r["correct"]) for r in mine]
        walls = [r["wall_s"] for r in mine]
        tokens = sum(r["new_tokens"] for r in mine)
        accuracy = sum(correct) / n
        summary = dict(config_id=config["config_id"], name=config["name"], effort=config["effort"],
                       params=config["params"], n=n, accuracy=accuracy, accuracy_se=binomial_stderr(accuracy, n),
                       latency_s=statistics.fmean(walls), latency_se=mean_stderr(walls),
                       throughput=tokens / sum(walls) if sum(walls) else 0.0, new_tokens=tokens / n,
                       exact=all(bool(r["exact"]) for r in mine), problem_ids=[r["problem_id"] for r in mine],
                       correct=correct)
        rounds = sum(r["rounds"] or 0 for r in mine)
        if rounds:
            accepted = [a for r in mine for a in (r["accepted"] or [])]
            block = config["params"].get("block_size")
            summary.update(rounds=rounds, mean_accepted=sum(accepted) / rounds, tokens_per_round=tokens / rounds,
                           acceptance_rate=sum(accepted) / (rounds * block) if block else None,
                           draft_ms_per_round=1000 * sum(r["draft_s"] or 0 for r in mine) / rounds,
                           verify_ms_per_round=1000 * sum(r["verify_s"] or 0 for r in mine) / rounds)
        out.append(summary)
    return out


def effort_order(efforts) -> list[str]:
    """Effort labels in order: every K ascending, then every tau ascending."""
    def key(label: str):
        kind, value = label.split("=")
        return (kind != "K", float(value))
    return sorted(set(efforts), key=key)


def _objectives(summaries: list[dict], axis: str) -> tuple[np.ndarray, list[bool]]:
    key, higher, _ = AXES[axis]
    points = np.array([[s["accuracy"], s[key]] for s in summaries], dtype=float).reshape(-1, 2)
    return points, [True, higher]


def pareto_mask(summaries: list[dict], axis: str, keep_ties: bool = False) -> np.ndarray:
    """True for the configurations on the frontier (one of several identical points is kept, or all of
    them with keep_ties)."""
    import moocore

    if not summaries:
        return np.zeros(0, dtype=bool)
    points, maximise = _objectives(summaries, axis)
    return np.asarray(moocore.is_nondominated(points, maximise=maximise, keep_weakly=keep_ties), dtype=bool)


def reference_point(summaries: list[dict], axis: str) -> dict:
    """Accuracy 0; latency LATENCY_MARGIN x the slowest configuration's; throughput 0."""
    key, higher, _ = AXES[axis]
    speed = 0.0 if higher else LATENCY_MARGIN * max(s[key] for s in summaries)
    return {"accuracy": 0.0, key: speed}


def hypervolume(summaries: list[dict], axis: str, reference: dict) -> float:
    """The area dominated by the configurations, up to the reference point (moocore.hypervolume)."""
    import moocore

    if not summaries:
        return 0.0
    key = AXES[axis][0]
    points, maximise = _objectives(summaries, axis)
    return float(moocore.hypervolume(points, ref=[reference["accuracy"], reference[key]], maximise=maximise))


def frontier_points(summaries: list[dict], axis: str) -> list[dict]:
    """The frontier, fastest first, each point with its lead over the next faster one (see the module)."""
    key, higher, _ = AXES[axis]
    mask = pareto_mask(summaries, axis)
    points = sorted((s for s, on in zip(summaries, mask) if on), key=lambda s: -s[key] if higher else s[key])
    out = []
    for i, s in enumerate(points):
        point = {k: s[k] for k in ("config_id", "name", "effort", "accuracy", "accuracy_se", key)}
        if i == 0:
            point.update(lead=None, lead_over=None, lead_note="fastest frontier point: it leads in speed")
        else:
            faster = points[i - 1]
            if s["problem_ids"] == faster["problem_ids"]:
                lead = paired_lead(s["correct"], faster["correct"])
            else:
                lead = unpaired_lead(s["accuracy"], s["accuracy_se"], faster["accuracy"], faster["accuracy_se"])
            point.update(lead=lead["lead"], lead_se=lead["lead_se"], lead_z=lead["z"],
                         lead_exceeds_noise=lead["exceeds_noise"], lead_test=lead["test"], lead_over=faster["name"])
        out.append(point)
    return out


def analyse_axis(summaries: list[dict], axis: str, reference: dict | None = None) -> dict:
    """The joint and per-effort frontiers on one axis, their hypervolumes and ratio."""
    reference = reference or reference_point(summaries, axis)
    per_effort = {}
    for effort in effort_order(s["effort"] for s in summaries):
        group = [s for s in summaries if s["effort"] == effort]
        per_effort[effort] = {"hypervolume": hypervolume(group, axis, reference),
                              "frontier": [p["name"] for p in frontier_points(group, axis)]}
    joint = hypervolume(summaries, axis, reference)
    best = max(per_effort, key=lambda e: per_effort[e]["hypervolume"])
    best_hv = per_effort[best]["hypervolume"]
    frontier = frontier_points(summaries, axis)
    return {
        "hypervolume_joint": joint,
        "hypervolume_best_single_k": best_hv,
        "hypervolume_ratio": joint / best_hv if best_hv else None,
        "best_single_k": best,
        "hypervolume_per_k": {effort: v["hypervolume"] for effort, v in per_effort.items()},
        "reference_point": reference,
        "hypervolume_units": f"accuracy x {AXES[axis][2]}",
        "frontier": frontier,
        "efforts_on_joint_frontier": effort_order(p["effort"] for p in frontier),
        "frontier_per_k": {effort: v["frontier"] for effort, v in per_effort.items()},
        "leads_exceeding_noise": sum(bool(p.get("lead_exceeds_noise")) for p in frontier),
    }


def analyse(summaries: list[dict], latency_reference: float | None = None) -> dict:
    """{"latency": {...}, "throughput": {...}} (see analyse_axis) for complete configurations."""
    if not summaries:
        raise ValueError("no finished configuration to draw a frontier from")
    latency_ref = None if latency_reference is None else {"accuracy": 0.0, "latency_s": latency_reference}
    if latency_ref and latency_reference <= max(s["latency_s"] for s in summaries):
        raise ValueError(f"the latency reference {latency_reference} s must exceed every configuration's latency "
                         f"(the slowest is {max(s['latency_s'] for s in summaries):.4g} s)")
    return {"latency": analyse_axis(summaries, "latency", latency_ref),
            "throughput": analyse_axis(summaries, "throughput"),
            "library": library()}


def load_sweep(path, include_incomplete: bool = False) -> dict:
    """A sweep store read for the frontier and the report: {"settings", "source", "configurations",
    "rows", "summaries", "incomplete", "artifacts"}. Configurations with fewer rows than the sweep's
    problems are left out of the summaries (listed under "incomplete") unless include_incomplete."""
    from specdiff.eval.sweepstore import SweepStore

    store = SweepStore(path)
    try:
        settings, source = store.settings, store.meta("source") or ""
        configurations, rows, artifacts = store.configurations(), store.rows(), store.artifacts()
    finally:
        store.close()
    problems = settings["task"]["problems"]
    summaries = summarize(configurations, rows)
    incomplete = [dict(name=s["name"], rows=s["n"], problems=problems) for s in summaries if s["n"] < problems]
    missing = {c["config_id"] for c in configurations} - {s["config_id"] for s in summaries}
    incomplete += [dict(name=c["name"], rows=0, problems=problems) for c in configurations if c["config_id"] in missing]
    if not include_incomplete:
        summaries = [s for s in summaries if s["n"] == problems]
    return dict(settings=settings, source=source, configurations=configurations, rows=rows, summaries=summaries,
                incomplete=incomplete, artifacts=artifacts)
