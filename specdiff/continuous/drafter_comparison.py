"""The Frozen against the Free drafter, read off the bench's rows: the second paper's Table 4,
Proposition 3.4 and its corollary (Sec. 3.3).

- **be(k)**: the block efficiency (denoising steps per round, K / rounds) of a drafter's method.
- **Proposition 3.4**: with the Frozen drafter (Eq. 10), every round pays one target call to draft (the
  score at the current state) and one batched call to verify. If a call dominates every other cost and
  the batched call costs a single one ("ideal conditions"), a round costs two DDPM steps, so the
  speedup over DDPM is be(k) / 2.
- **Corollary**: the Free drafter reuses the verification call's score (no drafting call), so a round
  costs one call: under the same conditions the Frozen drafter is faster only if its block efficiency
  is about twice the Free drafter's.

On a real machine a round costs `drafting call + verification call + rest` (drafting arithmetic,
verification, residual, bookkeeping), which the bench measures per round (`round_costs` of a row, from
its `CallClock`: the drafting call, the verification call, the rest; DDPM: its step's call and the
rest). Then

    speedup = be x (DDPM step) / (round) = be/2 x (2 DDPM calls / round) x (DDPM step / DDPM call),

the first factor the round's excess over two calls (< 1 where the batched call or the rest cost more
than the ideal), the second DDPM's own per-step overhead (> 1; it pays that too). The Frozen drafter is
faster than the Free one exactly where be_frozen / be_free > round_frozen / round_free, each round in
DDPM steps of its own units (so that load moving between the units cancels): that round-cost ratio is
the testbed's break-even, the corollary's 2 in ideal conditions. (It is a ratio of means, the speedups
ratios of medians: where they disagree, the samples' times spread.)

(The paper writes p for the drafter and q for the target; nothing here needs either letter.)
"""
from __future__ import annotations

__all__ = ["compare_drafters", "proposition_3_4", "comparison_markdown"]

SPECULATIVE = ("R", "D", "B")  # Table 1 (bench.METHODS)
IDEAL_ROUND_IN_CALLS = 2.0  # Proposition 3.4: a drafting call and a verification call, each one DDPM step
IDEAL_BREAK_EVEN = 2.0  # the corollary: Frozen wins only with about twice the Free drafter's block efficiency


def _index(rows: list[dict]) -> dict:
    """(drafter, churn, K, method) -> row, for the rows that were timed."""
    return {(r.get("drafter", "free"), r["churn"], r["steps"], r["method"]): r for r in rows if r.get("speedup") is not None}


def proposition_3_4(rows: list[dict]) -> list[dict]:
    """One entry per timed (churn, K, method) of the Frozen drafter: its measured speedup beside be(k)/2,
    and, where the rows carry round costs, the round's parts in DDPM calls and the cost model's speedup."""
    index = _index(rows)
    out = []
    for (drafter, churn, steps, method), row in index.items():
        if drafter != "frozen" or method not in SPECULATIVE:
            continue
        be_half = row["block_efficiency"] / 2
        entry = {"churn": churn, "steps": steps, "method": method, "speedup": row["speedup"],
                 "block_efficiency": row["block_efficiency"], "be_half": be_half,
                 "speedup_over_be_half": row["speedup"] / be_half, "shortfall": be_half - row["speedup"]}
        ddpm = index.get(("frozen", churn, steps, "DDPM"))
        costs, ddpm_costs = row.get("round_costs"), ddpm and ddpm.get("round_costs")
        if costs and ddpm_costs and ddpm_costs["verification_call_ms"] > 0:
            call = ddpm_costs["verification_call_ms"]  # one DDPM step's target call
            entry.update({
                "round_ms": {"drafting_call": costs["drafting_call_ms"], "verification_call": costs["verification_call_ms"],
                             "rest": costs["rest_ms"], "total": costs["total_ms"]},
                "ddpm_step_ms": {"call": call, "rest": ddpm_costs["rest_ms"], "total": ddpm_costs["total_ms"]},
                "round_in_ddpm_calls": {"drafting_call": costs["drafting_call_ms"] / call,
                                        "verification_call": costs["verification_call_ms"] / call,
                                        "rest": costs["rest_ms"] / call, "total": costs["total_ms"] / call,
                                        "ideal_total": IDEAL_ROUND_IN_CALLS},
                "ddpm_step_in_calls": ddpm_costs["total_ms"] / call,
                "cost_model_speedup": row["block_efficiency"] * ddpm_costs["total_ms"] / costs["total_ms"],
            })
        out.append(entry)
    return sorted(out, key=lambda e: (e["churn"], e["steps"], SPECULATIVE.index(e["method"])))


def compare_drafters(rows: list[dict]) -> list[dict]:
    """One entry per (churn, K, method) timed with both drafters: Table 4 (the Frozen drafter's speedup and
    block efficiency, and their change against the Free drafter's) and the corollary (the block-efficiency
    ratio beside the ideal break-even 2, the testbed's measured one, and which drafter was faster)."""
    index = _index(rows)
    out = []
    for (drafter, churn, steps, method), frozen in index.items():
        free = index.get(("free", churn, steps, method))
        if drafter != "frozen" or method not in SPECULATIVE or free is None:
            continue
        ratio = frozen["block_efficiency"] / free["block_efficiency"]
        corollary = {"block_efficiency_ratio": ratio, "ideal_break_even": IDEAL_BREAK_EVEN,
                     "ideal_prediction": "frozen" if ratio > IDEAL_BREAK_EVEN else "free"}
        if frozen.get("round_costs") and free.get("round_costs"):
            # each round in its own units' DDPM steps, so that load moving between the units cancels
            steps_of = {d: (index.get((d, churn, steps, "DDPM")) or {}).get("round_costs") for d in ("frozen", "free")}
            scale = {d: c["total_ms"] if all(steps_of.values()) else 1.0 for d, c in steps_of.items()}
            break_even = ((frozen["round_costs"]["total_ms"] / scale["frozen"])
                          / (free["round_costs"]["total_ms"] / scale["free"]))
            corollary.update({"measured_break_even": break_even,
                              "measured_prediction": "frozen" if ratio > break_even else "free"})
        entry = {
            "churn": churn, "steps": steps, "method": method,
            "speedup": {"frozen": frozen["speedup"], "free": free["speedup"]},
            "speedup_change": frozen["speedup"] / free["speedup"] - 1,
            "block_efficiency": {"frozen": frozen["block_efficiency"], "free": free["block_efficiency"]},
            "block_efficiency_change": ratio - 1,
            "faster": "frozen" if frozen["speedup"] > free["speedup"] else "free",
            "corollary": corollary,
        }
        ddpm = {d: index.get((d, churn, steps, "DDPM")) for d in ("frozen", "free")}
        if all(ddpm.values()):  # each drafter's own DDPM baseline: how far the machine moved between its units
            entry["ddpm_median_seconds"] = {d: row["median_seconds"] for d, row in ddpm.items()}
        out.append(entry)
    return sorted(out, key=lambda e: (e["churn"], e["steps"], SPECULATIVE.index(e["method"])))


def _change(value: float, change: float) -> str:
    return f"{value:.2f} ({100 * change:+.1f}%)"


def comparison_markdown(result: dict) -> str:
    """The Table 4 layout (per churn: speedup over DDPM and block efficiency of the Frozen drafter for R, D
    and B at each K, in parentheses the change against Free), then Proposition 3.4 and the corollary, as
    markdown; "" for a result without the Frozen drafter."""
    gamma = result.get("config", {}).get("draft_length", "?")
    lines = []
    table4 = result.get("frozen_vs_free") or []
    for churn in sorted({e["churn"] for e in table4}):
        at = {(e["steps"], e["method"]): e for e in table4 if e["churn"] == churn}
        lines += ["", f"Frozen drafter, churn {churn}, gamma = {gamma} (the second paper's Table 4): speedup over DDPM "
                  "and block efficiency; in parentheses the change against the Free drafter.", "",
                  "| K | speedup R | speedup D | speedup B | block efficiency R | block efficiency D | block efficiency B |",
                  "| --- " * 7 + "|"]
        for steps in sorted({k for k, _ in at}):
            cells = [_change(at[steps, m]["speedup"]["frozen"], at[steps, m]["speedup_change"]) if (steps, m) in at else ""
                     for m in SPECULATIVE]
            cells += [_change(at[steps, m]["block_efficiency"]["frozen"], at[steps, m]["block_efficiency_change"])
                      if (steps, m) in at else "" for m in SPECULATIVE]
            lines.append(f"| {steps} | " + " | ".join(cells) + " |")
    proposition = result.get("proposition_3_4") or []
    if proposition:
        lines += ["", "Proposition 3.4 (Frozen drafter): measured speedup against be(k)/2; the round's cost in DDPM calls "
                  "(drafting call + verification call + rest; ideal 1 + 1 + 0), a DDPM step in DDPM calls (ideal 1), "
                  "and the cost model be x step / round.", "",
                  "| churn | K | method | speedup | be/2 | speedup / (be/2) | round in DDPM calls | DDPM step in calls "
                  "| be x step / round |", "| --- " * 9 + "|"]
        for e in proposition:
            parts = e.get("round_in_ddpm_calls")
            round_text = (f"{parts['drafting_call']:.2f} + {parts['verification_call']:.2f} + {parts['rest']:.2f} = "
                          f"{parts['total']:.2f}") if parts else ""
            step = f"{e['ddpm_step_in_calls']:.2f}" if parts else ""
            model = f"{e['cost_model_speedup']:.2f}" if parts else ""
            lines.append(f"| {e['churn']} | {e['steps']} | {e['method']} | {e['speedup']:.2f} | {e['be_half']:.2f} | "
                         f"{e['speedup_over_be_half']:.2f} | {round_text} | {step} | {model} |")
    if table4:
        lines += ["", "Corollary: Frozen / Free block efficiency against the break-even (ideal 2; measured: Frozen's "
                  "round cost over Free's, each in its own units' DDPM steps), and the drafter that was faster.", "",
                  "| churn | K | method | Frozen / Free block efficiency | measured break-even | predicted | faster |",
                  "| --- " * 7 + "|"]
        for e in table4:
            c = e["corollary"]
            even = f"{c['measured_break_even']:.2f}" if "measured_break_even" in c else ""
            lines.append(f"| {e['churn']} | {e['steps']} | {e['method']} | {c['block_efficiency_ratio']:.2f} | {even} | "
                         f"{c.get('measured_prediction', c['ideal_prediction'])} | {e['faster']} |")
    return "\n".join(lines) + "\n" if lines else ""
