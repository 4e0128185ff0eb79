"""The block, uniform and DFlash zoo recipes (issue 12, item 5, code half): `specdiff zoo train NAME
--steps 3` runs each objective end to end into a temporary folder, and the result loads through
`specdiff.models.load` as the right drafter and drafts one round against the shipped verifier.
The full trainings (`specdiff zoo train NAME`) are not run here."""
from __future__ import annotations

import pytest
import torch

import specdiff as sd
from specdiff import models, zoo
from specdiff.cli import main
from specdiff.zoo import configs

CLASSES = {"block-drafter": sd.BlockDiffusionDrafter, "uniform-drafter": sd.UniformDiffusionDrafter,
           "dflash-drafter": sd.DFlashDrafter}


def test_recipes_are_data_and_the_shipped_ones_are_unchanged():
    assert configs.MODEL_NAMES[:3] == ("verifier", "ar-drafter", "masked-drafter")
    assert set(configs.PLANNED) <= set(CLASSES) and not set(configs.PLANNED) & set(configs.MODEL_NAMES)
    assert set(configs.TRAINABLE) == set(configs.MODEL_NAMES) | set(configs.PLANNED) == set(configs.MODEL_NAMES) | set(CLASSES)
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


def test_planned_names_say_how_to_train_them():
    with pytest.raises(FileNotFoundError, match="specdiff zoo train uniform-drafter"):
        models.load("uniform", role="drafter")
