"""Images/s of each backend on the same images in one run: ONNX Runtime's CPU literal reference pinned to 2 and 4
cores, and the torch GPU backend at batch 256 and at the CPU's batch, for FP32 and INT8 (FP16 and the INT8 FP16
float path on request). Every row prints its ratio to the 2-core CPU literal reference of the same variant measured
in this run, and the GPU rows the top-1 agreement and logit cosine of their logits with the CPU literal ones.

    # 1. where the demo packages are (any CPU machine): export EfficientNet-Lite0, build its variants, keep the
    #    demo photos' crops — the files the GPU machine needs, ~45 MB, in .devcarry/ (git-ignored, carried;
    #    tests/test_gpu_backend.py's GPU tests read them there too)
    python bench/bench_backends.py prepare
    # 2. on the GPU machine, offline (torch, onnx, onnxruntime, numpy; nothing else):
    python bench/bench_backends.py run [--images 4096] [--cpu-images 512] [--batch 256] [--cpu-batch 32]
                                       [--variants fp32,int8] [--json results.json]
                                       [--calibration-images 1000] [--ab-images 5000] [--ab-calibration 512]
    # then (same run): calibration vs one forward pass at N=1000 on the CPU pinned to 2 and 4 cores and on the GPU,
    # and the A/B end to end (FP32 + INT8 minmax/entropy/percentile on 5,000 images) on the GPU — bench/bench_ab.py

On the lead's GPU machine (carry `.devcarry`; no wheels needed there: torch, onnx, onnxruntime, numpy, opencv are
installed), the GPU tests and this bench:

    python3 -m pytest -q -s tests/test_gpu_ops.py tests/test_gpu_backend.py -k "cuda or test_gpu_ops"
    python3 bench/bench_backends.py run --variants fp32,int8,int8-fp16path --json $OUT/bench_backends.json

The images: the demo photos' 224×224 crops (or `--crops FILE.npy`, uint8 N×H×W×3), replicated to `--images` with
horizontal flips and shifts, so a few thousand distinct inputs come from 26 photos. The CPU side runs each
(variant, core count) in a child process pinned with os.sched_setaffinity before ONNX Runtime starts, with as many
intra-op threads as cores, on the first `--cpu-images` images, as trtlab's evaluation runs its reference: FP32 with
all optimizations; INT8 with the fast literal setting (optimizations on, Q/DQ unfused) when it reproduces the
literal outputs on 8 images, else all optimizations off; FP16 graphs with optimizations off. The GPU side is the
torch backend from uint8 crops (pinned upload, normalised on the device) to host logits, TF32 off, cuDNN
deterministic; one warm-up batch is not timed.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEFAULT_ASSETS = ROOT / ".devcarry" / "bench_backends"
VARIANT_FILES = {"fp32": "fp32.onnx", "int8": "int8.onnx", "fp16": "fp16.onnx", "int8-fp16path": "int8-fp16path.onnx",
                 "int8-guarded": "int8-guarded.onnx"}


# -- prepare (a CPU machine with the demo packages) ---------------------------------------------------------------
def prepare(assets: Path, workspace: str | None) -> None:
    import shutil
    import tempfile

    from trtlab.core.workspace import atomic_write_json, sha256_file
    from trtlab.data.decode_cache import build_decode_cache
    from trtlab.data.demo import demo_dataset, export_demo_model
    from trtlab.quantization.variants import Recipe, build_variant

    workspace = workspace or tempfile.mkdtemp(prefix="trtlab-bench-")
    model = export_demo_model("efficientnet-lite0", workspace)
    cache = build_decode_cache(demo_dataset(), "tf-lite", workspace, progress=False)
    # "int8": the FP32 float path (Recipe(high_precision="fp32"), the marked twin, with its legacy placement rules);
    # "int8-fp16path": the project's default recipe, made as a user makes it (Recipe(algorithm=...) with no float
    # path or placement named: FP16 outside Q/DQ, FP16 scales at opset 19, boundary Casts, DEFAULT_RULES). Not
    # dataclasses.replace of the FP32-path recipe: that keeps its already resolved LEGACY placement rules.
    recipe = Recipe(algorithm="entropy", calibration_images=24, calibration_batch=8, high_precision="fp32")
    default = Recipe(algorithm="entropy", calibration_images=24, calibration_batch=8)
    assert default.placement == Recipe().placement and default.high_precision == Recipe().high_precision
    int8 = build_variant(model, recipe, cache, cache.valid_indices, workspace=workspace, progress=False)
    path16 = build_variant(model, default, cache, cache.valid_indices, workspace=workspace, progress=False)
    fp16 = build_variant(model, Recipe(precision="fp16"), workspace=workspace)
    guarded = build_variant(model, Recipe(algorithm="percentile", guards=("first_layer=fp16", "last_layer"),
                                          calibration_images=24, high_precision="fp32"), cache, cache.valid_indices,
                            workspace=workspace, progress=False)
    assets.mkdir(parents=True, exist_ok=True)
    shutil.copy(model, assets / VARIANT_FILES["fp32"])
    shutil.copy(int8.model_path, assets / VARIANT_FILES["int8"])
    shutil.copy(fp16.model_path, assets / VARIANT_FILES["fp16"])
    shutil.copy(guarded.model_path, assets / VARIANT_FILES["int8-guarded"])
    shutil.copy(path16.model_path, assets / VARIANT_FILES["int8-fp16path"])
    crops = np.asarray(cache.crops[cache.valid_indices])
    np.save(assets / "crops.npy", crops)
    np.save(assets / "labels.npy", np.asarray(cache.dataset.labels[cache.valid_indices], np.int64))  # bench_ab
    atomic_write_json(assets / "manifest.json", {
        "model": "efficientnet-lite0", "int8_recipe": recipe.to_dict(), "int8_fp16path_recipe": default.to_dict(),
        "preprocess": cache.preprocess.to_dict(),
        "photos": len(crops), "files": {v: {"file": f, "sha256": sha256_file(assets / f)}
                                        for v, f in VARIANT_FILES.items()}})
    size = sum(p.stat().st_size for p in assets.iterdir()) / 2**20
    print(f"prepared {assets} ({size:.0f} MB): {', '.join(VARIANT_FILES)} and {len(crops)} crops")


# -- the images ---------------------------------------------------------------------------------------------------
def replicated_crops(base: np.ndarray, count: int, start: int = 0) -> np.ndarray:
    """Crops `start` … `start + count - 1` from `base`: copy k of photo i is flipped when k is odd and shifted by a
    seeded offset of up to ±16 pixels (edge rows repeated), so every input differs."""
    out = np.empty((count,) + base.shape[1:], np.uint8)
    for index in range(start, start + count):
        photo, copy = base[index % len(base)], index // len(base)
        if copy:
            rng = np.random.default_rng(copy)
            dy, dx = (int(v) for v in rng.integers(-16, 17, 2))
            photo = np.pad(photo, ((16, 16), (16, 16), (0, 0)), mode="edge")[16 + dy:16 + dy + base.shape[1],
                                                                              16 + dx:16 + dx + base.shape[2]]
            if copy % 2:
                photo = photo[:, ::-1]
        out[index - start] = photo
    return out


# -- the CPU side (one pinned child process per measurement) ------------------------------------------------------
def cpu_worker(args) -> None:
    cores = sorted(os.sched_getaffinity(0))[: args.threads]
    os.sched_setaffinity(0, cores)  # before ONNX Runtime creates its thread pool
    from trtlab.backends.ort import OrtRunner
    from trtlab.data.preprocess import get_preprocess, normalize_batch
    from trtlab.evaluation.literal_check import FAST_LITERAL_OPTIONS, LITERAL_OPTIONS, literal_outputs_match

    import onnxruntime

    crops = np.load(args.crops, mmap_mode="r")[: args.count]
    preprocess = get_preprocess(json.loads(Path(args.preprocess).read_text()))
    if args.variant == "fp32":
        options, chosen = {"graph_optimization": "all"}, "all optimizations"
    elif args.variant.startswith("int8") and "fp16" not in args.variant:
        sample = normalize_batch(crops[:8], preprocess)
        with OrtRunner(args.model, **LITERAL_OPTIONS, intra_op_threads=args.threads) as literal, \
                OrtRunner(args.model, **FAST_LITERAL_OPTIONS, intra_op_threads=args.threads) as fast:
            same = literal_outputs_match(literal.infer(sample), fast.infer(sample))["matches"]
        options = FAST_LITERAL_OPTIONS if same else LITERAL_OPTIONS
        chosen = "fast literal (Q/DQ unfused)" if same else "literal (optimizations off)"
    else:
        options, chosen = LITERAL_OPTIONS, "literal (optimizations off)"
    logits = []
    with OrtRunner(args.model, providers=["CPUExecutionProvider"], intra_op_threads=args.threads, **options) as runner:
        runner.infer(normalize_batch(crops[: args.batch], preprocess))  # warm-up
        start = time.perf_counter()
        for first in range(0, len(crops), args.batch):
            logits.append(runner.infer(normalize_batch(crops[first:first + args.batch], preprocess)))
        seconds = time.perf_counter() - start
    np.save(args.out, np.concatenate(logits))
    print(json.dumps({"seconds": seconds, "images": len(crops), "cores": cores, "options": chosen,
                      "onnxruntime": onnxruntime.__version__}))


def run_cpu(variant, model, crops_path, preprocess_path, count, threads, batch, out) -> dict:
    command = [sys.executable, __file__, "_cpu", "--variant", variant, "--model", str(model), "--crops",
               str(crops_path), "--preprocess", str(preprocess_path), "--count", str(count), "--threads", str(threads),
               "--batch", str(batch), "--out", str(out)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"CPU worker for {variant} on {threads} cores failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["logits"] = np.load(out)
    return result


# -- the GPU side -------------------------------------------------------------------------------------------------
def run_gpu(model, crops, preprocess, batch, device) -> dict:
    from trtlab.backends.gpu.runner import TorchRunner

    logits = []
    with TorchRunner(model, device=device) as runner:
        runner.infer_crops(crops[:batch], preprocess)  # warm-up: cuDNN set-up, allocator
        start = time.perf_counter()
        for first in range(0, len(crops), batch):
            logits.append(runner.infer_crops(crops[first:first + batch], preprocess))
        seconds = time.perf_counter() - start
        description = runner.describe()
    return {"seconds": seconds, "images": len(crops), "logits": np.concatenate(logits), "describe": description}


def agreement(reference: np.ndarray, candidate: np.ndarray) -> dict:
    count = min(len(reference), len(candidate))
    a, b = reference[:count], candidate[:count]
    cosine = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return {"images": count, "top1_agreement": float((a.argmax(1) == b.argmax(1)).mean()),
            "cosine_mean": float(cosine.mean()), "cosine_min": float(cosine.min())}


def run(args) -> int:
    import tempfile

    import torch

    from trtlab.data.preprocess import get_preprocess

    assets = Path(args.assets)
    if not (assets / "manifest.json").exists():
        print(f"error: no prepared assets in {assets} — run `python bench/bench_backends.py prepare` where the demo "
              f"packages are, and carry that folder", file=sys.stderr)
        return 2
    manifest = json.loads((assets / "manifest.json").read_text())
    preprocess = get_preprocess(manifest["preprocess"])
    base = np.load(args.crops) if args.crops else np.load(assets / "crops.npy")
    crops = replicated_crops(base, args.images)
    device = args.device or ("cuda" if torch.cuda.is_available() else None)
    if device is None:
        print("error: torch sees no CUDA GPU — run this on the GPU machine, or pass --device cpu to try the script",
              file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="bench-backends-"))
    np.save(work / "crops.npy", crops[: args.cpu_images])
    (work / "preprocess.json").write_text(json.dumps(manifest["preprocess"]))
    cpu_batch = args.cpu_batch
    print(f"{len(crops)} images ({len(base)} photos, flipped and shifted); CPU on the first {args.cpu_images} at "
          f"batch {cpu_batch}; machine: {len(os.sched_getaffinity(0))} cores; torch {torch.__version__}")
    rows, summary = [], {"images": len(crops), "cpu_images": args.cpu_images, "variants": {}}
    for variant in args.variants.split(","):
        model = assets / VARIANT_FILES[variant]
        cpu = {threads: run_cpu(variant, model, work / "crops.npy", work / "preprocess.json", args.cpu_images,
                                threads, cpu_batch, work / f"{variant}-{threads}.npy") for threads in (2, 4)}
        anchor = cpu[2]["images"] / cpu[2]["seconds"]
        entry = summary["variants"][variant] = {"cpu_options": cpu[2]["options"], "rows": []}
        for threads, result in cpu.items():
            rate = result["images"] / result["seconds"]
            rows.append((variant, f"ORT CPU {len(result['cores'])} cores", cpu_batch, result["images"], rate,
                         rate / anchor, None))
        for batch in sorted({args.batch, cpu_batch}, reverse=True):
            result = run_gpu(model, crops, preprocess, batch, device)
            rate = result["images"] / result["seconds"]
            agree = agreement(cpu[2]["logits"], result["logits"])
            rows.append((variant, f"torch {device}", batch, result["images"], rate, rate / anchor, agree))
            entry["describe"] = result["describe"]
        entry["rows"] = [dict(zip(("variant", "backend", "batch", "images", "images_per_s", "ratio_vs_cpu2",
                                   "agreement"), row)) for row in rows if row[0] == variant]
        print_rows([row for row in rows if row[0] == variant], cpu[2]["options"])
    describe = next(iter(summary["variants"].values()))["describe"]
    print(f"GPU backend: {describe['device']}, torch {describe['torch']} (CUDA {describe['cuda']}), TF32 off, cuDNN "
          f"deterministic={describe['cudnn_deterministic']} benchmark={describe['cudnn_benchmark']}")
    summary.update(workflow_parts(args, assets, manifest, base, device, work))
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1, default=str))
    return 0


def workflow_parts(args, assets: Path, manifest: dict, base: np.ndarray, device: str, work: Path) -> dict:
    """Calibration vs one forward pass (CPU pinned to 2 and 4 cores, and the GPU), then the A/B end to end on the
    GPU backend — bench_ab.py, in this same run."""
    sys.path.insert(0, str(ROOT / "bench"))
    from bench_ab import ab_end_to_end, calibration_vs_forward, print_ab, print_calibration

    out = {"calibration": []}
    model = str(assets / VARIANT_FILES["fp32"])
    if args.calibration_images:
        print()
        on_device = device if device.startswith("cuda") else "torch-cpu"  # --device cpu: trying the script
        for where, cores in [("cpu", 2), ("cpu", 4), (on_device, None)]:
            if where == "cpu" and cores > len(os.sched_getaffinity(0)):
                continue
            result = calibration_vs_forward(model, base, manifest["preprocess"], args.calibration_images,
                                            args.calibration_batch, where, work, cores)
            print_calibration(result)
            out["calibration"].append(result)
    if args.ab_images:
        labels = np.load(assets / "labels.npy") if (assets / "labels.npy").exists() else np.full(len(base), -1)
        out["ab"] = ab_end_to_end(model, base, labels, manifest["preprocess"], args.ab_images, args.ab_calibration,
                                  "torch", args.batch, work)
        print_ab(out["ab"])
    return out


def print_rows(rows, cpu_options) -> None:
    print(f"\n{rows[0][0]} (CPU reference: {cpu_options})")
    print(f"{'backend':>20} {'batch':>5} {'images':>6} {'img/s':>9} {'× CPU2':>8}  agreement with the CPU literal run")
    for _, backend, batch, images, rate, ratio, agree in rows:
        note = "" if agree is None else (f"top-1 {agree['top1_agreement']:.3f} on {agree['images']}, cosine mean "
                                         f"{agree['cosine_mean']:.6f} min {agree['cosine_min']:.6f}")
        print(f"{backend:>20} {batch:>5} {images:>6} {rate:>9.1f} {ratio:>7.1f}×  {note}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="export the demo model and its variants, save the crops")
    p.add_argument("--assets", default=str(DEFAULT_ASSETS))
    p.add_argument("--workspace", default=None)
    r = sub.add_parser("run", help="measure every backend on the same images")
    r.add_argument("--assets", default=str(DEFAULT_ASSETS))
    r.add_argument("--crops", default=None, help="uint8 N×H×W×3 .npy to use instead of the demo crops")
    r.add_argument("--images", type=int, default=4096)
    r.add_argument("--cpu-images", type=int, default=512)
    r.add_argument("--batch", type=int, default=256)
    r.add_argument("--cpu-batch", type=int, default=32)
    r.add_argument("--variants", default="fp32,int8", help=f"comma-separated, of {', '.join(VARIANT_FILES)}")
    r.add_argument("--device", default=None, help="cuda (default when present), cuda:1, or cpu to try the script")
    r.add_argument("--json", default=None)
    r.add_argument("--calibration-images", type=int, default=1000, help="calibration vs forward at N (0: skip)")
    r.add_argument("--calibration-batch", type=int, default=8)
    r.add_argument("--ab-images", type=int, default=5000, help="A/B end to end on the GPU backend (0: skip)")
    r.add_argument("--ab-calibration", type=int, default=512)
    w = sub.add_parser("_cpu")  # the pinned CPU worker
    for name in ("--variant", "--model", "--crops", "--preprocess", "--out"):
        w.add_argument(name, required=True)
    for name in ("--count", "--threads", "--batch"):
        w.add_argument(name, type=int, required=True)
    args = parser.parse_args(argv)
    if args.command == "prepare":
        prepare(Path(args.assets), args.workspace)
        return 0
    if args.command == "_cpu":
        cpu_worker(args)
        return 0
    unknown = set(args.variants.split(",")) - set(VARIANT_FILES)
    if unknown:
        print(f"error: unknown variant(s) {sorted(unknown)} — choose from {', '.join(VARIANT_FILES)}", file=sys.stderr)
        return 2
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
