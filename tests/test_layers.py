"""The layers of docs/architecture.md (Layout), kept by import-linter's contracts in pyproject.toml (issue 19).

`lint-imports` must pass on the tree; the same contracts must fail on a copy of the tree with one
climbing import added (the linter is live, not a contract that cannot break); and no module imports
from a layer above it (tools/import_climbs.py).
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT = shutil.which("lint-imports", path=os.path.dirname(sys.executable)) or shutil.which("lint-imports")

pytestmark = pytest.mark.skipif(LINT is None, reason="import-linter is not installed (the test extra has it)")


def _lint(root: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root)}  # the tree under test, ahead of the installed package
    return subprocess.run([LINT, "--config", str(root / "pyproject.toml"), "--no-cache"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300)


def test_the_tree_keeps_every_contract():
    result = _lint(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout and "6 kept" in result.stdout


@pytest.mark.parametrize("module, line, contract", [
    ("engine/verifier.py", "from specdiff import models  # noqa", "Layers"),  # the engine asks the loader
    ("integrations/lm_eval.py", "from specdiff.commands import demo  # noqa", "Layers"),  # a command's module
    ("continuous/schedules.py", "import specdiff.verify  # noqa", "continuous half imports nothing"),
    ("eval/frontier.py", "import specdiff.engine.generate  # noqa", "eval/ is generic"),
    ("commands/report.py", "from specdiff.commands import frontier  # noqa", "no command module imports another"),
    ("flags.py", "import specdiff.runs  # noqa", "utilities"),
])
def test_a_climbing_import_breaks_a_contract(tmp_path, module, line, contract):
    copy = tmp_path / "tree"
    shutil.copytree(ROOT / "specdiff", copy / "specdiff", ignore=shutil.ignore_patterns("models", "weights",
                                                                                         "__pycache__", "*.safetensors"))
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    path = copy / "specdiff" / module
    path.write_text(path.read_text() + f"\n\ndef _climb():\n    {line}\n")  # inside a function: still counted
    result = _lint(copy)
    assert result.returncode != 0, result.stdout
    broken = [block for block in result.stdout.split("\n\n") if "BROKEN" in block]
    assert any(contract in block for block in broken), result.stdout


def test_no_module_imports_from_a_layer_above_it():
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "import_climbs.py"), "--root", str(ROOT)],
                         capture_output=True, text=True, check=True, timeout=300)
    result = json.loads(out.stdout)
    assert result["imports"] > 150  # the graph was really read
    assert (result["climbs"], result["across_halves"], result["eval_into_features"]) == (0, 0, 0)


def test_every_subcommand_is_registered_from_commands():
    from specdiff.cli import SUBCOMMAND_MODULES

    assert all(name.startswith("specdiff.commands.") for name in SUBCOMMAND_MODULES)
    assert not (ROOT / "specdiff" / "zoo" / "cli.py").exists() and not (ROOT / "specdiff" / "continuous" / "cli.py").exists()
