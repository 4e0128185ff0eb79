"""Cost of block verification with Cactus and a real proposal, against token-level Cactus.

Block verification with Cactus verifies against C, the distribution token-level Cactus emits
(`acceptance.cactus_emitted_distribution`), at every drafted position; token verification reads
only the positions up to each row's first rejection. The target (issue 11): block at most 5x the
time of token on the same inputs, and a peak memory within 4x the input tensors.

    from specdiff.bench.verify_cactus import measure
    measure(batch=8, vocab=151_936, block_len=16)          # {"time_ratio": ..., "memory_ratio": ...}

Inputs are those of `specdiff bench verify`: float32 logits, target 3 N(0, 1), draft = target +
1.5 N(0, 1), drafted tokens sampled from the draft. Times: medians of interleaved calls at the
caller's torch thread count. Memory: in a fresh subprocess (so that no earlier allocation is
reused), the peak resident set during one block call (VmHWM, reset just before it) minus the
resident set before it, over the bytes of the input tensors.
"""
from __future__ import annotations

import json
import subprocess
import sys

import torch

from specdiff.eval.timing import interleaved_median_ms

TIME_TARGET = 5.0  # block / token
MEMORY_TARGET = 4.0  # (inputs + peak extra during the block call) / inputs


def make_inputs(batch: int, vocab: int, block_len: int, seed: int = 0):
    """draft_tokens [b, B] long, draft_logits [b, B, V] and target_logits [b, B+1, V] float32."""
    generator = torch.Generator().manual_seed(seed)
    target_logits = torch.randn(batch, block_len + 1, vocab, generator=generator).mul_(3.0)  # [b, B+1, V]
    draft_logits = torch.randn(batch, block_len, vocab, generator=generator).mul_(1.5)  # [b, B, V]
    draft_logits.add_(target_logits[:, :block_len])
    tokens = torch.empty(batch, block_len, dtype=torch.long)  # [b, B]
    for row in range(batch):  # one row at a time: a softmax of every row at once would double the memory
        tokens[row] = torch.multinomial(torch.softmax(draft_logits[row], dim=-1), 1, generator=generator).squeeze(-1)
    return tokens, draft_logits, target_logits


def _call(method: str, inputs, delta: float, seed: int):
    import specdiff as sd

    tokens, draft_logits, target_logits = inputs
    return sd.verify(tokens, draft_logits, target_logits, rule=sd.Cactus(delta), method=method, inputs="logits",
                     generator=torch.Generator().manual_seed(seed))


def time_methods(inputs, delta: float = 0.5, repeats: int = 3) -> dict:
    """Median wall seconds of token and block Cactus on the same inputs, interleaved after a warm-up."""
    calls = {method: (lambda method=method: _call(method, inputs, delta, 1)) for method in ("token", "block")}
    return {method: ms / 1e3 for method, ms in interleaved_median_ms(calls, repeats).items()}


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def peak_extra_bytes(batch: int, vocab: int, block_len: int, delta: float = 0.5, seed: int = 0) -> dict:
    """In THIS process: inputs, then one block call; the peak resident set above the one before it.
    Linux only (VmHWM reset through /proc/self/clear_refs). Call it in a fresh process (`measure` does)."""
    import ctypes
    import gc

    inputs = make_inputs(batch, vocab, block_len, seed)
    input_bytes = sum(t.numel() * t.element_size() for t in inputs)
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)  # hand freed input-making buffers back to the system
    except OSError:
        pass
    before = _status_kib("VmRSS")
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # reset VmHWM to the current resident set
    _call("block", inputs, delta, 1)
    peak = _status_kib("VmHWM")
    extra = max(0, peak - before) * 1024
    return {"input_bytes": input_bytes, "block_peak_extra_bytes": extra,
            "memory_ratio": (input_bytes + extra) / input_bytes}


def measure(batch: int = 8, vocab: int = 151_936, block_len: int = 16, delta: float = 0.5, seed: int = 0,
            repeats: int = 3, memory: bool = True) -> dict:
    """Times (in this process) and peak memory (in a fresh subprocess) of block vs token Cactus."""
    inputs = make_inputs(batch, vocab, block_len, seed)
    times = time_methods(inputs, delta, repeats)
    del inputs
    result = {"batch": batch, "vocab": vocab, "block": block_len, "delta": delta, "threads": torch.get_num_threads(),
              "token_cactus_s": times["token"], "block_cactus_s": times["block"],
              "time_ratio": times["block"] / times["token"]}
    if memory:
        code = ("import json, sys, torch; from specdiff.bench.verify_cactus import peak_extra_bytes; "
                f"torch.set_num_threads({torch.get_num_threads()}); "
                f"print(json.dumps(peak_extra_bytes({batch}, {vocab}, {block_len}, {delta}, {seed})))")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        result.update(json.loads(out.stdout.strip().splitlines()[-1]))
    result["meets_time_target"] = result["time_ratio"] <= TIME_TARGET
    if memory:
        result["meets_memory_target"] = result["memory_ratio"] <= MEMORY_TARGET
    return result


if __name__ == "__main__":  # python -m specdiff.bench.verify_cactus [batch vocab block]
    sizes = [int(x) for x in sys.argv[1:4]] or [8, 151_936, 16]
    print(json.dumps(measure(*sizes), indent=1))
