"""Host↔device copies of a real input batch through trtlab's cuda-python buffers: pinned vs pageable memory.

    python bench/bench_cuda_copies.py [--batches 32,256] [--repeats 30]

The batch is the demo photos from the decode cache, normalised to float32 N×3×224×224 exactly as inference feeds
TensorRT (tiled to the requested batch size). Every copy is timed with CUDA events on one stream; the anchor is
the pageable copy of the same batch in the same run, and pinned copies print their speed-up over it, so the
ratio compares across machines. Needs cuda-python and a CUDA GPU (no TensorRT).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def real_batch(size: int, workspace: str):
    import numpy as np

    from trtlab.data.decode_cache import build_decode_cache
    from trtlab.data.demo import demo_dataset
    from trtlab.data.preprocess import normalize_batch

    cache = build_decode_cache(demo_dataset(), "tf-lite", workspace, progress=False)
    photos = normalize_batch(cache.crops[cache.valid_indices], cache.preprocess)
    reps = -(-size // len(photos))
    return np.ascontiguousarray(np.concatenate([photos] * reps)[:size])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", default="32,256", help="comma-separated batch sizes")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--workspace", default=None, help="decode-cache workspace (default: a temp folder)")
    args = parser.parse_args(argv)

    from trtlab.backends.cuda_runtime import cuda_available, device_info, time_copies

    ok, why = cuda_available()
    if not ok:
        print(f"no CUDA GPU usable here ({why}); nothing to measure")
        return 2
    info = device_info()
    print(f"GPU: {info['name']} (sm_{info['compute_capability'].replace('.', '')}), driver {info['driver_version']}, "
          f"CUDA runtime {info['runtime_version']}")
    with tempfile.TemporaryDirectory() as tmp:
        workspace = args.workspace or tmp
        print(f"{'batch':>5} {'MB':>7} {'memory':>8} {'dir':>4} {'median ms':>10} {'min ms':>8} {'GB/s':>7} "
              f"{'vs pageable':>11}")
        for size in (int(s) for s in args.batches.split(",")):
            batch = real_batch(size, workspace)
            result = time_copies(batch, repeats=args.repeats)
            anchor = {t.direction: t.ms_median for t in result["timings"] if t.memory == "pageable"}
            for t in result["timings"]:
                print(f"{size:>5} {t.nbytes / 1e6:>7.1f} {t.memory:>8} {t.direction:>4} {t.ms_median:>10.3f} "
                      f"{t.ms_min:>8.3f} {t.gb_per_s:>7.2f} {anchor[t.direction] / t.ms_median:>10.2f}x")
            print(f"{size:>5} round trip identical: {result['roundtrip_ok']}; pinned speed-up H2D "
                  f"{result['pinned_speedup_h2d']:.2f}x, D2H {result['pinned_speedup_d2h']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
