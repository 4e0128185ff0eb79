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


# Issue 52 item 5: every command refuses an unknown drafter as it did before the refs work (fa03504): the model
# loading path names an unknown drafter with the kinds it is not; eval (and lm_eval) look its tokenizer up first,
# whose refusal names an unknown model. The zoo's verifier is no drafter, and `bench vllm --target` is the pair
# bench's target (it needs --draft), never the real-verifier bench.
UNKNOWN_DRAFTER = "unknown drafter '{}' (unknown model): not a kind ("
UNKNOWN_MODEL = "unknown model '{}': not a zoo name ("


@pytest.mark.parametrize("argv, message", [
    (["generate", "x", "--drafter", "no-such-model"], UNKNOWN_DRAFTER.format("no-such-model")),
    (["eval", "arith", "--drafter", "no-such-model"], UNKNOWN_MODEL.format("no-such-model")),
    (["bench", "speedup", "--drafters", "masked,no-such-model"], UNKNOWN_DRAFTER.format("no-such-model")),
    (["generate", "x", "--drafter", "verifier"], UNKNOWN_DRAFTER.format("verifier")),
    # eval loads its verifier (a warm-up run) before the drafter is built and refused, as it did before
    (["eval", "arith", "--drafter", "verifier", "-n", "1", "--max-new-tokens", "2"], UNKNOWN_DRAFTER.format("verifier")),
    (["bench", "speedup", "--drafters", "verifier"], UNKNOWN_DRAFTER.format("verifier")),
    (["bench", "vllm", "--target", "some-folder"], "--target names the pair bench's target checkpoint and needs "
                                                   "--draft (and --masked)"),
])
def test_an_unknown_drafter_and_a_bare_target_are_refused_as_before_issue_52(argv, message, capsys, monkeypatch):
    from specdiff import models

    def no_loading(*args, **kwargs):
        raise AssertionError("a model was loaded")

    if argv[:2] != ["eval", "arith"] or "verifier" not in argv:
        monkeypatch.setattr(models, "load_model", no_loading)
    try:
        code = main(argv)
    except SystemExit as exit_info:
        code = exit_info.code
    assert code == 2
    assert message in capsys.readouterr().err


def test_bench_vllm_target_with_draft_is_the_pair_bench_and_verifier_alone_the_real_one(monkeypatch, capsys):
    """--target (deprecated) with --draft names the pair bench's target, as --verifier with --draft does; --verifier
    alone is the real-verifier bench. The bench itself is not run here (no vLLM needed)."""
    from specdiff.integrations.vllm import bench

    seen = []
    monkeypatch.setattr(bench, "run", lambda options, log=None: seen.append(
        (options.verifier, options.draft, options.masked)) or {})
    assert main(["bench", "vllm", "--json", "--target", "t", "--draft", "d", "--masked", "m"]) == 0
    assert "--target is deprecated, use --verifier" in capsys.readouterr().err
    assert main(["bench", "vllm", "--json", "--verifier", "v"]) == 0
    assert seen == [("t", "d", "m"), ("v", None, None)]
