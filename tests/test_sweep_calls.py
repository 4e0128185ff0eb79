"""The noise-free cost axis (issue 22, item 2): every sweep row stores the verifier's and the drafter's
forwards and tokens processed; `specdiff frontier --cost calls` prices them with per-call costs
measured once (kept in the store), so that machine noise cannot reorder configurations."""
import json
from pathlib import Path

import pytest
from sweep_helpers import write_config

from specdiff.cli import main
from specdiff.eval.pricing import price_ms
from specdiff.eval.sweepstore import SCHEMA_VERSION, SweepStore

ROOT = Path(__file__).resolve().parents[1]
COSTS = {"verifier": {"per_forward_ms": 2.0, "per_token_ms": 0.01}, "drafter": {"per_forward_ms": 0.5,
                                                                                "per_token_ms": 0.002}}


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("calls")
    config, store = write_config(tmp / "s.toml", problems=2, steps=(1, 3)), tmp / "s.sqlite"
    assert main(["sweep", config, "--store", str(store), "--json"]) == 0
    return tmp, store


def test_every_row_counts_the_models_calls(swept):
    _, store = swept
    reader = SweepStore(store)
    try:
        configurations = {c["config_id"]: c for c in reader.configurations()}
        rows = reader.rows()
    finally:
        reader.close()
    assert len(rows) == 8
    for row in rows:
        calls, steps = row["calls"], configurations[row["config_id"]]["params"]["steps"]
        assert calls["rows"] == 1
        assert calls["verifier_forwards"] == row["rounds"] + 1  # the prefill, then one forward per round
        assert calls["drafter_forwards"] == steps * row["rounds"]  # K denoising forwards per round (no cache)
        assert calls["verifier_tokens"] >= row["prompt_tokens"] - 1 + row["rounds"] * 7  # prefix, then B + 1 = 7
        assert calls["drafter_tokens"] > calls["drafter_forwards"]


def test_the_calls_frontier_is_the_priced_calls_and_does_not_move(swept, capsys):
    tmp, store = swept
    costs = tmp / "costs.json"
    costs.write_text(json.dumps(COSTS))
    outs = []
    for _ in range(2):
        assert main(["frontier", str(store), "--cost", "calls", "--costs", str(costs), "--json", "--no-plot"]) == 0
        outs.append(json.loads(capsys.readouterr().out))
    assert outs[0]["latency"] == outs[1]["latency"] and outs[0]["cost"] == "calls"
    reader = SweepStore(store)
    try:
        rows = reader.rows()
    finally:
        reader.close()
    for point in outs[0]["configurations"]:
        mine = [r for r in rows if r["config_id"] == point["config_id"]]
        priced = sum(price_ms(r["calls"], COSTS) for r in mine) / len(mine) / 1000
        assert point["latency_s"] == pytest.approx(priced)
        assert point["throughput"] == pytest.approx(sum(r["new_tokens"] for r in mine) / (priced * len(mine)))
    assert main(["frontier", str(store), "--json", "--no-plot"]) == 0  # the wall-time frontier stays
    assert json.loads(capsys.readouterr().out)["cost"] == "wall"


def test_the_report_can_show_the_priced_calls(swept, capsys):
    tmp, store = swept
    costs = tmp / "costs.json"
    costs.write_text(json.dumps(COSTS))
    page = tmp / "priced.html"
    assert main(["report", str(store), "--cost", "calls", "--costs", str(costs), "--out", str(page)]) == 0
    text = page.read_text()
    assert "priced seconds, not wall time" in text
    reader = SweepStore(store)
    try:
        rows = reader.rows()
    finally:
        reader.close()
    for config_id in {r["config_id"] for r in rows}:  # the configurations' latency column is the priced one
        mine = [r for r in rows if r["config_id"] == config_id]
        assert f"{sum(price_ms(r['calls'], COSTS) for r in mine) / len(mine) / 1000:.4f} ± " in text
    wall = tmp / "wall.html"
    assert main(["report", str(store), "--out", str(wall)]) == 0
    assert "priced seconds" not in wall.read_text()
    assert main(["report", str(store), "--costs", str(costs), "--out", str(wall)]) == 2
    assert "--cost calls" in capsys.readouterr().err


def test_the_call_costs_are_measured_once_and_kept_in_the_store(swept):
    from specdiff.runs.call_costs import store_call_costs

    _, store = swept
    first = store_call_costs(store)
    for model in ("verifier", "drafter"):
        assert first[model]["per_forward_ms"] > 0 and first[model]["per_token_ms"] >= 0
        assert len(first[model]["medians_ms"]) == len(first["sizes"])
    assert store_call_costs(store) == first  # the stored artifact, not a new measurement


def test_a_version_1_store_is_read_as_it_is_and_gains_the_column_when_a_sweep_writes(tmp_path, capsys):
    old = tmp_path / "old.sqlite"
    import lzma

    old.write_bytes(lzma.decompress((ROOT / "docs" / "results" / "frontier" / "dflash_linear.sqlite.xz").read_bytes()))
    reader = SweepStore(old)
    try:
        assert reader.meta("schema_version") == "1"
        rows, settings = reader.rows(), reader.settings
    finally:
        reader.close()
    assert rows and all(r["calls"] is None for r in rows)
    assert main(["frontier", str(old), "--cost", "calls", "--json", "--no-plot"]) == 2
    assert "no call counts" in capsys.readouterr().err
    SweepStore(old, settings).close()  # opened to write: migrated
    reader = SweepStore(old)
    try:
        assert reader.meta("schema_version") == str(SCHEMA_VERSION) == "2"
        assert len(reader.rows()) == len(rows) and all(r["calls"] is None for r in reader.rows())
    finally:
        reader.close()
