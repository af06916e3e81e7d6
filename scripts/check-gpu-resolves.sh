#!/usr/bin/env bash
# Does the GPU environment resolve? pip's real resolver, dry run (installs nothing, needs the registry):
#
#   bash scripts/check-gpu-resolves.sh [python]     # prints what `make setup-gpu` would install; exit 1 if not
#
# The same question without network, against vLLM's recorded requirements: tests/test_gpu_requirements.py.
set -euo pipefail
PY=${1:-python3}
cd "$(dirname "$0")/.."
report=$(mktemp)
trap 'rm -f "$report"' EXIT
"$PY" -m pip install --dry-run --ignore-installed --quiet --report "$report" \
  -c constraints-gpu.txt -e '.[gpu,dev,gguf,envs]'  # what make setup-gpu installs
"$PY" - "$report" <<'PYEOF'
import json, sys
install = json.load(open(sys.argv[1]))["install"]
pins = {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in install}
print(f"[check-gpu-resolves] resolved {len(pins)} packages: " + ", ".join(
    f"{n}=={pins[n]}" for n in ("vllm", "torch", "transformers", "peft", "lightning") if n in pins))
PYEOF
