"""Issue 39: the bench's interface, its deprecated aliases, tune-then-measure, and a drafter kind registered from
this file alone running through `specdiff bench speedup` on the testbed."""
from __future__ import annotations

import json
import re
import warnings

import pytest

from specdiff.cli import main
from specdiff.commands import bench_speedup
from specdiff.drafters import registry
from specdiff.drafters.autoregressive import AutoregressiveKind

TINY = ["--json", "--problems", "1", "--set", "tune_problems=1", "--repeats", "1", "--max-new-tokens", "12",
        "--set", "blocks=[4]", "--set", "steps=[1]", "--set", "caches=[\"off\"]", "--set", "controllers=[]",
        "--set", "batch_sizes=[]"]


def _options(argv) -> list[str]:
    from specdiff.cli import build_parser

    parser = build_parser()
    sub = parser._subparsers._group_actions[0].choices["bench"]._subparsers._group_actions[0].choices[argv]
    return [a for a in sub._actions if a.help != "==SUPPRESS=="]


def test_speedup_help_shows_at_most_16_options(capsys):
    with pytest.raises(SystemExit):
        main(["bench", "speedup", "--help"])
    out = capsys.readouterr().out
    assert len(_options("speedup")) <= 16
    assert len(re.findall(r"^  -", out.split("settings (--set")[0], flags=re.M)) <= 16
    assert "1 2 4 8" not in out.split("settings (--set")[0]  # no hand-written defaults: generated from the presets


@pytest.mark.parametrize("flag", sorted(bench_speedup.ALIASES))
def test_each_deprecated_alias_warns_and_maps_to_its_replacement(flag):
    from specdiff.cli import build_parser

    values = {"--temperature": ["0.7"], "--top-p": ["0.9"], "--top-k": ["5"], "--hf-assistant": ["none"],
              "--leniency": ["linear:0.3"], "--block-taus": ["0.9"], "--caches": ["persistent"],
              "--controllers": ["acceptance:margin=2"], "--kind-controllers": ["acceptance:margin=2"]}.get(flag, ["2"])
    extra = ["--temperature", "0.7"] if flag in ("--top-p", "--top-k") else []
    args = build_parser().parse_args(["bench", "speedup", flag, *values, *extra])
    with pytest.warns(FutureWarning, match=re.escape(flag) + " is deprecated; use --(set|sampling) ") as caught:
        settings = bench_speedup._settings(args)
    message = next(str(w.message) for w in caught if str(w.message).startswith(flag + " "))
    key = bench_speedup.ALIASES[flag][2]
    if key.startswith("sampling."):
        assert settings.sampling[key.split(".")[1]] == pytest.approx(float(values[0]))
        assert message.endswith(f"--sampling {key.split('.')[1]}={float(values[0]) if '.' in values[0] else int(values[0])}")
    else:
        replacement = message.split("use ")[1]
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            replaced = bench_speedup._settings(build_parser().parse_args(["bench", "speedup", *replacement.split(" ")]))
        assert replaced.as_dict() | {"user_set": None} == settings.as_dict() | {"user_set": None}


def test_tune_writes_a_file_and_speedup_measures_exactly_it_without_tuning(tmp_path, capsys, monkeypatch):
    from specdiff.bench import speedup, tuner

    out = tmp_path / "tuning.json"
    assert main(["bench", "tune", *TINY, "--out", str(out)]) == 0
    tuning = json.loads(out.read_text())
    assert {"spec_masked", "spec_ar"} <= set(tuning["chosen"]) and tuning["verifier"] == "verifier"
    capsys.readouterr()

    def no_tuning(*args, **kwargs):
        raise AssertionError("bench speedup --tuning must not tune")
    monkeypatch.setattr(tuner, "tune", no_tuning)
    monkeypatch.setattr(speedup.tuner, "tune", no_tuning)
    assert main(["bench", "speedup", *TINY, "--tuning", str(out)]) == 0
    report = json.loads(capsys.readouterr().out)
    for row, chosen in tuning["chosen"].items():
        measured = report["rows"][row]["config"]
        assert {k: v for k, v in measured.items() if k != "name"} == {k: v for k, v in chosen["config"].items()
                                                                        if k != "name"}
    assert report["tuning"]["chosen"] == tuning["chosen"]


class ToyKind(AutoregressiveKind):
    """A toy kind: the testbed's AR drafter under another name. Its bench grid and controllers are the bench's
    (`specdiff/bench/kinds.toml`), set here as a table of that file would set them."""

    name, aliases, zoo_model, distilled_role, rank = "toy", (), "ar-drafter", None, 99


@pytest.fixture
def toy_kind(monkeypatch):
    from specdiff.bench import settings

    monkeypatch.setitem(settings.kind_table(), "toy", {"blocks": [2, 3], "controllers": ["acceptance:margin=2"]})
    spec = registry.register(ToyKind())
    try:
        yield spec
    finally:
        registry.unregister("toy")


def test_a_kind_registered_from_a_test_file_runs_through_bench_speedup(toy_kind, capsys):
    argv = ["--json", "--problems", "1", "--set", "tune_problems=1", "--repeats", "1", "--max-new-tokens", "12",
            "--set", "steps=[1]", "--set", "caches=[\"off\"]", "--set", "batch_sizes=[]", "--set", "controllers=[]",
            "--set", "kind_controllers=[\"acceptance:margin=2\"]", "--drafters", "toy"]
    assert main(["bench", "speedup", *argv]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "spec_toy" in out["rows"] and out["kinds"]["toy"]["method"] == "spec_toy"
    assert {row["config"]["block_size"] for row in out["kinds"]["toy"]["tuning_grid"]} == {2, 3}  # its own grid
    assert out["kinds"]["toy"]["adaptive"]["controller"] == "acceptance:margin=2"
    assert out["kinds"]["toy"]["exact"] and out["kinds"]["toy"]["speedup_vs_ar"] > 0
