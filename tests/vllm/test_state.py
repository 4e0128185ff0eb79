"""The plugin's state (`specdiff.integrations.vllm.state`) and the bench's dtype default.

- The per-engine caches (whether an engine asks for specdiff, its engine rule) are keyed by the config's
  identity behind a weak reference: a VllmConfig that is dropped is collected, and its entry goes with it
  (the caches used to hold every config they had seen, keyed by id()).
- `bench.default_dtype`: bfloat16 where the CPU flags name avx512_bf16 or amx_bf16 (or CUDA is available),
  else float32.
"""
from __future__ import annotations

import gc
import weakref
from types import SimpleNamespace

import pytest

from specdiff.integrations.vllm import bench, state


def test_a_cached_config_is_not_kept_alive():
    """The caches hold their VllmConfig by a weak reference. vLLM itself keeps the first VllmConfig of a process
    alive (its constructor's frame stays referenced from a lazy import it triggers, vllm/config/parallel.py),
    so one is built first and the second one is the one watched."""
    vllm_config = pytest.importorskip("vllm.config")
    vllm_config.VllmConfig()  # the process's first: kept alive by vLLM, not by specdiff
    config = vllm_config.VllmConfig(additional_config={"specdiff": {"rule": "linear", "leniency": 0.2}})
    gc.collect()  # earlier tests' engines: their entries go now, not in the middle of the count below
    engines, rules = len(state._requested), len(state._engine_rules)
    assert state.is_specdiff(config) and not state.engine_default(config).lossless
    rows, method = state.rules_of(config, [None, {"specdiff": {"rule": "lossless"}}])
    assert rows[0] is not None and rows[1] is None and method == "token"
    assert (len(state._requested), len(state._engine_rules)) == (engines + 1, rules + 1)  # cached
    assert state.engine_default(config) is state.engine_default(config)
    ref = weakref.ref(config)
    del config
    gc.collect()
    assert ref() is None
    assert (len(state._requested), len(state._engine_rules)) == (engines, rules)


def test_the_identity_cache_computes_once_and_forgets_the_dead():
    class Config:
        def __init__(self, value):
            self.value = value

    cache, calls = state.ByIdentity(), []

    def compute(config):
        calls.append(config.value)
        return config.value * 2

    first, second = Config(1), Config(2)
    assert cache.get(first, compute) == 2 and cache.get(first, compute) == 2 and cache.get(second, compute) == 4
    assert calls == [1, 2] and len(cache) == 2
    del first
    gc.collect()
    assert len(cache) == 1
    plain = SimpleNamespace(value=3)  # takes no weak reference: computed each time, never held
    assert cache.get(plain, compute) == 6 and cache.get(plain, compute) == 6 and len(cache) == 1


@pytest.mark.parametrize("flags, expected", [
    ("fpu vme sse sse2 avx2 avx512f", "float32"),
    ("fpu sse2 avx512f avx512_bf16 avx512_vnni", "bfloat16"),
    ("fpu sse2 amx_bf16 amx_tile amx_int8", "bfloat16"),
    ("", "float32"),
])
def test_default_dtype_reads_the_cpu_flags(tmp_path, monkeypatch, flags, expected):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cpuinfo = tmp_path / "cpuinfo"
    cpu = f"model name\t: a CPU\nflags\t\t: {flags}\n"
    cpuinfo.write_text(f"processor\t: 0\n{cpu}\nprocessor\t: 1\n{cpu}")
    assert bench.default_dtype(cpuinfo) == expected


def test_default_dtype_on_cuda_and_without_cpuinfo(tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert bench.default_dtype(tmp_path / "missing") == "bfloat16"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert bench.default_dtype(tmp_path / "missing") == "float32"


def test_the_bench_command_takes_a_dtype():
    from specdiff.cli import build_parser

    parser = build_parser()
    assert parser.parse_args(["bench", "vllm", "--dtype", "bfloat16"]).dtype == "bfloat16"
    assert parser.parse_args(["bench", "vllm"]).dtype is None  # bench.default_dtype() when it runs
    with pytest.raises(SystemExit):
        parser.parse_args(["bench", "vllm", "--dtype", "float16"])
