#!/usr/bin/env bash
# The benchmark on one GPU (scale=paper-like sizes) with the vLLM engine: our step vs TRL's, the
# minimal work, MFU, and batched multi-turn rollouts. Prepared for a GPU node; it has NOT been run
# (no GPU was available when it was written): only `bash -n` checked it.
#
#   bash bench/gpu.sh          # < 10 min on one GPU (timeouts enforce it)
#
# The model is the locally built ~10M one (common/conf/model/tiny10m.yaml): nothing is downloaded.
# Needs the `gpu` and `bench` extras (vLLM 0.33 with its CUDA torch, TRL).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=${OUT:-results/bench/gpu}
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || { echo "no GPU visible" >&2; exit 1; }
"$PY" -c "import vllm, trl; print('vllm', vllm.__version__, 'trl', trl.__version__)"
MODELS=tiny10m
# 1. Single-turn step, ours vs TRL, the minimal work and MFU (larger batch than on CPU).
timeout 330 "$PY" -m bench.cli --device cuda --engine vllm --models "$MODELS" --steps 6 --warmup 2 \
  --tasks 64 --group 8 --new-tokens 128 \
  --precisions 32,bf16 --trl-precisions 32,bf16 --kl 0,0.04 --mt-tasks 64 --mt-group 8 --out "$OUT"
# 2. The vLLM engine column (bench/engines.py), when present.
# The HF engine against vLLM (adapter and full sync) on the same rollouts and steps.
if [[ -f bench/engines.py ]]; then
  timeout 240 "$PY" -m bench.engines --device cuda --precision bf16 --tasks 64 --group 8 \
    --max-new-tokens 128 --steps 3 --warmup 1 --kv-cache-bytes 0 --gpu-memory-utilization 0.3 \
    --work-dir .cache/gpu-bench --out "$OUT"
fi
echo "results in $OUT"
