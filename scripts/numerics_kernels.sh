#!/usr/bin/env bash
# The numerics-sensitive tests (pytest marker `numerics`: the real model's exactness tests, the bfloat16 tests, the
# recorded outputs, anything compared to a recorded float) again under the other kernel families this CPU reaches
# (issue 54). oneDNN, MKL and ATen's vectorised kernels each pick by the CPU (AMX micro-GEMMs, AVX-512 BF16,
# AVX2, scalar), round differently, and can be capped by environment variables:
#   - AVX2: ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 ATEN_CPU_CAPABILITY=avx2 (where the CPU has more);
#   - AVX512_CORE: ONEDNN_MAX_CPU_ISA=AVX512_CORE ATEN_CPU_CAPABILITY=avx512 (where it has AMX or AVX-512 BF16);
#   - scalar ATen: ATEN_CPU_CAPABILITY=default (where the CPU has no AVX-512: the other family within reach there;
#     on an AVX2 EPYC it reproduces the Xeon's default masked-drafter loss of tests/training/test_soft_targets.py).
# At most two extra runs on any CPU. On the AVX2 EPYC the scalar run of the marked set took 33 min beside other
# jobs (load 6-9 on 2 cores); bfloat16 is emulated there and slowest in scalar ATen.
# The default kernels are the main suite's run. Run from the repository root in the project's environment:
#   bash scripts/numerics_kernels.sh [extra pytest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
flags="$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)"
has() { [[ " $flags " == *" $1 "* ]]; }
variants=()
if has avx512f; then
    variants+=("ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 ATEN_CPU_CAPABILITY=avx2")
fi
if has avx512f && { has amx_bf16 || has avx512_bf16; }; then
    variants+=("ONEDNN_MAX_CPU_ISA=AVX512_CORE ATEN_CPU_CAPABILITY=avx512")
fi
if ! has avx512f; then  # an AVX2-only CPU: ATen's scalar kernels are the other family within reach
    variants+=("ATEN_CPU_CAPABILITY=default")
fi
status=0
for variant in "${variants[@]}"; do
    echo "== numerics tests under: $variant"
    # exit 5 (nothing collected) fails too: the marker must select tests
    env $variant python -m pytest -m numerics tests "$@" || status=1
done
exit $status
