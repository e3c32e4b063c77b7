#!/usr/bin/env bash
# Create .venv with kdbert and its dependencies (CPU build of torch, pinned).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q torch==2.13.0
.venv/bin/python -m pip install -q -e ".[test]"
# OpenVINO, a second CPU runtime for exports (kdbert bench/evaluate --runtime openvino): optional
.venv/bin/python -m pip install -q -e ".[openvino]" 2>/dev/null || echo "OpenVINO did not install; --runtime openvino is off"
echo "kdbert installed in .venv ($(.venv/bin/python -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'))"
