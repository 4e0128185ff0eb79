"""vLLM tests: run in the vLLM environment (`bash scripts/vllm_env.sh VENV; VENV/bin/python -m pytest tests/vllm`).

vLLM runs on its CPU backend, in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0, one worker), with a
small KV cache; its general plugins, specdiff's among them, are loaded as in every vLLM process.
`vllm serve` (test_serve.py) runs as its own processes."""
import os

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
