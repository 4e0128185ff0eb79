"""Issue 39, item 1: a new drafter kind is one class registered once. A toy kind defined in this file alone, a
drafter that repeats the last committed token B times (a point mass: exact), runs through `specdiff generate`
by its name, with its own option, and greedy output equals plain decoding's token for token."""
from __future__ import annotations

import json

import pytest
import torch

from specdiff.cli import main
from specdiff.drafters import registry
from specdiff.drafters.base import Draft, Drafter


class RepeatDrafter(Drafter):
    """Drafts the last committed token `times` times (at most B): deterministic, so verified as a point mass."""

    exact_marginal = point_mass = True

    def __init__(self, times: int = 4):
        self.times = int(times)

    def propose(self, ids, key_mask, block_size, generator=None):
        tokens = ids[:, -1:].expand(-1, block_size).clone()  # [b, B]
        lengths = torch.full((ids.shape[0],), min(self.times, block_size), dtype=torch.long)
        return Draft(tokens=tokens, probs=None, lengths=lengths)


class RepeatKind(registry.KindSpec):
    name, needs_model, ignores_effort, rank = "toy-repeat", False, True, 99
    describes = "a test's toy kind: repeat the last token"
    option_keys = ("times",)

    def build(self, model=None, config=None, defaults=None, tokenizer=None, target=None, **options):
        return RepeatDrafter(**options)

    def run_options(self, run):
        return {key: run.extra[key] for key in self.option_keys if key in run.extra}


@pytest.fixture
def toy_kind():
    spec = registry.register(RepeatKind())
    yield spec
    registry.unregister(spec.name)


def test_a_kind_registered_from_a_test_file_runs_through_generate(toy_kind, capsys):
    from specdiff import models

    assert models.resolve("toy-repeat") == ("toy-repeat", "toy-repeat")
    assert isinstance(models.load("toy-repeat", role="drafter", times=2), RepeatDrafter)
    prompt = "Tom has 4 bags of coins with 3 coins in each. How many coins does Tom have now?"
    outputs = {}
    for drafter in ("toy-repeat", "masked"):  # greedy and lossless: both are the verifier's greedy output
        assert main(["generate", prompt, "--json", "--max-new-tokens", "24", "--temperature", "0",
                     "--drafter", drafter]) == 0, drafter
        outputs[drafter] = json.loads(capsys.readouterr().out)
    assert outputs["toy-repeat"]["exact"] and outputs["toy-repeat"]["config"]["drafter"] == "toy-repeat"
    ids = {name: [g["token_ids"] for g in out["generations"]] for name, out in outputs.items()}
    assert ids["toy-repeat"] == ids["masked"]
    assert toy_kind.name in registry.names()


def test_an_unregistered_kind_is_unknown_again(toy_kind):
    registry.unregister(toy_kind.name)
    with pytest.raises(ValueError, match="unknown drafter kind 'toy-repeat'"):
        registry.get("toy-repeat")
    registry.register(toy_kind)


SWEEP = """\
[models]
drafter = "toy-repeat"
verifier = "verifier"

[task]
name = "arith"
problems = 2
max_new_tokens = 24

[grid]
block_size = [3, 5]
"""


def test_a_kind_registered_from_a_test_file_runs_through_an_in_process_sweep(toy_kind, tmp_path, capsys):
    """`specdiff sweep` with one worker runs its units in this process, where the toy kind is registered (a
    worker process would not know it): one row per (configuration, problem), each greedy text the verifier's."""
    import sqlite3

    config, store = tmp_path / "toy.toml", tmp_path / "toy.sqlite"
    config.write_text(SWEEP)
    assert main(["sweep", str(config), "--store", str(store), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["rows"]["in_store"] == 4 and summary["workers"] == 1
    connection = sqlite3.connect(store)
    rows = connection.execute("SELECT config_id, text, new_tokens, rounds, accepted, exact FROM results").fetchall()
    params = dict(connection.execute("SELECT config_id, params FROM configurations").fetchall())
    connection.close()
    assert len(rows) == 4 and {json.loads(params[r[0]])["drafter"] for r in rows} == {"toy-repeat"}
    for config_id, text, new_tokens, rounds, accepted, exact in rows:
        block = json.loads(params[config_id])["block_size"]
        accepted = json.loads(accepted)
        assert text and new_tokens > 0 and exact == 1 and len(accepted) == rounds
        assert max(accepted) <= min(block, 4)  # the toy drafter proposes min(times, B) tokens a round
