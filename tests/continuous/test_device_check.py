"""scripts/continuous_device_check.py at toy size on the CPU (issue 15, item 5): every section runs,
so that the script a GPU session runs cannot rot. Its numbers at this size mean nothing."""
import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "continuous_device_check.py"


def load_script():
    spec = importlib.util.spec_from_file_location("continuous_device_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_device_check_runs_every_section_at_toy_size(tmp_path, capsys):
    script = load_script()
    out = tmp_path / "check.json"
    assert script.main(["--toy", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report == json.loads(capsys.readouterr().out)
    assert report["device"] == "cpu" and report["toy"] is True
    for section in script.SECTIONS:
        assert "error" not in report[section], report[section].get("traceback")
    for method in ("R", "D", "B"):
        assert 0 < report["verify_exactness"][method]["acceptance"] < 1
        entry = report["sampler_exactness"]["methods"][method]
        assert 0 <= entry["min_projection_ks_p_vs_ddpm"] <= 1 and entry["block_efficiency"] >= 1
        assert entry["host_syncs_per_round"] is None  # counted on CUDA only
    for entry in report["unet_cost"]["batches"].values():
        assert entry["round_ms"] > 0 and entry["model_ms_per_round"] > 0 and entry["cost_ratio"] > 0
        assert entry["host_syncs_per_round"] is None
    assert {"D_over_R", "B_over_R"} <= set(report["verify_round_ms"]["largest_d64"])


def test_host_syncs_are_not_counted_off_cuda():
    assert load_script().count_host_syncs(lambda: 7, "cpu") == (7, None)
