"""Every command line in README.md's code blocks keeps working with the same meaning (issue 39, item 7): each
`specdiff ...` line other than the two set-up lines is run through `python -m specdiff`, at small sizes where a flag
allows it. A README line is a synopsis (placeholders in capitals, options in brackets, a description after two
spaces); COMMANDS below gives the concrete command(s) run for each, and the substitutions made. A README line
missing from COMMANDS fails `test_every_readme_command_is_covered`: add it with its concrete form.

Substitutions: problems, prompts, tokens, samples and steps cut to the smallest that still runs the same code
path (-n/--problems 2, --max-new-tokens 8-16, --samples/--num-samples 4, --steps 10, --repeats 1); placeholders:
PROMPT an arith problem, MESSAGE a short question, NAME smollm2-135m-instruct, V the verifier, S a small store
written by the sweep line, CONFIG.toml a two-configuration sweep of 2 problems, F.jsonl a one-prompt file,
DIR and PNG temporary paths, S the committed dflash_linear store (frontier, report) or the sweep line's store
(calibrate). Commands that need the fetched real verifier skip without it (fail under CI). Each line runs its
fullest form (every option the synopsis shows, at small sizes). Lines whose small form still costs tens of seconds
are marked SLOW and run with SPECDIFF_README_SLOW=1; the two that cannot be made small are marked NOT_RUN with the
reason and the test that covers them. None is dropped silently.
"""
from __future__ import annotations

import lzma
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REAL = "smollm2-135m-instruct"
PROBLEM = ("There are 12 rocks in each of the 7 bags that Omar has. He uses 31 rocks. He receives 3 more rocks. "
           "How many rocks does Omar end up with?")
SWEEP = """[models]
drafter = "masked-drafter"
verifier = "verifier"
[task]
name = "arith"
problems = 2
max_new_tokens = 16
[task.options]
split = "test"
[run]
seed = 0
threads = 1
[grid]
steps = [1, 2]
rule = ["linear"]
lam = [0.0]
method = ["token"]
proposal = ["marginal"]
block_size = [8]
"""
NOT_RUN = "not run"  # too slow for any test run even at small sizes: the reason follows
SLOW = "slow"  # run only with SPECDIFF_README_SLOW=1 (about 4 minutes of CPU on 2 cores): the commands follow

# README synopsis (the part before the description) -> the commands run, in order; {tmp} is a temporary folder
# shared by all entries. {tmp}/d.sqlite is the committed dflash_linear store (decompressed); the slow sweep line
# writes {tmp}/s.sqlite, which the slow calibrate line reads. An entry ("real", ...) needs the fetched real verifier.
# The default set costs about 40 s of CPU (one thread).
COMMANDS: dict[str, tuple] = {
    "specdiff demo [--json] [--plot PNG]": (
        SLOW, "demo --json --plot {tmp}/demo.png --problems 2 --max-new-tokens 16"),
    "specdiff demo --rules": ("demo --rules --samples 1000 --vocab 16",),
    "specdiff demo --real [--json] [--dtype D] [--plot PNG]": (  # no size flag: tests/real/test_demo_real.py runs it small
        SLOW, "real", "demo --real --json --dtype float32 --plot {tmp}/real.png"),
    "specdiff generate PROMPT... [--drafter masked|uniform|block|dflash|ar|lookup|datastore|hybrid|PATH --verifier V "
    "-K 4 -B 16 --rule linear --leniency 0.1 --tree-budget N --dtype bfloat16 ...] [--json]": (
        f"generate {shlex.quote(PROBLEM)} --drafter masked --verifier verifier -K 4 -B 16 --rule linear --leniency 0.1 "
        "--max-new-tokens 8 --json",
        f"generate {shlex.quote(PROBLEM)} --drafter masked --verifier verifier -B 4 --tree-budget 8 --dtype bfloat16 "
        "--max-new-tokens 8 --json",),
    f"specdiff generate --verifier {REAL} --chat MESSAGE [--chat ...] [--stream]": (
        SLOW, "real", f"generate --verifier {REAL} --chat 'What is the capital of France?' --max-new-tokens 8 --stream"),
    "specdiff models fetch NAME | list": ("real", f"models fetch {REAL}", "models list"),
    "specdiff distill data --verifier V --shards N": (
        NOT_RUN, "the verifier writes and answers conversations: minutes on 2 cores even for one shard "
                 "(tests/zoo/test_distill_data.py covers it on tiny models)"),
    "specdiff distill --verifier V --kind dflash|ar|masked --out DIR [--json]": (
        NOT_RUN, "needs `distill data` shards first, then trains (tests/zoo/test_distill_train.py covers it)"),
    "specdiff eval TASK [-n 50 ...] [--json]": (SLOW, "eval arith -n 2 --max-new-tokens 16 --json"),
    "specdiff eval --prompts-file F.jsonl": (SLOW, "eval --prompts-file {tmp}/prompts.jsonl --max-new-tokens 8"),
    "specdiff sweep CONFIG.toml --store S": (SLOW, "sweep {tmp}/sweep.toml --store {tmp}/s.sqlite"),
    "specdiff frontier S [--json]": ("frontier {tmp}/d.sqlite --json --plot {tmp}/f.png",),
    "specdiff report S": ("report {tmp}/d.sqlite --out {tmp}/r.html",),
    "specdiff calibrate [CONFIG.toml] --store S": (SLOW, "calibrate --store {tmp}/s.sqlite --costs sweep --no-plot --json"),
    "specdiff bench speedup --json [--drafters block,dflash]": (
        NOT_RUN, "tunes and times every drafter against plain, HF and HF-assisted decoding: minutes even at 2 problems "
                 "(`specdiff bench speedup --json --problems 2 --set tune_problems=2 --repeats 1` by hand)"),
    "specdiff bench verify --json": ("bench verify --json --repeats 1 --vocab 64 --batch 1",),
    "specdiff zoo ...": ("zoo list",),
    "specdiff continuous ...": ("continuous sample --steps 10 --num-samples 4 --out {tmp}/grid.png",),
}
SETUP = ("pip install",)  # the README's two set-up lines (install, then demo or the tests) are not run here


def readme_commands() -> list[str]:
    """The synopsis of every `specdiff ...` line in README.md's code blocks, set-up lines excepted."""
    text = (ROOT / "README.md").read_text()
    out = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S):
        for line in block.splitlines():
            if not line.startswith("specdiff ") or any(s in line for s in SETUP):
                continue
            out.append(re.split(r"\s{2,}", line.strip())[0])
    return out


def test_every_readme_command_is_covered():
    found = readme_commands()
    assert found, "no specdiff command lines found in README.md's code blocks"
    missing = [c for c in found if c not in COMMANDS]
    assert not missing, f"README command lines without a concrete form in COMMANDS: {missing}"
    stale = [c for c in COMMANDS if c not in found]
    assert not stale, f"COMMANDS entries no longer in README.md: {stale}"


@pytest.fixture(scope="module")
def tmp(tmp_path_factory):
    folder = tmp_path_factory.mktemp("readme")
    (folder / "sweep.toml").write_text(SWEEP)
    (folder / "prompts.jsonl").write_text('{"prompt": "What is 2 + 3?"}\n')
    packed = ROOT / "docs" / "results" / "frontier" / "dflash_linear.sqlite.xz"
    (folder / "d.sqlite").write_bytes(lzma.decompress(packed.read_bytes()))
    return folder


def _params():
    for synopsis, entry in COMMANDS.items():
        marks = []
        if entry[0] == NOT_RUN:
            marks.append(pytest.mark.skip(reason=f"not run: {entry[1]}"))
        elif entry[0] == SLOW and not os.environ.get("SPECDIFF_README_SLOW"):
            marks.append(pytest.mark.skip(reason=f"slow (SPECDIFF_README_SLOW=1 runs it): {entry[1:]}"))
        yield pytest.param(synopsis, marks=marks, id=synopsis.split("[")[0].strip()[len("specdiff "):] or synopsis)


@pytest.mark.parametrize("synopsis", list(_params()))
def test_readme_command_runs(synopsis, tmp):
    entry = COMMANDS[synopsis]
    entry = entry[1:] if entry[0] == SLOW else entry
    if entry[0] == "real":
        from specdiff import checkpoints

        if checkpoints.fetched_dir(REAL) is None:
            reason = f"{REAL} is not fetched: run `specdiff models fetch {REAL}`"
            if os.environ.get("CI"):
                pytest.fail(f"under CI the real verifier must be present: {reason}")
            pytest.skip(reason)
        entry = entry[1:]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    for command in entry:
        argv = [sys.executable, "-m", "specdiff", *shlex.split(command.format(tmp=tmp))]
        out = subprocess.run(argv, cwd=tmp, capture_output=True, text=True, env=env, timeout=300)
        assert out.returncode == 0, f"`specdiff {command}` failed ({out.returncode}):\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
