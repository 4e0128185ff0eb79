"""The `specdiff` command: --help everywhere, JSON where it prints results, clear errors."""
import json
import subprocess
import sys

import pytest

from specdiff.cli import build_parser, main


def _subcommand_paths(parser, prefix=()):
    for action in parser._actions:
        if action.__class__.__name__ == "_SubParsersAction":
            for name, sub in action.choices.items():
                yield prefix + (name,)
                yield from _subcommand_paths(sub, prefix + (name,))


def test_every_subcommand_has_help(capsys):
    paths = list(_subcommand_paths(build_parser()))
    assert ("demo",) in paths and ("bench", "verify") in paths
    for path in paths:
        with pytest.raises(SystemExit) as exit_info:
            main([*path, "--help"])
        assert exit_info.value.code == 0
        assert "usage:" in capsys.readouterr().out


def test_demo_json_reports_theory_beside_measurement(capsys):
    assert main(["demo", "--rules", "--json", "--samples", "20000", "--vocab", "16"]) == 0
    result = json.loads(capsys.readouterr().out)
    rules = {row["rule"]: row for row in result["rules"]}
    assert {"Lossless", "Linear(0.2)", "TVBudget(0.1)", "Cactus(0.005)"} <= set(rules)
    for row in result["rules"]:
        assert abs(row["accept_measured"] - row["accept_theory"]) < 0.03
        assert row["mean_accepted_block"] >= row["mean_accepted_token"] - 0.05
    assert rules["Lossless"]["tv_to_verifier_theory"] == 0.0
    assert rules["Linear(0.5)"]["tv_to_verifier_theory"] == pytest.approx(0.5 * result["tv_p_q"])


def test_bench_verify_json_small(capsys):
    code = main(["bench", "verify", "--json", "--vocab", "512", "--batch", "2", "--repeats", "1", "--block", "4"])
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    for key in ("ratio_vs_hf", "ratio_vs_floor", "ratio_cactus_vs_lossless"):
        assert result[key] > 0
    assert result["cases"][0]["vocab"] == 512


def test_console_script_is_installed():
    out = subprocess.run([sys.executable, "-m", "specdiff.cli", "--help"], capture_output=True, text=True, check=True)
    assert "demo" in out.stdout


def test_demo_plot_is_written(tmp_path, capsys):
    target = tmp_path / "tradeoff.png"
    assert main(["demo", "--rules", "--json", "--samples", "5000", "--vocab", "12", "--plot", str(target)]) == 0
    assert json.loads(capsys.readouterr().out)["plot"] == str(target)
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
