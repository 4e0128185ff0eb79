"""Every generator of a committed table or figure runs here with --check (issue 39, item 6): it fails when the
committed file (or the marked block of a doc) differs from what the generator would write. Generators that re-run
experiments are not run: their check renders the table from the committed raw results. tools/README.md says
what each tool is; scripts/ keeps only the CI helper and the device check.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
F, R = "docs/results/frontier", "docs/results/leniency"
CHECKS = {  # what is checked: the command (run from the repository root)
    "spec_bench48.jsonl": ["tools/spec_bench_subset.py", "--check"],
    "default_drafters.json": ["tools/default_drafter.py", "specdiff/bench/presets/demo_real.tuning.json", "--check"],
    "real_models.md Spec-Bench table": ["tools/spec_bench_table.py",
                                        "docs/results/spec_bench/bench_greedy_bf16_seed0.json",
                                        "--check", "docs/real_models.md"],
    "real_models.md Spec-Bench sampled table": ["tools/spec_bench_table.py",
                                                "docs/results/spec_bench/bench_sampled_bf16_seed0.json",
                                                "--check", "docs/real_models.md"],
    "real_models.md test-prompt sampled table": ["tools/spec_bench_table.py",
                                                 "docs/results/real_test/real_test_sampled_bf16_seed0.json",
                                                 "--check", "docs/real_models.md"],
    "real_models.md test-prompt seed-1 table": ["tools/spec_bench_table.py",
                                                "docs/results/real_test/real_test_greedy_bf16_seed1_p20.json",
                                                "--check", "docs/real_models.md"],
    "real_models.md test-prompt float32 table": ["tools/spec_bench_table.py",
                                                 "docs/results/real_test/real_test_greedy_fp32_seed0.json",
                                                 "--check", "docs/real_models.md"],
    "real_models.md test-prompt table": ["tools/spec_bench_table.py",
                                         "docs/results/real_test/real_test_greedy_bf16_seed0.json",
                                         "--check", "docs/real_models.md"],
    "distill.md acceptance on Spec-Bench": ["tools/acceptance_table.py", "spec_bench",
                                            "docs/results/spec_bench/bench_greedy_bf16_seed0.json",
                                            "docs/results/spec_bench/accept_greedy_fp32_seed0.json",
                                            "--check", "docs/distill.md"],
    "distill.md acceptance on the test prompts": ["tools/acceptance_table.py", "real_test",
                                                  "docs/results/real_test/real_test_greedy_bf16_seed0.json",
                                                  "docs/results/real_test/real_test_accept_fp32_seed0.json",
                                                  "--check", "docs/distill.md"],
    "distill.md K tradeoff, retrained": ["tools/distill_k_tables.py",
                                         "docs/results/real_test/real_test_greedy_bf16_seed0.json", "--named",
                                         "--check", "docs/distill.md"],
    "engine.md demo table": ["tools/demo_table.py", "docs/results/demo/demo.json", "--check", "docs/engine.md"],
    "vllm.md tables": ["tools/vllm_tables.py", "docs/results/vllm/tests_record.jsonl", "--check", "docs/vllm.md"],
    "adaptive.md priced table": ["tools/price_adaptive.py", "--table", "docs/results/adaptive/priced.json",
                                 "--check", "docs/adaptive.md"],
    "continuous.md interleaved table": ["tools/frozen_vs_free_interleaved.py", "--table",
                                        "docs/results/continuous/frozen_vs_free_interleaved.json",
                                        "--check", "docs/continuous.md"],
    "distill.md K and leniency tables": ["tools/distill_k_tables.py",
                                         "docs/results/distill/k/bench_sampled_test0-9_seed0.json",
                                         "--check", "docs/distill.md"],
    "block_vs_masked.json, .png": ["tools/compare_frontiers.py", f"{F}/masked_linear.sqlite", f"{F}/block_linear.sqlite",
                                   "--only-block-size", "8", "--plot", f"{F}/block_vs_masked.png",
                                   "--out", f"{F}/block_vs_masked.json", "--check"],
    "drafters_frontier.json, .png": ["tools/compare_frontiers.py", f"{F}/masked_linear.sqlite", f"{F}/block_linear.sqlite",
                                     f"{F}/dflash_linear.sqlite", "--only-block-size", "8",
                                     "--plot", f"{F}/drafters_frontier.png", "--out", f"{F}/drafters_frontier.json",
                                     "--check"],
    **{f"{d}_test.toml, .selection.json": ["tools/leniency_heldout.py", f"{R}/{d}_validation.sqlite",
                                           "--costs", f"{R}/call_costs_{d}.json", "--out", f"{R}/{d}_test.toml", "--check"]
       for d in ("masked", "block")},
}


@pytest.mark.parametrize("what", list(CHECKS))
def test_committed_output_is_what_its_generator_writes(what):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, *CHECKS[what]], cwd=ROOT, capture_output=True, text=True, env=env)
    assert out.returncode == 0, f"{what}: {' '.join(CHECKS[what])} --check failed\n{out.stdout}\n{out.stderr}"
    assert "up to date" in out.stdout


def test_scripts_keeps_only_the_ci_helper_and_the_device_checks():
    allowed = {"vllm_env.sh", "numerics_kernels.sh",  # CI calls these two (.ci/run)
               "continuous_device_check.py", "device_checks.py"}  # docs cite the rest
    assert {p.name for p in (ROOT / "scripts").iterdir()} - {"__pycache__"} <= allowed


def test_every_tool_is_described_in_the_tools_readme():
    readme = (ROOT / "tools" / "README.md").read_text()
    missing = [p.name for p in (ROOT / "tools").glob("*.py") if f"`{p.name}`" not in readme]
    assert not missing, f"tools/README.md does not describe {missing}"
