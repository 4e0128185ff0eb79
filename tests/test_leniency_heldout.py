"""tools/leniency_heldout.py (issue 22, item 4): what it chooses on a validation store, and that the
test config it writes measures exactly those settings."""
import importlib.util
from pathlib import Path

from specdiff.runs.sweep_config import load_config

SCRIPT = Path(__file__).resolve().parents[1] / "tools" / "leniency_heldout.py"
spec = importlib.util.spec_from_file_location("leniency_heldout", SCRIPT)
heldout = importlib.util.module_from_spec(spec)
spec.loader.exec_module(heldout)

BASE = dict(drafter="masked-drafter", verifier="verifier", steps=4, threshold=None, method="token",
            proposal="marginal", block_size=16)


def _summary(name, accuracy, throughput, **params):
    return dict(config_id=name, name=name, accuracy=accuracy, throughput=throughput, params=dict(BASE, **params))


SUMMARIES = [
    _summary("lossless", 0.95, 100.0, rule="lossless", leniency=0.0),
    _summary("lossless slow", 0.96, 80.0, rule="lossless", leniency=0.0, steps=2),
    _summary("typical ok", 0.945, 105.0, rule="typical", leniency=0.2),
    _summary("typical too lossy", 0.90, 120.0, rule="typical", leniency=0.4),
    _summary("gated", 0.94, 110.0, rule="linear", leniency=1.0, gate_top=0.5),
    _summary("linear", 0.60, 130.0, rule="linear", leniency=0.3),
]


def test_it_chooses_the_fastest_within_the_loss_per_family_and_the_frontiers():
    chosen = heldout.choose(SUMMARIES, loss=0.01)
    assert chosen["lossless"][0] == "reference lossless"  # fastest lossless, not the most accurate
    assert "chosen typical" in chosen["typical ok"] and "typical too lossy" not in chosen
    assert "chosen gated linear" in chosen["gated"]  # 0.94 = 0.95 - 0.01: within the loss
    assert "linear" not in chosen  # below the floor (best lossless - 5 points): on no frontier
    assert "joint frontier" in chosen["lossless slow"] and "linear-alone frontier" in chosen["lossless slow"]


def test_the_test_config_runs_exactly_the_chosen_settings(tmp_path):
    chosen = heldout.choose(SUMMARIES, loss=0.01)
    picked = [dict(s, reasons=chosen[s["config_id"]]) for s in SUMMARIES if s["config_id"] in chosen]
    source = '[models]\ndrafter = "masked-drafter"\nverifier = "verifier"\n[task]\nname = "arith"\nproblems = 150\n'
    path = tmp_path / "test.toml"
    path.write_text(heldout.test_config(source, picked, problems=3, task_seed=1, run_seed=11, origin="v.sqlite"))
    settings, configs, _ = load_config(path)
    assert settings["task"]["options"] == {"split": "test", "seed": 1} and settings["run"]["seed"] == 11
    wanted = sorted(tuple(sorted((k, v) for k, v in s["params"].items() if v is not None)) for s in picked)
    got = sorted(tuple(sorted((k, v) for k, v in c["params"].items() if v is not None)) for c in configs)
    assert got == wanted
