"""The block, uniform and DFlash zoo recipes (issue 12, item 5, code half): `specdiff zoo train NAME
--steps 3` runs each objective end to end into a temporary folder, and the result loads through
`specdiff.models.load` as the right drafter and drafts one round against the shipped verifier.
The full trainings (`specdiff zoo train NAME`) are not run here."""
from __future__ import annotations

import json

import pytest
import torch
from zoo_copies import without, zoo_folder

import specdiff as sd
from specdiff import models, zoo
from specdiff.cli import main
from specdiff.zoo import configs
from specdiff.zoo_tools import evaluate

CLASSES = {"block-drafter": sd.BlockDiffusionDrafter, "uniform-drafter": sd.UniformDiffusionDrafter,
           "dflash-drafter": sd.DFlashDrafter}


def test_recipes_are_data_and_shipping_is_one_line():
    """Shipping a drafter is removing its name from configs.PLANNED (README of the shipping steps: docs/drafters.md)."""
    assert set(configs.PLANNED) <= set(CLASSES)
    assert configs.MODEL_NAMES == tuple(name for name in configs.TRAINABLE if name not in configs.PLANNED)
    assert {"verifier", "ar-drafter", "masked-drafter"} <= set(configs.MODEL_NAMES)
    assert set(configs.TRAINABLE) == {"verifier", "ar-drafter", "masked-drafter"} | set(CLASSES)
    for name in CLASSES:
        assert {"objective", "steps", "seed"} <= set(configs.TRAINING[name]) and name in configs.SAMPLING
    assert models.DRAFTER_KINDS["block"] == "block-drafter"


@pytest.mark.parametrize("name", list(CLASSES))
def test_three_training_steps_then_one_round(tmp_path, name):
    out = tmp_path / "model"
    code = main(["zoo", "train", name, "--steps", "3", "--out", str(out), "--run-dir", str(tmp_path / "run"),
                 "--threads", "1"])
    assert code == 0 and (out / "model.safetensors").is_file()
    verifier = models.load("verifier", role="verifier")
    drafter = models.load(str(out), role="drafter", verifier=verifier)
    assert type(drafter) is CLASSES[name]
    gen = sd.SpeculativeGenerator(drafter, verifier, block_size=configs.BLOCK_TOKENS, tokenizer=zoo.tokenizer())
    result = gen.generate(["Tom has 3 apples and buys 4 more. How many apples does he have?"], max_new_tokens=8,
                          generator=torch.Generator().manual_seed(0))
    assert len(result.token_ids[0]) >= 1 and result.stats[0].rounds >= 1


@pytest.mark.parametrize("name", list(CLASSES))
def test_planned_names_say_how_to_train_them(tmp_path, capsys, name):
    """Without its weights (as before it ships, or in a zoo folder that lacks it) a drafter's kind, its zoo
    name and `zoo eval --models NAME` name the command that trains it."""
    with zoo_folder(without(tmp_path, [name])):
        for reference in (name, name.removesuffix("-drafter")):
            with pytest.raises(FileNotFoundError, match=f"specdiff zoo train {name}"):
                models.load(reference, role="drafter")
        assert main(["zoo", "eval", "--models", name, "-n", "1"]) == 2
        assert name not in evaluate.available()
    assert f"specdiff zoo train {name}" in capsys.readouterr().err


def test_zoo_eval_rows_for_the_new_drafters(new_drafters, capsys):
    """The first paper's Table 1 in miniature: standalone accuracy per effort (block, uniform), lossless
    tokens per round with the verifier (all three; DFlash has no standalone score)."""
    assert set(CLASSES) <= set(evaluate.available())
    assert main(["zoo", "eval", "--json", "-n", "3", "--threads", "1", "--models", *CLASSES]) == 0
    rows = json.loads(capsys.readouterr().out)["models"]
    assert set(rows) == set(CLASSES)
    assert set(rows["block-drafter"]["standalone"]) == {"K=8", "tau=0.9"}
    assert set(rows["uniform-drafter"]["standalone"]) == {"K=8"}
    assert "standalone" not in rows["dflash-drafter"] and "accuracy" not in rows["dflash-drafter"]
    for name, row in rows.items():
        lossless = row["lossless"]
        assert lossless["exact"] and lossless["problems"] == 3 and lossless["tokens_per_round"] >= 1, name
        assert row["params"] > 0 and 0 <= lossless["accuracy"] <= 1
        cost = row["step_cost"]  # one drafting step (K = 1) against the verifier's round, same run
        assert cost["problems"] == 3 and cost["rounds"] >= 3 and cost["draft_step_ms"] > 0, name
        ratio = cost["draft_step_ms"] / cost["verifier_round_ms"]
        assert abs(cost["draft_step_over_verifier_round"] - ratio) < 2e-3, name
    assert rows["block-drafter"]["lossless"]["proposal"] == "point_mass"  # K = 4: its q is not its marginal
    assert main(["zoo", "eval", "-n", "2", "--threads", "1", "--models", "dflash-drafter"]) == 0
    assert "tokens/round (one step, B=8)" in capsys.readouterr().out


def test_standalone_drafting_keeps_every_token_until_eos(new_drafters):
    from specdiff.drafters.standalone import standalone_ids

    tok = zoo.tokenizer()
    rows = [tok("Tom has 3 apples.").input_ids, tok("Mia has 4 * 6 = 24 shells and 2 more.").input_ids]
    drafter = models.load("block", role="drafter", steps=2)
    answers = standalone_ids(drafter, rows, 4, 10, tok.eos_token_id, tok.pad_token_id, torch.Generator().manual_seed(0))
    assert len(answers) == 2 and all(len(a) <= 10 and tok.eos_token_id not in a for a in answers)
    with pytest.raises(ValueError, match="no standalone mode"):
        standalone_ids(models.load("dflash", role="drafter"), rows, 4, 10, tok.eos_token_id)
