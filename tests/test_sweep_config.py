"""Bad sweep input (issue 14, item 7): a config with an unknown section, key, model, task or rule, or
a grid value out of range, is refused before anything runs by an error naming its line; a store
written by another configuration or schema version, or of another kind, is refused, not mixed."""
import sqlite3

import pytest
from sweep_helpers import TINY_CONFIG

from specdiff.cli import main
from specdiff.runs.sweep_config import load_config
from specdiff.eval.store import ResultStore, StoreError
from specdiff.eval.sweepconfig import ConfigError
from specdiff.eval.sweepstore import SweepStore

GOOD = TINY_CONFIG.format(problems=2, steps=[1, 4])  # lines: 1 [models] 2 drafter 3 verifier 4 '' 5 [task] 6 name
                                                    # 7 problems 8 max_new_tokens 9 '' 10 [grid] 11 steps 12 rule
                                                    # 13 lam 14 block_size


def _edit(old: str, new: str) -> str:
    assert old in GOOD
    return GOOD.replace(old, new)


BAD = {  # name -> (config text, the line named, a fragment of the message)
    "unknown key": (_edit("block_size = [6]", "block_size = [6]\nlambda = [0.1]"), 15, "no key 'lambda'"),
    "unknown section": (GOOD + "\n[sampling]\ntemperature = 0.7\n", 16, "unknown section [sampling]"),
    "unknown model": (_edit('"masked-drafter"', '"dream-7b"'), 2, "unknown model 'dream-7b'"),
    "unknown task": (_edit('"arith"', '"gsm9k"'), 6, "unknown task 'gsm9k'"),
    "unknown rule": (_edit('rule = ["linear"]', 'rule = ["linear", "greedy"]'), 12, "unknown value 'greedy'"),
    "lam out of range": (_edit("lam = [0.0, 0.5]", "lam = [0.0, 1.5]"), 13, "1.5 is outside [0, 1]"),
    "steps out of range": (_edit("steps = [1, 4]", "steps = [0, 4]"), 11, "0 is outside [1, 4096]"),
    "threshold out of range": (_edit("steps = [1, 4]", "threshold = [0.0]"), 11, "0.0 is outside (0, 1]"),
    "negative delta": (_edit('rule = ["linear"]', 'rule = ["linear", "cactus"]\ndelta = [-1]'), 13, "outside [0, inf)"),
    "wrong type": (_edit("problems = 2", 'problems = "two"'), 7, "expected an integer"),
    "problems out of range": (_edit("problems = 2", "problems = 0"), 7, "0 is outside [1, inf)"),
    "not a list": (_edit("block_size = [6]", "block_size = 6"), 14, "expected a non-empty list"),
    "repeated value": (_edit("lam = [0.0, 0.5]", "lam = [0.5, 0.5]"), 13, "listed twice"),
    "leniency without its rule": (_edit("lam = [0.0, 0.5]", "lam = [0.0, 0.5]\neps = [0.1]"), 14, "rule 'tv'"),
    "rule without its leniency": (_edit('rule = ["linear"]', 'rule = ["linear", "tv"]'), 12, "needs its leniency"),
    "task option": (_edit("max_new_tokens = 40", "max_new_tokens = 40\n[task.options]\nsplitt = 'test'"), 10,
                    "no option 'splitt'"),
    "toml syntax": (_edit("lam = [0.0, 0.5]", "lam = [0.0, 0.5"), 14, "not valid TOML"),
    "missing key": (_edit('verifier = "verifier"\n', ""), 1, "[models] verifier is required"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_config_names_its_line(case, tmp_path):
    text, line, fragment = BAD[case]
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as error:
        load_config(path)
    message = str(error.value)
    assert message.startswith(f"{path}:{line}: ") and fragment in message, message
    assert "Nothing was run" in message


def test_the_command_refuses_a_bad_config_before_anything_runs(tmp_path, capsys, monkeypatch):
    import specdiff.eval.runner as runner

    monkeypatch.setattr(runner, "execute", lambda *a, **k: pytest.fail("a unit ran"))
    path, store = tmp_path / "bad.toml", tmp_path / "bad.sqlite"
    path.write_text(BAD["lam out of range"][0])
    assert main(["sweep", str(path), "--store", str(store)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:13:" in err and "lam = [0.0, 1.5]" in err  # the line itself is shown
    assert not store.exists()


def test_an_autoregressive_drafter_takes_no_effort_grid(tmp_path):
    path = tmp_path / "ar.toml"
    path.write_text(_edit('"masked-drafter"', '"ar-drafter"'))
    with pytest.raises(ConfigError, match=r"ar.toml:11: .*autoregressive"):
        load_config(path)


def _settings(tmp_path, text=GOOD):
    path = tmp_path / "s.toml"
    path.write_text(text)
    return load_config(path)[0]


def test_a_store_of_another_configuration_is_refused(tmp_path):
    store = tmp_path / "s.sqlite"
    SweepStore(store, _settings(tmp_path)).close()
    SweepStore(store, _settings(tmp_path, "# a comment changes nothing\n" + GOOD)).close()
    other = _settings(tmp_path, _edit("lam = [0.0, 0.5]", "lam = [0.0, 0.2]"))
    with pytest.raises(StoreError, match=r"another sweep configuration \(differs in: grid.lam\).*--store"):
        SweepStore(store, other)


def test_a_store_of_another_schema_version_or_kind_is_refused(tmp_path):
    store = tmp_path / "s.sqlite"
    SweepStore(store, _settings(tmp_path)).close()
    with sqlite3.connect(store) as connection:
        connection.execute("UPDATE sweep_meta SET value = '3' WHERE key = 'schema_version'")
    with pytest.raises(StoreError, match="sweep schema version 3; this specdiff reads versions 1, 2"):
        SweepStore(store, _settings(tmp_path))
    with pytest.raises(StoreError, match="another schema"):  # the continuous bench's store refuses it too
        ResultStore(store)
    bench = tmp_path / "bench.sqlite"
    ResultStore(bench).close()
    with pytest.raises(StoreError, match="continuous bench"):
        SweepStore(bench, _settings(tmp_path))
    junk = tmp_path / "junk.sqlite"
    junk.write_text("not a database\n" * 20)
    with pytest.raises(StoreError, match="not a SQLite file"):
        SweepStore(junk, _settings(tmp_path))
    with pytest.raises(StoreError, match="does not exist"):
        SweepStore(tmp_path / "missing.sqlite")


def test_the_documented_example_is_valid_and_every_key_is_documented():
    from pathlib import Path

    from specdiff.runs.sweep_config import SCHEMA

    root = Path(__file__).resolve().parent.parent
    settings, configs, _ = load_config(root / "docs" / "results" / "frontier" / "sweep_example.toml")
    assert len(configs) == 12 and settings["task"]["options"] == {"split": "test"}
    doc = (root / "docs" / "frontier.md").read_text()
    for section, fields in SCHEMA.items():
        assert f"`[{section}]`" in doc
        for key in fields or {}:
            assert f"| `{key}` |" in doc, key


SUBGRIDS = """[models]
drafter = "masked-drafter"
verifier = "verifier"

[task]
name = "arith"
problems = 2

[grid]
steps = [2, 4]
block_size = [16]

[grid.lossless]
rule = ["lossless"]
support = ["truncated", "untruncated"]

[grid.gated]
rule = ["linear"]
lam = [0.3]
gate_top = [0.5, 0.7]

[grid.again]
rule = ["lossless"]
steps = [4]
"""


def test_subgrids_run_their_union_each_configuration_once(tmp_path):
    path = tmp_path / "sub.toml"
    path.write_text(SUBGRIDS)
    settings, configs, _ = load_config(path)
    names = [c["name"] for c in configs]
    # lossless: 2 K x 2 supports; gated linear: 2 K x 2 gates; [grid.again]'s K=4 lossless is already there
    assert len(names) == len(set(names)) == 8, names
    assert sum("untruncated" in n for n in names) == 2 and sum("gated top<=0.5" in n for n in names) == 2
    assert all("B=16" in n for n in names)  # [grid]'s own keys are the sub-grids' defaults
    assert sorted(settings["grid"]["grids"]) == ["again", "gated", "lossless"]
    assert settings["grid"]["steps"] == [2, 4] and "rule" not in settings["grid"]


@pytest.mark.parametrize("old, new", [
    ('gate_top = [0.5, 0.7]', 'gate_top = [0.5, 1.7]'),
    ('rule = ["linear"]\nlam = [0.3]', 'rule = ["linear"]'),
])
def test_a_bad_subgrid_names_its_line(old, new, tmp_path):
    text = SUBGRIDS.replace(old, new)
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as error:
        load_config(path)
    message = str(error.value)
    wanted = text.splitlines().index("[grid.gated]") + 1
    assert f"{path}:" in message and "[grid.gated]" in message, message
    assert int(message.split(":")[1]) >= wanted, message
