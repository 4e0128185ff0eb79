"""`specdiff calibrate` (issue 14, item 4): end to end on the shipped testbed at a tiny size (a
2-problem sweep, 3 prefixes), and its refusals of stores it cannot calibrate from."""
import json
import math

import pytest

from specdiff.cli import main
from specdiff.eval.sweepstore import SweepStore
from sweep_helpers import write_config


def test_calibrate_runs_the_sweep_fits_the_model_and_reports(tmp_path, capsys):
    config, store = write_config(tmp_path / "tiny.toml", problems=2, steps=(1, 2)), tmp_path / "tiny.sqlite"
    plot = tmp_path / "figure3.png"
    assert main(["calibrate", config, "--store", str(store), "--prompts", "3", "--cuts", "1", "--plot", str(plot),
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert math.isfinite(out["median_rel_error_throughput"]) and out["median_rel_error_throughput"] >= 0
    assert set(out["errors_by_model"]) == {"eq7", "positional", "per_draft"} and out["model"] == "eq7"
    assert set(out["errors_by_costs"]) == {"timed", "sweep"} and out["costs_source"] == "timed"
    assert set(out["costs_other"]["B=6"]["sweep_over_timed"]) == {"draft K=1", "draft K=2", "verifier forward and rule"}
    assert len(out["configurations"]) == 4  # K = 1, 2 x lam = 0, 0.5
    cost = out["costs"]["B=6"]
    assert set(cost["draft_ms"]) == {"K=1", "K=2"} and "r2" in cost["fit"] and cost["c_v_ms"] > 0
    for k in ("K=1", "K=2"):
        d = out["distance"]["B=6"]["marginal"][k]
        assert 0 <= d["d_K"] <= 1 and len(d["per_position"]) == 6
    assert out["prefixes"]["count"] == 3 and "validation" in out["prefixes"]["source"]
    for c in out["configurations"]:
        assert c["predicted"]["eq7"]["acceptance"] == pytest.approx(1 - (1 - c["lam"]) * c["d_K"])  # Eq. 6
        assert 1 <= c["predicted"]["eq7"]["tokens_per_round"] <= 7 and c["measured"]["throughput"] > 0
    assert plot.read_bytes()[:4] == b"\x89PNG"
    artifact = SweepStore(store).artifacts()["calibration"]
    assert artifact["median_rel_error_throughput"] == out["median_rel_error_throughput"]
    page = tmp_path / "report.html"
    assert main(["report", str(store), "--out", str(page)]) == 0
    html = page.read_text()
    assert "Calibration of the throughput model" in html and 'alt="figure3_png_base64"' in html


def _synthetic_store(path, rule: str, rows: bool = True):
    settings = {"models": {"drafter": "masked-drafter", "verifier": "verifier"},
                "task": {"name": "arith", "problems": 1, "max_new_tokens": 8, "boxed": False, "options": {}},
                "run": {"seed": 0, "threads": 1}, "grid": {}}
    store = SweepStore(path, settings)
    params = dict(drafter="masked-drafter", verifier="verifier", steps=1, threshold=None, rule=rule, leniency=0.0,
                  method="token", proposal="marginal", block_size=4)
    store.add_configurations([dict(config_id="c", name="K=1", effort="K=1", params=params)])
    if rows:
        store.put(dict(config_id="c", problem_id="0", problem_index=0, text="", correct=0, new_tokens=4, rounds=2,
                       accepted=[1, 1], draft_s=0.01, verify_s=0.01, wall_s=0.03, exact=1))
    store.close()
    return str(path)


@pytest.mark.parametrize("case, message", [
    ("missing", "does not exist or is empty"),
    ("no rows", "no configuration of the sweep has finished"),
    ("lossless only", "no finished Linear(lam) configuration"),
])
def test_calibrate_refuses_stores_it_cannot_use(tmp_path, capsys, case, message):
    path = tmp_path / "s.sqlite"
    if case != "missing":
        _synthetic_store(path, "lossless" if case == "lossless only" else "linear", rows=case != "no rows")
    assert main(["calibrate", "--store", str(path), "--json"]) == 2
    assert message in capsys.readouterr().err


def test_calibrate_refuses_bad_efforts(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["calibrate", "--store", str(tmp_path / "s.sqlite"), "--steps", "0"])
    assert "--steps" in capsys.readouterr().err
