"""vLLM tests: run in the vLLM environment (`bash scripts/vllm_env.sh VENV; VENV/bin/python -m pytest tests/vllm`).

vLLM runs on its CPU backend, in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0, one worker), with a
small KV cache; its general plugins, specdiff's among them, are loaded as in every vLLM process.
`vllm serve` (test_serve.py) runs as its own processes."""
import os

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def pytest_collection_modifyitems(items):
    """Tests that start an ngram engine run last. vLLM's ngram proposer imports numba (llvmlite), and
    vLLM-CPU 0.32 re-registers its CPU kernel overrides at every engine start by scanning every module's
    namespace with `vars(value).get(...)`, which llvmlite's `_lib_fn_wrapper` objects break: after an
    ngram engine, no further engine can start in the same process (AttributeError in
    vllm/triton_utils/dispatcher.py `_rebind_kernels`)."""
    items.sort(key=lambda item: "ngram" in item.nodeid)
