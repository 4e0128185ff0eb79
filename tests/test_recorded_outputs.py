"""Every shipped model loads and gives the seeded outputs recorded before [shape] moved the code (issue 39,
item 7): tools/record_outputs.py generates them at float32 through public entry points only
(`specdiff.models.load`, `sd.SpeculativeGenerator`) and tests/data/recorded_outputs.json holds them. A change
that alters weights or defaults on purpose re-records them (`python tools/record_outputs.py`) and says so.

The real verifier's group needs `specdiff models fetch smollm2-135m-instruct`: it skips without it, and fails
under CI (CI=true), where .ci/run fetches it first.
"""
from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.numerics  # kernel-dependent: run again under other kernels (scripts/numerics_kernels.sh)

TOOL = Path(__file__).resolve().parents[1] / "tools" / "record_outputs.py"


def _tool():
    spec = importlib.util.spec_from_file_location("record_outputs", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


record = _tool()


@pytest.fixture(scope="module")
def listing():
    return record.shipped_models()


def test_every_listed_model_is_recorded(listing):
    assert not record.unlisted(listing), "add them to VERIFIERS in tools/record_outputs.py and re-record"
    recorded = json.loads(record.RECORD.read_text())
    for verifier, (_, drafters, *_rest) in record.VERIFIERS.items():
        assert {f"{d}/{s}" for d in [record.ALONE] + drafters for s in record.SETTINGS} == set(recorded[verifier])


@pytest.mark.parametrize("verifier", list(record.VERIFIERS))
def test_seeded_outputs_equal_the_recorded_ones(listing, verifier):
    if verifier not in record.available(listing):
        reason = f"{verifier} is not fetched: run `specdiff models fetch {verifier}`"
        if os.environ.get("CI"):
            pytest.fail(f"under CI every shipped model must be present: {reason}")
        pytest.skip(reason)
    recorded = json.loads(record.RECORD.read_text())
    now = {verifier: record.record_verifier(verifier)}
    lines = record.differences(recorded, now)
    assert not lines, ("seeded outputs differ from tests/data/recorded_outputs.json (re-record with "
                       "`python tools/record_outputs.py` only if the change is meant to alter them):\n" + "\n".join(lines))
