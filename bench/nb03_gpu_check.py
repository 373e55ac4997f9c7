"""Notebook 03's default A/B on a CUDA GPU machine with the REAL TensorRT Python bindings importable over the stub
libraries of tests/trt_bindings.py (as after notebook 00 found bindings but no TensorRT builder): which backend
'auto' picks, and what the A/B's TensorRT column says. Issue 25 item 5.

Notebook 03 calls `trtlab.compare(model, data, recipes, split=split)` with everything else default; so does this,
on `--images` PNG photos made from the demo crops of `bench_backends.py prepare` (flipped and shifted copies —
no ImageNet on the GPU machine, so accuracies mean nothing). Expected: backend torch (the GPU), the A/B table on
torch-cuda, and the TensorRT column one line per engine: TensorRT cannot build (its factory returns nullptr).

    python3 bench/nb03_gpu_check.py --pin 11.4.0.106 [--stubs DIR] [--assets DIR] [--images 512]

With --pin it re-runs itself inside tests/trt_bindings.run_with_bindings (the bindings of that version from
.trt-bindings/<python tag>/, stubs built with gcc here or taken from --stubs).
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench"), str(ROOT / "tests")]


def with_bindings(args) -> int:
    import trt_bindings

    if args.stubs:
        stubs = {"dir": str(Path(args.stubs).resolve()),
                 "libraries": {p.name: [] for p in Path(args.stubs).glob("lib*.so.*") if not p.name.endswith(".c")}}
    else:
        stubs = trt_bindings.build_stubs(args.pin, Path(tempfile.mkdtemp(prefix="trt-stubs-")))
    argv = [a for a in sys.argv[1:] if a != "--pin" and a != args.pin]
    path = str(Path(__file__).resolve())
    code = (f"import sys\n__file__ = {path!r}\nsys.argv = [__file__] + {argv!r}\n"
            f"exec(compile(open(__file__).read(), __file__, 'exec'))\n")
    proc = trt_bindings.run_with_bindings(args.pin, stubs, code, timeout=args.timeout)
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr[-6000:])
    return proc.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pin", default=None, help="run under the real bindings of this TensorRT version")
    parser.add_argument("--stubs", default=None, help="prebuilt stub libraries (else gcc builds them)")
    parser.add_argument("--assets", default=str(ROOT / ".devcarry" / "bench_backends"))
    parser.add_argument("--images", type=int, default=512)
    parser.add_argument("--calibration", type=int, default=128)
    parser.add_argument("--json", default=None)
    parser.add_argument("--timeout", type=float, default=500)
    args = parser.parse_args()
    if args.pin:
        return with_bindings(args)

    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    import tensorrt

    import trtlab
    from bench_ab import photo_dataset
    from trtlab.backends import resolve_backend, tensorrt_available
    from trtlab.data.split import saved_split

    assets = Path(args.assets)
    work = Path(tempfile.mkdtemp(prefix="nb03-gpu-"))
    base = np.load(assets / "crops.npy")
    labels = np.load(assets / "labels.npy")
    data = photo_dataset(base, labels, args.images + args.calibration, work / "photos")
    split = saved_split(data, args.calibration, workspace=work)
    model = str(assets / "fp32.onnx")
    print(f"tensorrt module: {tensorrt.__name__} {tensorrt.__version__} from {Path(tensorrt.__file__).parent}; "
          f"tensorrt_available()={tensorrt_available()}; resolve_backend -> {resolve_backend(model)}")
    recipes = [trtlab.Recipe(algorithm=a) for a in ("minmax", "entropy", "percentile")]  # notebook 03's cell
    started = time.perf_counter()
    result = trtlab.compare(model, data, recipes, split=split, workspace=work)  # notebook 03's call, defaults
    seconds = time.perf_counter() - started
    print(f"\n{result.ran_on}\n{result.table}\n")
    print(repr(result.engines) if result.engines is not None else "no TensorRT column")
    backends = sorted(set(result.table.raw["backend"]))
    rows = [] if result.engines is None else [row.status for row in result.engines.rows]
    summary = {"tensorrt": tensorrt.__version__, "ran_on": result.ran_on, "backends": backends,
               "top1": {k: float(v) for k, v in result.table.raw["top1"].items()}, "engine_rows": rows,
               "engines_summary": None if result.engines is None else result.engines.summary(),
               "seconds": seconds, "images": args.images}
    print(json.dumps(summary, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1))
    ok = backends == ["torch-cuda"] and rows and all(r.startswith("build failed") for r in rows)
    print("CHECK", "PASSED" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
