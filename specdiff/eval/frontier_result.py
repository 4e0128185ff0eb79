"""The result of `specdiff frontier STORE` (`frontier_result`): a sweep's frontiers and hypervolumes as the
JSON that `specdiff frontier --json` prints, on wall time or on priced calls (`specdiff.eval.pricing`),
with the honest reference (`specdiff.eval.frontier_honest`) when asked."""
from __future__ import annotations

from pathlib import Path


def frontier_result(store: str | Path, latency_ref: float | None = None, include_incomplete: bool = False,
                    costs: dict | None = None, honest: bool = False) -> tuple[dict, dict]:
    """(the JSON result, the loaded sweep). With `costs`, the speed axes are priced calls (eval.pricing)."""
    from specdiff.eval.frontier import analyse, load_sweep
    from specdiff.eval.pricing import priced_sweep

    sweep = load_sweep(store, include_incomplete)
    rows = priced_sweep(sweep, costs) if costs is not None else sweep["rows"]
    out = analyse(sweep["summaries"], latency_ref)
    out["cost"] = "calls" if costs is not None else "wall"
    if costs is not None:
        out["call_costs"] = costs
    if honest:
        from specdiff.eval.frontier_honest import analyse_honest, plain_decoding

        plain = plain_decoding(rows, sweep["summaries"], costs) if costs is not None else None
        out["honest"] = analyse_honest(sweep["summaries"], rows, plain)
        if plain is None:
            out["honest"]["plain_note"] = ("plain decoding is priced on the calls axis only (--cost calls); on wall "
                                           "time the reference speed is the old one")
    out.update(store=str(store), task=sweep["settings"]["task"]["name"], problems=sweep["settings"]["task"]["problems"],
               models=sweep["settings"]["models"], incomplete=sweep["incomplete"],
               configurations=[{k: v for k, v in s.items() if k not in ("correct", "problem_ids", "params")}
                               for s in sweep["summaries"]])
    return out, sweep
