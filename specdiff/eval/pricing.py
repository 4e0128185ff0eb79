"""A cost axis no machine noise can move (issue 22, item 2): a sweep row's model calls, priced.

Every sweep row (schema 2) stores `calls`: the verifier's and the drafter's forwards and the tokens
(input positions) they processed. With per-call costs measured once, side by side, on one machine
(`specdiff.runs.call_costs`), each model's cost is affine in what it did:

    cost = sum over models m of  per_forward_ms[m] * forwards[m] + per_token_ms[m] * tokens[m]

`priced_rows` replaces each row's wall seconds by that cost, so the frontier's latency and throughput
axes (`specdiff frontier --cost calls`) are priced calls: two configurations are ordered by what they
asked of the models, never by what else ran on the machine while they ran.
"""
from __future__ import annotations

MODELS = ("verifier", "drafter")


def price_ms(calls: dict, costs: dict) -> float:
    """The priced milliseconds of one row's calls (see the module)."""
    total = 0.0
    for model in MODELS:
        forwards, tokens = calls.get(f"{model}_forwards", 0), calls.get(f"{model}_tokens", 0)
        if forwards and model not in costs:
            raise ValueError(f"the call costs have no entry for the {model}, which this row called {forwards} times")
        if forwards:
            total += costs[model]["per_forward_ms"] * forwards + costs[model]["per_token_ms"] * tokens
    return total / calls.get("rows", 1)  # a batch's calls are shared by its rows


def priced_rows(rows: list[dict], costs: dict) -> list[dict]:
    """Copies of the rows with wall_s = the priced seconds of their calls. A ValueError names the first
    row without call counts (written before schema 2, or by a configuration that does not record them)."""
    out = []
    for row in rows:
        if not row.get("calls"):
            raise ValueError(f"row {row['config_id']}/{row['problem_id']} has no call counts (written before the "
                             "store's schema 2): re-run its sweep into a new store for --cost calls")
        out.append(dict(row, wall_s=price_ms(row["calls"], costs) / 1000.0))
    return out


def priced_sweep(sweep: dict, costs: dict) -> list[dict]:
    """Re-price a loaded sweep (`eval.frontier.load_sweep`'s dict) in place: its summaries, for the same
    configurations it kept, are re-made from the priced rows. Returns those rows (`sweep["rows"]` keeps
    the measured wall time)."""
    from specdiff.eval.frontier import summarize

    rows = priced_rows(sweep["rows"], costs)
    kept = {s["config_id"] for s in sweep["summaries"]}
    sweep["summaries"] = [s for s in summarize(sweep["configurations"], rows) if s["config_id"] in kept]
    return rows
