"""`specdiff demo`, `specdiff generate` and `specdiff bench speedup` on the shipped testbed (small runs)."""
from __future__ import annotations

import json

import pytest

from zoo_copies import without, zoo_folder

from specdiff.cli import main
from specdiff.runs.demo import kind_rows


def test_demo_runs_the_main_job(tmp_path, capsys):
    plot = tmp_path / "frontier.png"
    assert main(["demo", "--json", "--problems", "3", "--max-new-tokens", "40", "--plot", str(plot)]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = {row["config"]: row for row in out["rows"]}
    assert "autoregressive (verifier)" in rows and "AR drafter, B=8" in rows
    assert any(name.startswith("masked K=4") and "Linear" in name for name in rows)
    for row in out["rows"]:
        assert 0 <= row["accuracy"] <= 1 and row["tokens_per_s"] > 0 and row["speedup"] > 0
    assert rows["AR drafter, B=8"]["exact"] and not rows["masked K=4 B=16"]["exact"]
    assert rows["masked K=4 B=16 point mass"]["exact"] and rows["masked K=1 B=8"]["exact"]
    assert not rows["masked K=4 B=16 Typical(0.09)"]["exact"]  # the lenient row that keeps accuracy (issue 22)
    adaptive = rows["masked K<=4 B<=16 point mass, confidence:floor=0,finish=0.9"]  # the controller's row (issue 23)
    assert adaptive["exact"] and adaptive["problems"] == 3 and adaptive["tokens_per_round"] >= 1
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_generate_with_a_controller(capsys):
    assert main(["generate", "Tom has 4 bags of coins with 3 coins in each. How many coins does Tom have now?",
                 "-K", "4", "-B", "12", "--prefix-cache", "persistent", "--proposal", "point_mass",
                 "--controller", "confidence:floor=0,finish=0.9+acceptance", "--max-new-tokens", "30", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    stats = out["generations"][0]["stats"]
    assert out["exact"] and out["config"]["controller"] == "confidence:floor=0,finish=0.9+acceptance"
    assert len(stats["drafted"]) == stats["rounds"] and max(stats["drafted"]) <= 12
    assert all(a <= d for a, d in zip(stats["accepted"], stats["drafted"]))


def test_generate_json_with_zoo_models(tmp_path, capsys):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("Tom has 4 bags of coins with 3 coins in each. How many coins does Tom have now?\\n\n")
    assert main(["generate", "--prompts-file", str(prompts), "-K", "2", "-B", "8", "--order", "left_to_right",
                 "--max-new-tokens", "30", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    generation = out["generations"][0]
    assert generation["stats"]["new_tokens"] == len(generation["token_ids"]) <= 30
    assert out["exact"] is True and out["summary"]["rounds"] == generation["stats"]["rounds"]
    assert isinstance(generation["text"], str) and generation["text"]


@pytest.mark.parametrize("argv, message", [
    (["generate", "x", "-K", "0"], "--steps"), (["generate", "x", "-B", "0"], "--block-size"),
    (["generate", "x", "--tau", "1.5"], "--threshold"), (["generate", "x", "--max-new-tokens", "0"], "--max-new-tokens"),
    (["generate", "x", "--rule", "linear", "--leniency", "2"], "leniency"),
    (["generate", "x", "--drafter", "no-such-model"], "unknown model"),
    (["generate"], "no prompts"),
    (["demo", "--problems", "0"], "--problems"),
    (["demo", "--plot", "/no/such/dir/p.png"], "--plot"),
    (["bench", "speedup", "--repeats", "0"], "--repeats"),
    (["bench", "speedup", "--drafters", "block,block"], "names the block drafter twice"),
    (["bench", "speedup", "--drafters", "masked,no-such-drafter"], "unknown drafter"),
    (["bench", "speedup", "--block-taus", "1.5"], "--block-taus"),
    (["demo", "--drafter", "sdar"], "--drafter"),
    (["generate", "x", "--controller", "bandit"], "unknown controller 'bandit'"),
    (["generate", "x", "--controller", "effort:high=0"], "high must be an integer >= 1"),
    (["demo", "--controller", "confidence:floor=3"], "--controller"),
    (["bench", "speedup", "--controllers", "nope"], "--controllers"),
])
def test_bad_flags_get_a_clear_error(argv, message, capsys):
    assert _exit_code(argv) == 2  # counts are refused by argparse, the rest by the handler: both exit 2
    assert message in capsys.readouterr().err


def _exit_code(argv) -> int:
    try:
        return main(argv)
    except SystemExit as exit_info:
        return exit_info.code


ADAPTIVE_GRID = ["--controllers", "confidence:floor=0,finish=0.9", "--adaptive-steps", "2", "--adaptive-blocks", "8"]


def test_bench_speedup_keys(capsys):
    assert main(["bench", "speedup", "--json", "--problems", "2", "--set", "tune_problems=2", "--repeats", "1",
                 "--steps", "1", "--blocks", "8", "--max-new-tokens", "24", *ADAPTIVE_GRID]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("speedup_vs_ar", "speedup_vs_hf_assisted", "speedup_ar_drafter_vs_ar", "accuracy_ar", "accuracy_spec",
                "mean_accepted", "best_config", "batch8_vs_batch1", "speedup_adaptive_vs_ar",
                "speedup_adaptive_vs_fixed", "accuracy_adaptive", "controller"):
        assert key in out
    assert out["controller"] == "confidence:floor=0,finish=0.9" and out["exact_adaptive"]
    assert out["adaptive_config"]["proposal"] == "point_mass" and out["adaptive_per_round"]["ms_per_round"] > 0
    assert out["speedup_adaptive_vs_fixed"] == out["tokens_per_s"]["spec_adaptive"] / out["tokens_per_s"]["spec"]
    assert {"draft_ms", "verify_ms", "overhead_ms"} <= set(out["profile"])
    assert out["best_config"]["steps"] == 1 and out["best_config"]["rule"] == "lossless"
    assert out["speedup_vs_ar"] > 0


@pytest.mark.parametrize("argv, name", [
    (["generate", "x", "--drafter", "block", "--max-new-tokens", "4"], "block-drafter"),
    (["demo", "--drafter", "uniform", "--problems", "1"], "uniform-drafter"),
    (["bench", "speedup", "--drafters", "masked,dflash", "--problems", "1"], "dflash-drafter"),
])
def test_a_kind_not_trained_yet_says_how_to_train_it(tmp_path, capsys, argv, name):
    with zoo_folder(without(tmp_path, [name])):  # holds whether or not the lead has shipped it
        assert _exit_code(argv) == 2
    err = capsys.readouterr().err
    assert f"specdiff zoo train {name}" in err and "Traceback" not in err


def test_demo_runs_each_kind_at_its_own_effort(new_drafters, capsys):
    argv = ["demo", "--json", "--problems", "1", "--max-new-tokens", "16", "--plot", ""]
    for kind in ("block", "uniform", "dflash", "ar"):
        argv += ["--drafter", kind]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    rows = {row["config"]: row for row in out["rows"]}
    assert out["drafters"] == ["block", "uniform", "dflash", "ar"]
    assert len(rows) == 2 + sum(len(kind_rows(kind)) for kind in out["drafters"])
    assert not any(name.startswith("masked") for name in rows)  # --drafter replaces the masked rows
    for name, row in rows.items():
        assert row["tokens_per_s"] > 0 and (name.startswith("autoregressive") or row["tokens_per_round"] >= 1), name
    # marginal mode is exact for the uniform and DFlash drafters at any K, for the block drafter only at K = 1
    assert rows["uniform K=4 B=8"]["exact"] and rows["dflash B=16"]["exact"]
    assert not rows["block K=2 B=8"]["exact"] and rows["block tau=0.9 B=8 point mass"]["exact"]
    assert not rows["block K=4 B=8 Linear(0.2)"]["exact"] and rows["AR drafter B=12"]["exact"]


def test_each_kind_gets_its_own_effort_knob(new_drafters):
    import specdiff as sd
    from specdiff.models import ModelCache
    from specdiff.runs import RunConfig, build_generator

    cache = ModelCache()
    uniform = build_generator(RunConfig("u", drafter="uniform", steps=3), cache)
    assert isinstance(uniform.drafter, sd.UniformDiffusionDrafter) and uniform.drafter.steps == 3
    block = build_generator(RunConfig("b", drafter="block-drafter", threshold=0.7, prefix_cache=False), cache)
    assert block.drafter.threshold == 0.7 and block.drafter.prefix_cache == "persistent"
    dflash = build_generator(RunConfig("d", drafter="dflash"), cache)
    assert dflash.drafter.target is dflash.verifier.model  # the verifier it serves, not a second copy
    with pytest.raises(ValueError, match="--steps .*does not apply to the dflash drafter"):
        build_generator(RunConfig("d", drafter="dflash", steps=2), cache)
    with pytest.raises(ValueError, match="--threshold .*does not apply to the uniform drafter"):
        build_generator(RunConfig("u", drafter="uniform", threshold=0.9), cache)


def test_bench_speedup_reports_each_kind_side_by_side(new_drafters, capsys):
    assert main(["bench", "speedup", "--json", "--problems", "2", "--set", "tune_problems=2", "--repeats", "1",
                 "--steps", "1", "--blocks", "8", "12", "--caches", "persistent", "--max-new-tokens", "24",
                 "--drafters", "block,uniform", "--drafters", "dflash", "--block-steps", "2", "--block-taus", "0.9",
                 "--uniform-steps", "1", *ADAPTIVE_GRID, "--kind-controllers", "acceptance:margin=2"]) == 0
    out = json.loads(capsys.readouterr().out)
    kinds = out["kinds"]
    assert set(kinds) == {"masked", "ar", "block", "uniform", "dflash"}
    assert kinds["masked"]["speedup_vs_ar"] == out["speedup_vs_ar"]  # the headline's own measurement
    assert kinds["ar"]["speedup_vs_ar"] == out["speedup_ar_drafter_vs_ar"]
    for kind in ("block", "uniform", "dflash"):
        row = kinds[kind]
        assert row["speedup_vs_ar"] > 0 and row["tokens_per_round"] >= 1 and 0 <= row["accuracy"] <= 1
        assert row["exact"] and row["config"]["rule"] == "lossless" and row["method"] == f"spec_{kind}"
        assert row["config"]["drafter"] == f"{kind}-drafter" and f"spec_{kind}" in out["tokens_per_s"]
        adaptive = row["adaptive"]  # the same kind with a controller, in the same interleaved rounds
        assert adaptive["controller"] == "acceptance:margin=2" and adaptive["exact"]
        assert adaptive["tokens_per_round"] >= 1 and adaptive["ms_per_round"] > 0 and row["ms_per_round"] > 0
    block_grid = kinds["block"]["tuning_grid"]
    assert {row["config"]["block_size"] for row in block_grid} == {8}  # B <= its trained block length
    assert {(row["config"]["steps"], row["config"]["threshold"], row["config"]["proposal"]) for row in block_grid} \
        == {(2, None, "point_mass"), (1, 0.9, "point_mass")}
    assert {row["config"]["block_size"] for row in kinds["uniform"]["tuning_grid"]} == {8, 12}
    assert {row["config"]["steps"] for row in kinds["uniform"]["tuning_grid"]} == {1}
