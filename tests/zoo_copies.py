"""Copies of the zoo folder for tests that must not depend on which drafters are shipped (not a test
module): `with_new_drafters` holds every recipe (the shipped weights, plus one-step trainings of the
drafters not shipped yet: untrained quality, real architectures), `without` lacks the named models."""
from __future__ import annotations

import shutil
from contextlib import contextmanager
from pathlib import Path

import pytest

from specdiff import zoo
from specdiff.zoo import configs


def with_new_drafters(root: Path) -> Path:
    copy = root / "zoo"
    shutil.copytree(zoo.MODELS_DIR, copy)
    for name in configs.TRAINABLE:
        if not (copy / name / "model.safetensors").is_file():
            from specdiff.training.zoo import train

            train(name, run_dir=root / f"run-{name}", out_dir=copy / name, steps=1, threads=1, progress=False)
    return copy


def without(root: Path, names) -> Path:
    copy = root / "zoo"
    shutil.copytree(zoo.MODELS_DIR, copy)
    for name in names:
        shutil.rmtree(copy / name, ignore_errors=True)
    return copy


@contextmanager
def zoo_folder(folder: Path):
    """`zoo.load` and `zoo.model_dir` read `folder` (as SPECDIFF_ZOO_DIR would) inside the block."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(zoo, "MODELS_DIR", folder)
        yield folder
