"""The `specdiff continuous` command: help for every subcommand, and a small JSON run on the mixture."""
import json

import pytest

from specdiff.cli import main


@pytest.mark.parametrize("sub", ["sample", "bench", "train", "eval"])
def test_every_subcommand_has_help(sub, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["continuous", sub, "--help"])
    assert exit_info.value.code == 0
    assert "usage" in capsys.readouterr().out


def test_sample_prints_json_statistics(capsys):
    assert main(["continuous", "sample", "--model", "gmm2d", "--steps", "20", "--gamma", "4", "--method", "B",
                 "--num-samples", "200", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["method"] == "B" and payload["num_steps"] == 20
    assert 1.0 <= payload["block_efficiency"] <= 5.0
    assert payload["target_calls"] == pytest.approx(payload["rounds"] + 1)  # the Free drafter


def test_bad_churn_is_a_clean_error(capsys):
    with pytest.raises(SystemExit) as exit_info:  # refused when parsed (issue 11), before any model loads
        main(["continuous", "sample", "--model", "gmm2d", "--churn", "2", "--json"])
    assert exit_info.value.code == 2
    assert "argument --churn: must lie in [0, 1]" in capsys.readouterr().err


# ----------------------------------------------------------------------------- issue 11, items 1-3

import shutil

import numpy as np

from specdiff import manifest
from specdiff.cli import build_parser


@pytest.fixture
def weights_copy(tmp_path, monkeypatch):
    """A copy of the shipped weights/ that the commands read and `--replace-shipped` writes."""
    import specdiff.continuous.models as models

    copy = tmp_path / "weights"
    shutil.copytree(models.WEIGHTS_DIR, copy)
    monkeypatch.setattr(models, "WEIGHTS_DIR", copy)
    monkeypatch.chdir(tmp_path)
    return copy


def _weights(capsys) -> dict:
    assert main(["continuous", "weights", "--json"]) == 0
    return {name: row["status"] for name, row in json.loads(capsys.readouterr().out)["weights"].items()}


def test_the_committed_weights_match_the_manifest(capsys):
    assert _weights(capsys) == {"digits_unet/model.safetensors": "shipped", "digits_classifier.safetensors": "shipped"}


def test_train_writes_a_run_directory_unless_told_to_replace_the_shipped_weights(weights_copy, tmp_path, capsys):
    shipped = manifest.sha256_file(weights_copy / "digits_unet" / "model.safetensors")
    argv = ["continuous", "train", "denoiser", "--steps", "2", "--batch-size", "4", "--run-dir", str(tmp_path / "run")]
    assert main(argv) == 0
    assert manifest.sha256_file(weights_copy / "digits_unet" / "model.safetensors") == shipped
    assert (tmp_path / "run" / "weights" / "digits_unet" / "model.safetensors").exists()
    assert (tmp_path / "run" / "digits_unet_checkpoint.pt").exists()
    capsys.readouterr()
    assert _weights(capsys)["digits_unet/model.safetensors"] == "shipped"
    assert main(["continuous", "train", "denoiser", "--steps", "2", "--batch-size", "4", "--run-dir",
                 str(tmp_path / "run2"), "--replace-shipped"]) == 0
    capsys.readouterr()
    assert _weights(capsys) == {"digits_unet/model.safetensors": "modified", "digits_classifier.safetensors": "shipped"}


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["continuous", "sample", "--num-samples", "0"], "--num-samples"),
        (["continuous", "sample", "--num-samples", "-1"], "--num-samples"),
        (["continuous", "sample", "--steps", "0"], "--steps"),
        (["continuous", "sample", "--gamma", "0"], "--gamma"),
        (["continuous", "sample", "--threads", "0"], "--threads"),
        (["continuous", "sample", "--churn", "1.5"], "--churn"),
        (["continuous", "sample", "--temperature", "0"], "--temperature"),
        (["continuous", "sample", "--out", "/no/such/folder/s.npz"], "--out"),
        (["continuous", "sample", "--out", "s.txt"], "--out"),
        (["continuous", "sample", "--out", "somewhere/"], "--out"),
        (["continuous", "eval", "--num-samples", "1"], "--num-samples"),
        (["continuous", "bench", "--steps", "50", "0"], "--steps"),
        (["continuous", "bench", "--churns", "0.5", "-0.1"], "--churns"),
        (["continuous", "bench", "--fd-samples", "1"], "--fd-samples"),
        (["continuous", "bench", "--fd-samples", "-3"], "--fd-samples"),
        (["continuous", "bench", "--ddpm-fd-seeds", "0"], "--ddpm-fd-seeds"),
        (["continuous", "bench", "--workers", "0"], "--workers"),
        (["continuous", "bench", "--num-timing", "0"], "--num-timing"),
        (["continuous", "bench", "--timing-parts", "0"], "--timing-parts"),
        (["continuous", "bench", "--fd-steps", "0"], "--fd-steps"),
        (["continuous", "bench", "--plot", "/no/such/folder/p.png"], "--plot"),
        (["continuous", "bench", "--out-json", "/no/such/folder/r.json"], "--out-json"),
        (["continuous", "bench", "--markdown", "/no/such/folder/r.md"], "--markdown"),
        (["continuous", "bench", "--db", "/no/such/folder/b.sqlite"], "--db"),
        (["continuous", "train", "--steps", "0"], "--steps"),
        (["continuous", "train", "--steps", "-1"], "--steps"),
        (["continuous", "train", "--batch-size", "0"], "--batch-size"),
        (["continuous", "train", "--out-dir", "/no/such/folder/w"], "--out-dir"),
        (["continuous", "train", "--out-dir", "w", "--replace-shipped"], "--replace-shipped"),
    ],
)
def test_bad_counts_and_paths_are_refused_when_parsed(argv, flag, capsys):
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(argv)
    assert exit_info.value.code == 2
    assert f"argument {flag}" in capsys.readouterr().err


@pytest.mark.parametrize("suffix", [".npy", ".npz"])
def test_sample_writes_the_requested_file_and_prints_its_path(suffix, tmp_path, capsys):
    out = tmp_path / f"s{suffix}"
    assert main(["continuous", "sample", "--model", "gmm2d", "--steps", "10", "--num-samples", "5", "--out", str(out),
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["out"] == str(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == [out.name]
    samples = np.load(out)
    assert (samples if suffix == ".npy" else samples["samples"]).shape == (5, 2)


def test_png_grid_of_a_mixture_is_refused_before_sampling(tmp_path, capsys):
    assert main(["continuous", "sample", "--model", "gmm2d", "--out", str(tmp_path / "g.png")]) == 2
    assert "needs --model digits" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_churn_zero_warns_that_speculation_is_off(capsys):
    assert main(["continuous", "sample", "--model", "gmm2d", "--steps", "10", "--churn", "0", "--num-samples", "4",
                 "--json"]) == 0
    captured = capsys.readouterr()
    assert "churn 0 turns speculation off" in captured.err
    assert json.loads(captured.out)["block_efficiency"] == 1.0
