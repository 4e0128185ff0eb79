"""The README opens with the two set-up commands, and CI runs the second one verbatim."""
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _setup_commands():
    text = (ROOT / "README.md").read_text()
    block = text.split("```bash", 1)[1].split("```", 1)[0]
    return [line for line in block.strip().splitlines() if line.strip()]


def test_readme_opens_with_two_commands():
    commands = _setup_commands()
    assert len(commands) == 2
    assert commands[0].endswith("specdiff demo")
    assert "pip install torch==2.13.0" in commands[0] and "pip install torch==2.13.0" in commands[1]
    assert "pytest" in commands[1]


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    assert _setup_commands()[1] in ci.splitlines()
    assert "set -euo pipefail" in ci
