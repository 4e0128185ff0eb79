"""`specdiff demo --real` (issue 41, item 7): the real pair's rows side by side, through the one bench, with the
configurations of the committed tuning file (chosen on validation prompts), here at small sizes."""
from __future__ import annotations

import pytest

from real.test_real_verifier import smollm2  # noqa: F401  (the fixture: skips, or fails under CI, when not fetched)

pytestmark = pytest.mark.numerics  # kernel-dependent: run again under other kernels (scripts/numerics_kernels.sh)


def test_the_committed_tuning_was_chosen_on_validation_for_the_demos_rows():
    from specdiff.bench import demo_real, settings, tuner

    preset = settings.build(demo_real.PRESET, {})
    tuning = tuner.read(demo_real.TUNING, preset.verifier)  # refused for another verifier
    assert "validation" in tuning["on"] and "test" not in tuning["on"]
    assert set(tuning["references"]) == {"dflash", "masked", "lookup", "hybrid"}
    assert {f"spec_{kind}" for kind in tuning["references"]} <= set(tuning["chosen"])


def test_demo_real_shows_every_row_lossless_and_greedy_identical_in_float32(smollm2, tmp_path):  # noqa: F811
    from specdiff.bench.demo_real import real_demo, table_rows

    png = tmp_path / "frontier.png"
    report = real_demo("float32", str(png), show_progress=False, overrides={"problems": 2, "max_new_tokens": 12})
    rows = {line["row"]: line for line in table_rows(report)}
    assert set(rows) == {"ar", "hf", "spec_dflash", "spec_masked", "spec_lookup", "spec_hybrid", "spec_dflash_tree8"}
    assert report["dtype"] == "float32" and report["prompts"] == 2
    for name, line in rows.items():
        assert line["exact"], name
        assert line["greedy_identical"] == 1.0, name  # float32: token for token HF greedy
        assert line["tokens_per_s"] > 0
    assert rows["ar"]["speedup_vs_ar"] == pytest.approx(1.0)
    assert report["rows"]["spec_dflash_tree8"]["config"]["tree_budget"] == 8  # the preset's one budget
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_demo_real_command_refuses_the_testbed_options(capsys):
    from specdiff.cli import main

    assert main(["demo", "--real", "--drafter", "ar"]) != 0
    assert "--drafter and --controller are the testbed demo's" in capsys.readouterr().err
    assert main(["demo", "--real", "--rules"]) != 0
    assert main(["demo", "--dtype", "bfloat16", "--problems", "1"]) != 0
    assert "--dtype is for --real" in capsys.readouterr().err
