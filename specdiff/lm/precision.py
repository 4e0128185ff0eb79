"""Precision of real models (issue 41, item 1): which dtype a verifier runs in when the user names none.

Rule: bfloat16 where the hardware computes it natively, float32 everywhere else.
- CUDA: bfloat16 (every GPU specdiff targets has bfloat16 tensor cores);
- CPU: bfloat16 when /proc/cpuinfo's flags hold `avx512_bf16` or `amx_bf16` (Zen 4, Sapphire Rapids and
  later); without them torch emulates bfloat16 matmuls, several times slower than float32 (an AVX2 machine
  measured 16 GFLOPS in bfloat16 against 109 in float32 at 64 x 576 x 1536), so float32.
The testbed models always run in float32. `describe_default` says which rule chose the dtype.
"""
from __future__ import annotations

from pathlib import Path

DTYPES = ("float32", "bfloat16")
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def cpu_flags(cpuinfo: str | Path = "/proc/cpuinfo") -> set[str]:
    """The CPU's feature flags (empty where /proc/cpuinfo is not readable)."""
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith(("flags", "Features")):
            return set(line.partition(":")[2].split())
    return set()


def native_bfloat16(device: str = "cpu", flags: set[str] | None = None) -> bool:
    """Whether `device` computes bfloat16 natively (CUDA; a CPU with one of NATIVE_BF16_FLAGS)."""
    if str(device).startswith("cuda"):
        return True
    flags = cpu_flags() if flags is None else flags
    return any(flag in flags for flag in NATIVE_BF16_FLAGS)


def default_dtype(device: str = "cpu", flags: set[str] | None = None) -> str:
    """"bfloat16" where native (`native_bfloat16`), else "float32"."""
    return "bfloat16" if native_bfloat16(device, flags) else "float32"


def describe_default(device: str = "cpu", flags: set[str] | None = None) -> str:
    """One line saying which dtype the default chose and why."""
    if str(device).startswith("cuda"):
        return "bfloat16 (default on CUDA)"
    if native_bfloat16(device, flags):
        return "bfloat16 (default: this CPU has native bfloat16: avx512_bf16 / amx_bf16)"
    return "float32 (default: this CPU has no native bfloat16, where bfloat16 matmuls are emulated and slower)"


def resolve(dtype: str | None, device: str = "cpu") -> str:
    """A dtype name (None or "auto": the default) checked against DTYPES."""
    if dtype in (None, "auto"):
        return default_dtype(device)
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}: expected one of {', '.join(DTYPES)} (or auto)")
    return dtype


def torch_dtype(name: str):
    import torch

    return getattr(torch, name)


def describe(actual: str, requested: str | None = None, device: str = "cpu") -> str:
    """The output's line on precision: the dtype the verifier ran in (`actual`) and why."""
    if requested not in (None, "auto") and actual == requested:
        return f"{actual} (--dtype)"
    if actual == "float32" and (requested not in (None, "auto") or default_dtype(device) != "float32"):
        return "float32 (the testbed's models always run in float32)"
    return describe_default(device)


def of_model(model) -> str:
    """A model's parameter dtype by name ("float32", "bfloat16")."""
    return str(next(model.parameters()).dtype).removeprefix("torch.")
