"""The bench's drafters (issue 26): the drafter in each unit's key, old stores without it still open and
resume, `--drafters`, the Table 4 layout with the change against Free in parentheses, and the
Proposition 3.4 / corollary fields. (Speed itself is never asserted.)"""
import json
import sqlite3

import pytest

from specdiff.cli import main
from specdiff.continuous.bench import (ALL_METHODS, CallClock, Unit, canonical_key, grid_units, markdown_table,
                                       run_bench, sweep_name, target_checks)
from specdiff.continuous.drafter_comparison import comparison_markdown, compare_drafters, proposition_3_4

TINY = dict(steps=(4, 6), churns=(0.5,), num_timing=2, fd_samples=0, draft_length=3, workers=1, progress=False)
CLOCK_FIELDS = ("rounds", "call_seconds", "calls", "drafting_call_seconds", "drafting_calls")


def test_the_drafter_is_part_of_every_units_key():
    units = grid_units([4, 6], [0.5], fd_steps=(4,), fd_samples=8, num_timing=2, drafters=("free", "frozen"))
    assert len(units) == 2 * (2 * 2 + 1)  # per drafter: 2 K x 2 timing shares + 1 FD unit
    keys = {u.key for u in units}
    assert len(keys) == len(units)
    assert Unit("time", None, 4, (0.5,), 0, 1, "frozen").key == "time/drafter=frozen/churns=0.5/K=4/samples=0-1"
    assert Unit("fd", 0.5, 4, drafter="free").key == "fd/drafter=free/churn=0.5/K=4"
    assert {u.drafter for u in units} == {"free", "frozen"}
    assert grid_units([4], [0.5], (), 0, 2) == [u for u in grid_units([4], [0.5], (), 0, 2, drafters=("free",))]


def test_a_key_without_a_drafter_is_the_free_drafters():
    assert canonical_key("time/churns=0.25,0.5/K=100/samples=0-25") == "time/drafter=free/churns=0.25,0.5/K=100/samples=0-25"
    assert canonical_key("fd/churn=0.5/K=250") == "fd/drafter=free/churn=0.5/K=250"
    assert canonical_key("fd/drafter=frozen/churn=0.5/K=250") == "fd/drafter=frozen/churn=0.5/K=250"


def test_the_committed_grid_keeps_its_store_name():
    """docs/results/continuous/continuous_bench.json was written before the drafter was part of the key: the same settings
    must name the same sweep, or its store (runs/bench/s4d.sqlite) would no longer resume."""
    from pathlib import Path

    committed = Path(__file__).parents[2] / "docs" / "results" / "continuous" / "continuous_bench.json"
    config = json.loads(committed.read_text())["config"]
    settings = {k: config[k] for k in ("draft_length", "num_timing", "fd_samples", "ddpm_fd_seeds", "model_call",
                                       "threads", "seed", "weights")}
    assert sweep_name(settings) == config["sweep"] == "continuous-bench/56f49e8c800f"


def _make_old_store(db):
    """A store as the bench wrote it before issue 26: keys without the drafter, payloads without the clock's
    fields. Made by running the bench and rewriting what it wrote."""
    result = run_bench(db=db, **TINY)
    connection = sqlite3.connect(db)
    with connection:
        for sweep, key, payload in connection.execute("SELECT sweep, key, payload FROM results").fetchall():
            payload = json.loads(payload)
            for records in [payload["methods"]["DDPM"], *payload["methods"]["churn=0.5"].values()]:
                for field in CLOCK_FIELDS:
                    del records[field]
            connection.execute("UPDATE results SET key = ?, payload = ? WHERE sweep = ? AND key = ?",
                               (key.replace("drafter=free/", ""), json.dumps(payload), sweep, key))
    keys = [key for (key,) in connection.execute("SELECT key FROM results")]
    connection.close()
    assert keys and not any("drafter" in key for key in keys)
    return result


def test_an_old_store_without_the_drafter_opens_and_resumes(tmp_path):
    db = tmp_path / "old.sqlite"
    first = _make_old_store(db)
    connection = sqlite3.connect(db)
    with connection:  # as if the old bench had been killed before its last unit
        connection.execute("DELETE FROM results WHERE key = 'time/churns=0.5/K=6/samples=1-2'")
    connection.close()

    resumed = run_bench(db=db, **TINY)
    assert resumed["units"] == {"total": 4, "resumed": 3, "run": 1}
    again = run_bench(db=db, **TINY)
    assert again["units"] == {"total": 4, "resumed": 4, "run": 0}
    (count,) = sqlite3.connect(db).execute("SELECT COUNT(*) FROM results").fetchone()
    assert count == 4  # no unit written twice, under either key
    old_rows = {(r["steps"], r["method"]): r for r in first["rows"]}
    for row in again["rows"]:
        assert row["drafter"] == "free"
        assert row["block_efficiency"] == old_rows[row["steps"], row["method"]]["block_efficiency"]
        if row["steps"] == 4:  # both shares from the old store: no clock fields, so no round costs
            assert row["round_costs"] is None and row["speedup"] > 0
    # adding the Frozen drafter reuses the old Free units and runs only the Frozen ones
    both = run_bench(db=db, drafters=("free", "frozen"), **TINY)
    assert both["units"] == {"total": 8, "resumed": 4, "run": 4}
    assert [r["drafter"] for r in both["rows"]] == ["free"] * 8 + ["frozen"] * 8


def test_frozen_units_count_one_drafting_call_per_drafting_round(tmp_path):
    """The clock splits each sample's target calls: the Frozen drafter calls the target before every round
    that drafts (every round but a last, plain step at k = K - 1, if the sample needs one), the Free
    drafter before its first round only, DDPM never; every round makes one verification call."""
    from specdiff.eval.store import ResultStore

    db = tmp_path / "b.sqlite"
    result = run_bench(db=db, drafters=("free", "frozen"), **{**TINY, "steps": (6,)})
    store = ResultStore(db)
    payloads = store.load(result["config"]["sweep"])
    store.close()
    assert set(payloads) == {u.key for u in grid_units((6,), (0.5,), (), 0, 2, 2, ("free", "frozen"))}
    for key, payload in payloads.items():
        ddpm = payload["methods"]["DDPM"]
        assert len(ddpm["calls"]) == 1  # one timed sample per share
        assert ddpm["calls"] == [6] and ddpm["drafting_calls"] == [0] and ddpm["rounds"] == [6.0]
        for record in payload["methods"]["churn=0.5"].values():
            rounds = [int(r) for r in record["rounds"]]
            assert record["calls"] == [r + n for r, n in zip(rounds, record["drafting_calls"])]
            if "drafter=frozen" in key:
                assert all(r - 1 <= n <= r for r, n in zip(rounds, record["drafting_calls"]))
            else:
                assert record["drafting_calls"] == [1]
            for total, calls, drafting in zip(record["seconds"], record["call_seconds"], record["drafting_call_seconds"]):
                assert 0 < drafting < calls < total
    for row in result["rows"]:
        costs = row["round_costs"]
        assert costs["total_ms"] == pytest.approx(costs["drafting_call_ms"] + costs["verification_call_ms"] + costs["rest_ms"])
        assert costs["rest_ms"] > 0


def test_call_clock_passes_the_models_attributes_through():
    class Model:
        unet = "the unet"

        def __call__(self, states, steps, schedule):
            return states

    import torch

    clock = CallClock(Model())
    assert clock.unet == "the unet"
    clock(torch.zeros(3, 2), torch.zeros(3, dtype=torch.long), None)
    clock.drafting = True
    clock(torch.zeros(1, 2), torch.zeros(1, dtype=torch.long), None)
    assert clock.calls == [2, 1] and clock.seconds[0] >= clock.seconds[1] > 0
    clock.reset()
    assert clock.calls == [0, 0] and clock.drafting is False


def test_bad_drafters_are_clear_errors(tmp_path):
    for drafters, match in (((), "at least one"), (("free", "free"), "twice"), (("model",), "unknown drafter 'model'")):
        with pytest.raises(ValueError, match=match):
            run_bench(db=tmp_path / "x.sqlite", drafters=drafters, **TINY)
    assert not (tmp_path / "x.sqlite").exists()  # refused before the store is opened


def test_drafters_flag(tmp_path, capsys):
    from specdiff.cli import build_parser

    parser = build_parser()
    assert parser.parse_args(["continuous", "bench"]).drafters == ["free"]
    assert parser.parse_args(["continuous", "bench", "--drafters", "free", "frozen"]).drafters == ["free", "frozen"]
    with pytest.raises(SystemExit) as exit_info:
        main(["continuous", "bench", "--drafters", "model"])
    assert exit_info.value.code == 2 and "argument --drafters: invalid choice: 'model'" in capsys.readouterr().err
    assert main(["continuous", "bench", "--drafters", "frozen", "frozen", "--db", str(tmp_path / "y.sqlite")]) == 2
    assert "name one drafter twice" in capsys.readouterr().err

    argv = ["continuous", "bench", "--drafters", "free", "frozen", "--steps", "4", "--churns", "1.0", "--gamma", "3",
            "--num-timing", "2", "--fd-samples", "0", "--workers", "1", "--db", str(tmp_path / "b.sqlite"),
            "--markdown", str(tmp_path / "t.md"), "--json"]
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["config"]["drafters"] == ["free", "frozen"]
    assert [(r["drafter"], r["method"]) for r in result["rows"]] == [(d, m) for d in ("free", "frozen") for m in ALL_METHODS]
    assert [(e["steps"], e["method"]) for e in result["frozen_vs_free"]] == [(4, m) for m in "RDB"]
    assert [(e["steps"], e["method"]) for e in result["proposition_3_4"]] == [(4, m) for m in "RDB"]
    table = (tmp_path / "t.md").read_text()
    assert "| frozen | 1.0 | 4 | B |" in table and "Frozen drafter, churn 1.0, gamma = 3" in table


def _row(drafter, method, speedup, efficiency, costs=None, steps=50, median=None):
    return {"drafter": drafter, "method": method, "steps": steps, "churn": 1.0, "speedup": speedup,
            "block_efficiency": efficiency, "fd": None, "median_seconds": median or 1.0 / speedup,
            "round_costs": costs}


def _costs(drafting, verification, rest):
    return {"drafting_call_ms": drafting, "verification_call_ms": verification, "rest_ms": rest,
            "total_ms": drafting + verification + rest, "drafting_calls": 1.0, "calls": 2.0}


ROWS = [
    _row("free", "DDPM", 1.0, 1.0, _costs(0.0, 4.0, 0.5)),
    _row("free", "R", 1.25, 2.0, _costs(0.1, 8.0, 2.4)),
    _row("free", "D", 1.20, 2.5, _costs(0.1, 8.0, 2.4)),
    _row("free", "B", 1.30, 2.0, _costs(0.1, 8.0, 2.4)),
    _row("frozen", "DDPM", 1.0, 1.0, _costs(0.0, 4.0, 0.5)),
    _row("frozen", "R", 1.15, 2.8, _costs(4.0, 8.0, 2.0)),
    _row("frozen", "D", 1.32, 3.0, _costs(4.0, 8.0, 2.0)),
    _row("frozen", "B", 1.17, 2.6, _costs(4.0, 8.0, 2.0)),
]


def test_table4_layout_gives_the_change_against_free_in_parentheses():
    result = {"rows": ROWS, "config": {"draft_length": 7}, "frozen_vs_free": compare_drafters(ROWS),
              "proposition_3_4": proposition_3_4(ROWS)}
    table = comparison_markdown(result)
    lines = table.splitlines()
    header = "| K | speedup R | speedup D | speedup B | block efficiency R | block efficiency D | block efficiency B |"
    assert "Frozen drafter, churn 1.0, gamma = 7 (the second paper's Table 4)" in table
    assert lines[lines.index(header) + 2] == ("| 50 | 1.15 (-8.0%) | 1.32 (+10.0%) | 1.17 (-10.0%) | "
                                              "2.80 (+40.0%) | 3.00 (+20.0%) | 2.60 (+30.0%) |")
    assert markdown_table(result).endswith(table)  # the bench's table, then these


def test_proposition_3_4_and_the_corollary_fields():
    (r, d, b) = proposition_3_4(ROWS)
    assert (r["method"], r["steps"], r["churn"]) == ("R", 50, 1.0)
    assert r["be_half"] == pytest.approx(1.4) and r["speedup_over_be_half"] == pytest.approx(1.15 / 1.4)
    assert r["shortfall"] == pytest.approx(1.4 - 1.15)
    assert r["round_in_ddpm_calls"] == pytest.approx({"drafting_call": 1.0, "verification_call": 2.0, "rest": 0.5,
                                                      "total": 3.5, "ideal_total": 2.0})
    assert r["ddpm_step_in_calls"] == pytest.approx(1.125)
    # speedup = be/2 x (2 calls / round) x (DDPM step / call): here 1.4 x 2/3.5 x 1.125
    assert r["cost_model_speedup"] == pytest.approx(2.8 * 4.5 / 14.0) == pytest.approx(1.4 * 2 / 3.5 * 1.125)

    r, d, b = compare_drafters(ROWS)
    assert r["speedup"] == {"frozen": 1.15, "free": 1.25} and r["speedup_change"] == pytest.approx(-0.08)
    assert r["block_efficiency_change"] == pytest.approx(0.4) and r["faster"] == "free" and d["faster"] == "frozen"
    assert r["corollary"]["block_efficiency_ratio"] == pytest.approx(1.4)
    assert r["corollary"]["ideal_break_even"] == 2.0 and r["corollary"]["ideal_prediction"] == "free"
    assert r["corollary"]["measured_break_even"] == pytest.approx(14.0 / 10.5)  # Frozen's round over Free's
    slower_ddpm = [dict(row, round_costs=_costs(0.0, 8.0, 1.0)) if row["method"] == "DDPM" and row["drafter"] == "frozen"
                   else row for row in ROWS]  # load doubled DDPM's step in the Frozen units: their rounds count half
    assert compare_drafters(slower_ddpm)[0]["corollary"]["measured_break_even"] == pytest.approx((14.0 / 9.0) / (10.5 / 4.5))
    assert r["corollary"]["measured_prediction"] == "frozen"  # 1.4 > 1.33: the round costs say Frozen; the medians did not
    assert b["corollary"]["measured_prediction"] == "free"  # 1.3 < 1.33
    assert r["ddpm_median_seconds"] == {"frozen": 1.0, "free": 1.0}
    # without round costs (an old store) the ratios are still there, the cost fields are not
    bare = [dict(row, round_costs=None) for row in ROWS]
    assert "round_in_ddpm_calls" not in proposition_3_4(bare)[0]
    assert "measured_break_even" not in compare_drafters(bare)[0]["corollary"]
    assert comparison_markdown({"rows": ROWS[:4]}) == ""  # no Frozen rows, nothing to add


def test_the_k250_targets_read_the_free_rows():
    rows = [dict(row, steps=250) for row in ROWS]
    assert target_checks(rows)["churn=1.0"]["B_speedup_over_DDPM"] == 1.30
    assert target_checks(rows, drafter="frozen")["churn=1.0"]["B_speedup_over_DDPM"] == 1.17
    assert target_checks([{k: v for k, v in row.items() if k != "drafter"} for row in rows[:4]])["churn=1.0"]["drafter"] == "free"
