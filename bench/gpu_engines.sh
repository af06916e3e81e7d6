#!/usr/bin/env bash
# The engine benchmark (bench/engines.py) on one GPU: the HF engine against vLLM with adapter sync
# and with full-weight sync, on a ~150M-parameter Qwen3-shaped model built locally (nothing is
# downloaded: the GPU machine reaches no hub). Budget: under 10 minutes, enforced by `timeout`.
#
#   PY=.venv/bin/python bash bench/gpu_engines.sh [OUT]     (default OUT: results/bench/gpu)
#
# Needs an environment with the suite and the GPU vLLM build (`pip install -e '.[gpu]'`, vllm 0.33,
# which brings its CUDA torch). Prints and writes OUT/engines.{json,md}.
# Not yet run on a GPU: written and checked for syntax only (bash -n, the Python on CPU with --quick).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=${1:-results/bench/gpu}
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
"$PY" - <<'PYEOF'
import torch, vllm
assert torch.cuda.is_available(), "no CUDA device visible"
print(f"[gpu_engines] {torch.cuda.get_device_name(0)}, torch {torch.__version__}, vllm {vllm.__version__}")
PYEOF
# ~150M parameters: 12 layers, hidden 1024, 16 heads of 64 (8 KV heads); the arith tokenizer (512)
MODEL=(--model-arg hidden_size=1024 --model-arg intermediate_size=3072 --model-arg num_layers=12
       --model-arg num_heads=16 --model-arg num_kv_heads=8 --model-arg head_dim=64 --model-arg max_length=1024
       --model-arg lora_rank=16 --model-arg lora_alpha=32)
timeout 570 "$PY" -m bench.engines --device cuda --precision bf16 "${MODEL[@]}" \
  --tasks 64 --group 8 --max-new-tokens 128 --steps 5 --warmup 1 \
  --kv-cache-bytes 0 --gpu-memory-utilization 0.3 --work-dir .cache/gpu-bench --out "$OUT"
