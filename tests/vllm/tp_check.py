"""Tensor parallelism with the plugin on vLLM's CPU backend (not a test module; run by
test_tensor_parallel.py, or by hand): `VLLM_CPU_OMP_THREADS_BIND="0|1" python tp_check.py TARGET DRAFT`
starts a tensor_parallel_size=2 engine (multiprocessing executor, one worker process per rank, one
core each) with draft_model drafting and the plugin, and prints as JSON its greedy tokens and the
spec-decode counters of Linear(1) requests."""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
sys.path.insert(0, str(Path(__file__).parent))
import engines  # noqa: E402

PROMPTS = [[1, 2, 3, 0], [3, 1, 0, 2]]


def main(target: str, draft: str) -> None:
    from vllm import SamplingParams

    start = time.perf_counter()
    llm = engines.llm(target, engines.draft_model(draft), {"specdiff": {"rule": "lossless"}}, tensor_parallel_size=2,
                      distributed_executor_backend="mp")
    started = time.perf_counter() - start
    greedy, _ = engines.generate(llm, PROMPTS, SamplingParams(temperature=0, max_tokens=12, ignore_eos=True))
    _, linear = engines.generate(llm, PROMPTS * 16, SamplingParams(
        temperature=1.0, max_tokens=8, ignore_eos=True, extra_args={"specdiff": {"rule": "linear", "leniency": 1.0}}))
    print("RESULT " + json.dumps({"engine_start_s": round(started, 1), "greedy": greedy, "linear_one": linear}),
          flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
