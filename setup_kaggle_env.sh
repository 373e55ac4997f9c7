#!/usr/bin/env bash
# Find TensorRT (pip installs, tar trees under /kaggle/input or --root PATH, system library folders), copy the
# real libraries into a writable folder (default /kaggle/working/trtlab-runs/lib, runs/lib in the checkout
# elsewhere), create real .so.MAJOR/.so copies, write env.sh and install the matching Python bindings wheel from
# the tree, offline. Read-only inputs are never written; a set of libraries from different TensorRT releases is
# refused. env.sh goes into --dest DIR when given (else beside the default lib folder), never over another file.
# Runs on the standard library alone (python -m trtlab.env setup).
#
#   bash setup_kaggle_env.sh [--root PATH]... [--dest DIR] [--no-bindings] [--bindings-target DIR] [--force]
#   source /kaggle/working/trtlab-runs/env.sh        # the path is printed at the end; then start python / trtexec
#
# No TensorRT at all? `python -m trtlab doctor` names the one pip command for this machine's driver and GPU.
#
# In a running notebook kernel, sourcing env.sh changes nothing for that kernel: use trtlab.load_tensorrt().
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PYTHON="${PYTHON:-python3}"
if ! command -v "$PYTHON" >/dev/null 2>&1; then
  echo "setup_kaggle_env.sh: $PYTHON not found: set PYTHON=/path/to/python3" >&2
  exit 2
fi
# Run as a module from this checkout (trtlab/__init__ imports nothing heavy, so it works before any install); the
# current directory is kept so relative --root paths mean what the user typed.
PYTHONPATH="$HERE${PYTHONPATH:+:$PYTHONPATH}" exec "$PYTHON" -m trtlab.env setup "$@"
