#!/usr/bin/env bash
# The first GPU run of relpos, as one command (< 8 minutes on one GPU):
#   1. every scheme's flex path against the float64 reference, forward and backward, small N, on CUDA;
#   2. `relpos bench --device cuda` at N = 2048, 8192 and 32768 against SDPA (FlashAttention) with no bias;
#   3. a 2-process NCCL DDP training step if two GPUs are present (otherwise skipped, and said so).
# Writes JSON and Markdown under benchmarks/results/gpu/ (gpu_check.json, gpu_check.md, attention-gpu-N*.{json,md}).
#
#   benchmarks/gpu_check.sh              # on a GPU machine
#   benchmarks/gpu_check.sh --dry-run    # CPU, tiny sizes, no CUDA (CI runs this so the script does not rot)
#   benchmarks/gpu_check.sh --out DIR    # another output folder
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
    if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
exec "$PY" benchmarks/gpu_check.py "$@"
