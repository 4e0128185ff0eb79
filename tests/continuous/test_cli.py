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
    assert main(["continuous", "sample", "--model", "gmm2d", "--churn", "2", "--json"]) == 2
    assert "churn" in capsys.readouterr().err
