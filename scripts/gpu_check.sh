#!/usr/bin/env bash
# Run on a machine with a CUDA GPU, from the repository root: the checks this project could not run on its CPU-only
# machines (scripts/gpu_check.py says which), with the Python that holds a CUDA build of PyTorch.
# Usage: scripts/gpu_check.sh [OUT folder, default gpu_check_results]   (PYTHON=... picks the interpreter)
# Needs transformers >= 5.17, safetensors, huggingface_hub and scipy next to torch; hf_specgen is read from this
# checkout (no install). Exit status 0 only when every check passed; the report is OUT/gpu_check.json.
set -euo pipefail
OUT=${1:-gpu_check_results}
PYTHON=${PYTHON:-python3}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
"$PYTHON" scripts/gpu_check.py --out "$OUT" 2>&1 | tee "$OUT.log"
