"""`specdiff zoo`: training never overwrites the shipped weights by default, `zoo list` tells shipped
weights from retrained ones, and every count is validated when the arguments are parsed (issue 11)."""
import json
import shutil

import pytest

import specdiff.zoo as zoo
from specdiff import manifest
from specdiff.cli import build_parser, main


@pytest.fixture
def zoo_copy(tmp_path, monkeypatch):
    """A copy of the shipped models that `zoo.load` / `zoo list` read (as SPECDIFF_ZOO_DIR would)."""
    copy = tmp_path / "zoo"
    shutil.copytree(zoo.MODELS_DIR, copy)
    monkeypatch.setattr(zoo, "MODELS_DIR", copy)
    return copy


def _list(capsys) -> dict:
    assert main(["zoo", "list", "--json"]) == 0
    return json.loads(capsys.readouterr().out)["models"]


def test_the_committed_weights_match_the_manifest(capsys):
    rows = _list(capsys)
    assert {name: row["status"] for name, row in rows.items()} == {name: "shipped" for name in zoo.MODEL_NAMES}
    assert all(row["shipped"] for row in rows.values())


def test_training_writes_a_run_directory_not_the_shipped_weights(zoo_copy, tmp_path, capsys):
    before = manifest.sha256_file(zoo_copy / "ar-drafter" / "model.safetensors")
    run_dir = tmp_path / "run"
    assert main(["zoo", "train", "ar-drafter", "--steps", "1", "--threads", "1", "--run-dir", str(run_dir)]) == 0
    assert manifest.sha256_file(zoo_copy / "ar-drafter" / "model.safetensors") == before
    assert (run_dir / "model" / "model.safetensors").exists()
    capsys.readouterr()
    assert _list(capsys)["ar-drafter"]["status"] == "shipped"


def test_replacing_the_shipped_weights_takes_a_flag_and_shows_in_zoo_list(zoo_copy, tmp_path, capsys):
    assert main(["zoo", "train", "ar-drafter", "--steps", "1", "--threads", "1", "--run-dir", str(tmp_path / "run"),
                 "--replace-shipped"]) == 0
    capsys.readouterr()
    rows = _list(capsys)
    assert rows["ar-drafter"]["status"] == "modified" and not rows["ar-drafter"]["shipped"]
    assert rows["verifier"]["status"] == "shipped"
    assert main(["zoo", "list"]) == 0
    assert "MODIFIED" in capsys.readouterr().out
    (zoo_copy / "verifier" / "model.safetensors").unlink()
    assert _list(capsys)["verifier"]["status"] == "missing"


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["zoo", "train", "ar-drafter", "--steps", "0"], "--steps"),
        (["zoo", "train", "ar-drafter", "--steps", "-1"], "--steps"),
        (["zoo", "train", "ar-drafter", "--threads", "0"], "--threads"),
        (["zoo", "train", "ar-drafter", "--probe-every", "0"], "--probe-every"),
        (["zoo", "train", "ar-drafter", "--out", "/no/such/folder/out"], "--out"),
        (["zoo", "train", "ar-drafter", "--run-dir", "/no/such/folder/run"], "--run-dir"),
        (["zoo", "train", "ar-drafter", "--out", "x", "--replace-shipped"], "--replace-shipped"),
        (["zoo", "eval", "-n", "0"], "-n"),
        (["zoo", "eval", "-n", "-1"], "-n"),
        (["zoo", "eval", "-n", "ten"], "-n"),
        (["zoo", "eval", "--repeats", "0"], "--repeats"),
        (["zoo", "eval", "--threads", "0"], "--threads"),
    ],
)
def test_bad_counts_and_paths_are_refused_when_parsed(argv, flag, capsys):
    """Parsed only: before the fix `zoo eval -n 0` parsed fine and then looped forever."""
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(argv)
    assert exit_info.value.code == 2
    assert f"argument {flag}" in capsys.readouterr().err


@pytest.mark.parametrize("steps", [0, -1, 1.5, True])
def test_train_function_refuses_a_bad_number_of_steps(steps, tmp_path):
    from specdiff.training.zoo import train

    with pytest.raises(ValueError, match="steps must be an integer >= 1"):
        train("ar-drafter", run_dir=tmp_path, steps=steps)
