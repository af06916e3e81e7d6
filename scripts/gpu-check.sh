#!/usr/bin/env bash
# The GPU path's only test (bench/gpu_check.py): on one GPU machine, in under ten minutes, GRPO smoke
# with the HF engine and with vLLM, two steps of SmolLM2-135M-Instruct at bf16, and two-rank DDP when
# two GPUs are visible; writes results/gpu-check/<date>.json (what ran, pass/fail, seconds per step,
# nvidia-smi, the machine's provenance). Never yet run on a GPU: no GPU machine has been lent to this
# project's sessions so far. Its driver's CPU-safe parts are tested on CPU (tests/bench/test_gpu_check.py).
#
#   bash scripts/gpu-check.sh               # on a GPU machine, after `pip install -e '.[gpu]'` and make setup
#   bash scripts/gpu-check.sh --cpu         # the CPU-safe checks on this machine (JSON under runs/gpu-check/)
#   bash scripts/gpu-check.sh --dry-run     # the plan; runs nothing
#
# Exit status: 0 all passed, 1 a check failed, 2 no GPU (without --cpu), 124 the ten minutes ran out
# (the JSON keeps every check that finished). GPU_CHECK_TIMEOUT (seconds, default 600) sets the limit.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
LIMIT=${GPU_CHECK_TIMEOUT:-600}
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false OMP_WAIT_POLICY=PASSIVE
# the driver stops starting checks 30 s before the limit; timeout kills it (and its runs) 10 s after
exec timeout --kill-after=10 "$LIMIT" "$PY" -m bench.gpu_check --budget-s "$((LIMIT - 30))" "$@"
