"""The A/B a user waits for, end to end, and calibration against one forward pass — the parts of issue 19's bench
that go through trtlab's public workflow (bench/bench_backends.py `run` calls both) — and issue 38's bench (the
default command; measurements in bench/ab_stages.py):

    python bench/bench_ab.py [--quick] [--cpus 4] [--gpus 2] [--ab-only] [--profile-warm FILE] [--json FILE]

in ONE invocation: the first INT8 variant's one-time cost (paid before timing); evaluation img/s per variant at the
'auto' batch and at 32, CUDA graph replay + one-kernel Q/DQ against the eager interpreter with and without them
(logits compared bit for bit), GPU busy and user CPU; GPU calibration (streamed and the loop) against a warm forward
at the same batch; the 50,000-image A/B through compare() with its defaults, cold (JPEG files, no decode cache) and
warm (the decode cache present), per-stage seconds — cold with the decode overlapping the evaluation (the
default: calibration images first, the rest decoded while every variant is evaluated in lock-step) and cold with
everything decoded first (overlap_decode=False), stored logits compared —, decode img/s per worker, GPU busy and user CPU per wall second
during evaluation; an estimate for Kaggle's T4 ×2; with --gpus 2, one GPU against two, stored results compared, and
one worker killed. The measuring process is pinned to `--cpus` cores (Kaggle's T4 ×2 kernel has 4). Assets:
`python bench/bench_backends.py prepare` (where the demo packages are), carried in .devcarry/. The earlier bench:
`python bench/bench_ab.py calibration --device cpu --cores 2 ...`.

- `ab_end_to_end`: FP32 + three INT8 recipes (minmax, entropy, percentile), calibrated on `--ab-calibration` images
  and evaluated on `--ab-images` images by `trtlab.workflows.compare.compare` on one backend, timed from the call to
  the table. The images are real photos only in the sense that they are the 26 demo photos flipped and shifted
  (bench_backends.replicated_crops) and written as PNG files — there is no ImageNet on the bench machine, so the
  accuracies mean nothing; the wall time and the agreement between variants are what this measures. Decoding them
  into trtlab's decode cache is timed apart (a user decodes once and then tries recipe after recipe).
- `calibration_vs_forward`: trtlab's entropy calibration statistics (`collect_statistics`, then the entropy search)
  on N images vs one FP32 forward pass over the same N images at the same batch, on one device: 'cpu' (ONNX
  Runtime, pinned to `cores` cores in a child process) or 'cuda' (the torch backend).

    python bench/bench_ab.py calibration --device cuda [--ab-images 5000] [--ab-calibration 512]
    python bench/bench_ab.py calibration --device cpu --cores 2 --ab-images 0 --calibration-images 1000
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

RECIPES = ("minmax", "entropy", "percentile")


def photo_dataset(base: np.ndarray, labels: np.ndarray, count: int, folder: Path):
    """A Dataset of `count` PNG files: replicated crops of the demo photos (labels of their photo; -1 unlabelled)."""
    import cv2

    from bench_backends import replicated_crops
    from trtlab.data.dataset import Dataset

    folder.mkdir(parents=True, exist_ok=True)
    crops = replicated_crops(base, count)
    paths = []
    for index, crop in enumerate(crops):
        path = folder / f"photo{index:06d}.png"
        if not path.exists():
            cv2.imwrite(str(path), np.ascontiguousarray(crop[:, :, ::-1]), [cv2.IMWRITE_PNG_COMPRESSION, 1])
        paths.append(str(path))
    return Dataset("bench-ab-photos", paths, np.asarray([labels[k % len(base)] for k in range(count)], np.int64),
                   root=str(folder))


def ab_end_to_end(model, base, labels, preprocess, images: int, calibration: int, backend: str, batch: int,
                  work: Path, engines: bool = False) -> dict:
    """Decode (timed apart), then compare() FP32 + three INT8 recipes on `images` evaluation images."""
    from trtlab.core.progress import quiet
    from trtlab.data.decode_cache import build_decode_cache
    from trtlab.quantization.variants import Recipe
    from trtlab.evaluation.options import RunOptions
    from trtlab.workflows.compare import compare

    started = time.perf_counter()
    dataset = photo_dataset(base, labels, images + calibration, work / "photos")
    written = time.perf_counter() - started
    started = time.perf_counter()
    build_decode_cache(dataset, preprocess, work, progress=False)
    decoded = time.perf_counter() - started
    recipes = [Recipe(algorithm=name, calibration_images=calibration, calibration_batch=32) for name in RECIPES]
    started = time.perf_counter()
    with quiet():
        result = compare(model, dataset, recipes, preprocess, workspace=work,
                         run=RunOptions(backend=backend, batch_size=batch, progress=False, parallel=False,
                                        engines=engines))
    seconds = time.perf_counter() - started
    table = result.table
    columns = [c for c in ("top1", "agreement", "consistency", "backend") if c in table.columns]
    return {"images": images, "calibration_images": calibration, "variants": list(table.index), "backend": backend,
            "seconds": seconds, "decode_seconds": decoded, "write_seconds": written,
            "table": table[columns].to_string() if columns else table.to_string(), "ran_on": result.ran_on,
            "engines": None if result.engines is None else repr(result.engines)}


def print_ab(ab: dict) -> None:
    print(f"\nA/B end to end ({ab['backend']}): FP32 + INT8 {', '.join(RECIPES)}; calibration on "
          f"{ab['calibration_images']} images, evaluation on {ab['images']} images — the 26 demo photos flipped and "
          f"shifted, written as PNG (no ImageNet on this machine: the accuracies mean nothing, the time does)")
    print(f"  compare(): {ab['seconds']:.1f} s from the call to the table (decode cache reused; decoding "
          f"{ab['images'] + ab['calibration_images']} PNGs first took {ab['decode_seconds']:.1f} s)")
    print(f"  {ab.get('ran_on', '')}")
    print("  " + ab["table"].replace("\n", "\n  "))
    if ab.get("engines"):
        print("  " + ab["engines"].replace("\n", "\n  "))


# -- calibration vs one forward pass ------------------------------------------------------------------------------
def calibration_vs_forward(model, base, preprocess, images: int, batch: int, device: str, work: Path,
                           cores: int | None = None, repeats: int = 3) -> dict:
    """Seconds of entropy calibration statistics + search vs one FP32 forward pass, same images, same batch. On
    'cpu' each side runs in a child process pinned to `cores` cores (ONNX Runtime with as many threads). The two
    sides alternate `repeats` times (a shared machine's load drifts); the ratio is taken per pair."""
    from bench_backends import replicated_crops

    crops = replicated_crops(base, images)
    path = work / f"calibration-{images}.npy"
    np.save(path, crops)
    (work / "preprocess.json").write_text(json.dumps(preprocess))
    pairs = []
    for _ in range(max(1, repeats)):
        sides = {}
        for side_name in ("forward", "calibration"):
            command = [sys.executable, __file__, "_side", side_name, str(model), str(path),
                       str(work / "preprocess.json"), str(batch), device, str(cores or 0)]
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode:
                raise RuntimeError(f"{side_name} on {device} failed:\n{done.stderr[-3000:]}")
            sides[side_name] = json.loads(done.stdout.strip().splitlines()[-1])
        sides["ratio"] = sides["calibration"]["seconds"] / sides["forward"]["seconds"]
        pairs.append(sides)
    ratios = sorted(pair["ratio"] for pair in pairs)
    median = pairs[[pair["ratio"] for pair in pairs].index(ratios[len(ratios) // 2])]
    return {"device": device, "cores": cores, "images": images, "batch": batch, "pairs": pairs,
            "forward": median["forward"], "calibration": median["calibration"], "ratio": median["ratio"],
            "ratios": ratios}


def _at_rows(c: dict, seconds: float) -> str:
    """The ratio against the warm forward at the calibration's own images per forward, where those differ."""
    if "forward_at_rows" not in c:
        return ""
    return f", {seconds / c['forward_at_rows']:.2f}× one at batch {c['forward_rows']} ({c['forward_at_rows']:.2f} s)"


def print_calibration(result: dict) -> None:
    where = f"ONNX Runtime CPU, {result['cores']} pinned cores" if result["device"] == "cpu" else \
        f"torch {result['device']}"
    c = result["calibration"]
    print(f"calibration N={result['images']} batch {result['batch']} on {where}, {len(result['pairs'])} alternating "
          f"pair(s); the median pair: {c['seconds']:.2f} s (statistics {c['collect_seconds']:.2f} s via {c['how']}, "
          f"entropy search {c['search_seconds']:.2f} s) vs one FP32 forward pass {result['forward']['seconds']:.2f} s "
          f"= {result['ratio']:.2f}× (bar ≤ 2.5× on 2 cores)")
    if len(result["pairs"]) > 1:
        print("  every pair: " + ", ".join(f"{p['calibration']['seconds']:.2f} s / {p['forward']['seconds']:.2f} s = "
                                           f"{p['ratio']:.2f}×" for p in result["pairs"]))


def side(name, model, crops_path, preprocess_path, batch, device, cores) -> dict:
    if device == "cpu" and int(cores):
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[: int(cores)])
    import onnx

    from trtlab.data.dataset import Dataset
    from trtlab.data.decode_cache import DECODED, DecodeCache
    from trtlab.data.preprocess import get_preprocess

    crops = np.load(crops_path, mmap_mode="r")
    spec = get_preprocess(json.loads(Path(preprocess_path).read_text()))
    cache = DecodeCache(Path(crops_path).parent, Dataset("bench", [f"crop{k}" for k in range(len(crops))]), spec,
                        crops, np.full(len(crops), DECODED, np.uint8))
    threads = int(cores) or None
    batch = int(batch)
    start = time.perf_counter()
    if name == "forward":
        _forward(model, cache, spec, batch, device, threads)
        return {"seconds": time.perf_counter() - start}
    from trtlab.quantization.statistics import collect_statistics
    from trtlab.quantization.thresholds import compute_thresholds
    from trtlab.quantization.variants import stats_tensors

    stats = collect_statistics(model, stats_tensors(onnx.load(model)), cache, batch_size=batch, progress=False,
                               threads=threads, device=device)
    collected = time.perf_counter()
    compute_thresholds(stats, "entropy")
    end = time.perf_counter()
    return {"seconds": end - start, "collect_seconds": collected - start, "search_seconds": end - collected,
            "how": f"{stats.device}, {stats.counting}"}


def _forward(model, cache, spec, batch: int, device: str, threads) -> None:
    """One FP32 pass as trtlab's evaluation makes it: normalised batches into ONNX Runtime; uint8 crops into the
    torch backend (normalised on the device)."""
    from trtlab.data.batches import iter_batches

    indices = np.arange(len(cache.crops))
    if device == "cpu":
        from trtlab.backends.ort import OrtRunner

        with OrtRunner(model, providers=["CPUExecutionProvider"], intra_op_threads=threads,
                       graph_optimization="all") as runner:
            for chunk in iter_batches(cache, indices, batch):
                runner.infer(chunk.images)
        return
    from trtlab.backends.gpu.runner import TorchRunner

    with TorchRunner(model, device="cpu" if device == "torch-cpu" else device) as runner:
        for first in range(0, len(indices), batch):
            runner.infer_crops(np.asarray(cache.crops[first:first + batch]), spec)


# -- issue 38: the A/B at the GPU's speed on few cores -----------------------------------------------------------
QUICK = {"images": 5000, "calibration": 256, "throughput_images": 2048, "calibration_images": 512}
SMOKE = {"images": 40, "calibration": 16, "throughput_images": 64, "calibration_images": 16}  # the script, anywhere
FULL = {"images": 50000, "calibration": 512, "throughput_images": 8192, "calibration_images": 1000}
# Datasheets: H200 SXM 4.8 TB/s HBM3e with H100 SXM's compute (67 FP32 TFLOPS; NVIDIA H200 datasheet); T4 320 GB/s,
# 8.1 FP32 TFLOPS (trtlab.graph.gpus). The literal graph's GPU time scales between the two ratios.
T4_BAND = (67.0 / 8.1, 4800.0 / 320.0)


def issue38(args) -> int:
    """The parent: images written with every core, then one child process pinned to `--cpus` cores measures."""
    import json as _json

    from ab_stages import photo_files

    assets = Path(args.assets)
    if not (assets / "manifest.json").exists():
        print(f"no prepared assets in {assets}: run `python bench/bench_backends.py prepare` where the demo packages "
              f"are, and carry .devcarry/")
        return 2
    sizes = dict(SMOKE if args.smoke else QUICK if args.quick else FULL)
    sizes.update({k: v for k, v in (("images", args.images), ("calibration", args.calibration)) if v})
    base = np.load(assets / "crops.npy")
    labels = np.load(assets / "labels.npy") if (assets / "labels.npy").exists() else np.full(len(base), -1)
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-ab38-"))
    allowed = sorted(os.sched_getaffinity(0))
    _, written = photo_files(base, labels, sizes["images"] + sizes["calibration"], work / "photos", len(allowed))
    cores = allowed[: args.cpus] if args.cpus else allowed
    config = {"assets": str(assets), "work": str(work), "gpus": args.gpus, "kill_after": args.kill_after,
              "ab_only": args.ab_only, "profile": args.profile_warm, **sizes}
    child = subprocess.Popen([sys.executable, __file__, "_measure", _json.dumps(config)], stdout=subprocess.PIPE,
                             text=True, preexec_fn=lambda: os.sched_setaffinity(0, cores))
    result = {"written_seconds": written, "cores": len(cores), "host_cores": len(allowed), "sizes": sizes}
    for line in child.stdout:  # each section printed (and saved) as soon as it is measured: a time limit keeps them
        if line.startswith("SECTION "):
            _, name, payload = line.split(" ", 2)
            result[name] = _json.loads(payload)
            print_section(name, result)
            if args.json:
                Path(args.json).write_text(_json.dumps(result, indent=1, default=str))
        else:
            print(line, end="", flush=True)
    if child.wait():
        print(f"the measuring process failed (exit status {child.returncode})")
        return 1
    return 0


def measure(config: dict) -> dict:
    """The child (pinned): warm-up, img/s per variant, calibration vs forward, the A/B cold and warm, 2 GPUs."""
    import torch

    from ab_stages import (GpuSampler, ab_run, calibration, memory_cache, only_decode_cache, stored_logits_equal,
                           throughput, warmup)
    from trtlab.data.dataset import Dataset
    from trtlab.evaluation.evaluate import evaluation_batch_size

    assets, work = Path(config["assets"]), Path(config["work"])
    manifest = json.loads((assets / "manifest.json").read_text())
    base = np.load(assets / "crops.npy")
    model = str(assets / "fp32.onnx")
    sampler = GpuSampler()
    cuda = torch.cuda.is_available()
    out = {}

    def emit(name: str, value) -> None:
        out[name] = value
        print(f"SECTION {name} {json.dumps(value, default=str)}", flush=True)

    emit("machine", {"gpu": torch.cuda.get_device_name(0) if cuda else "no GPU (CPU run: --smoke)",
                     "gpus_visible": torch.cuda.device_count(), "torch": torch.__version__,
                     "cuda": torch.version.cuda, "nvml": sampler.names or sampler.error})
    cache = memory_cache(base, manifest["preprocess"], max(config["throughput_images"], config["calibration_images"]))
    say = lambda text: print(f"[bench] {text}", flush=True)  # noqa: E731
    say("warm-up: the first INT8 variant's one-time cost")
    emit("warmup", warmup(str(assets / "int8-fp16path.onnx"), cache))
    batch = evaluation_batch_size("auto", model, "torch", False)
    variants = {"fp32": model, "int8 (FP16 path, default)": str(assets / "int8-fp16path.onnx"),
                "int8 (FP32 path)": str(assets / "int8.onnx"), "fp16": str(assets / "fp16.onnx")}
    if not config.get("ab_only"):
        say(f"evaluation img/s per variant at batches {batch} and 32")
        emit("throughput", {"auto_batch": batch, "rows": throughput(variants, cache, sorted({batch, 32}, reverse=True),
                                                                    sampler, config["throughput_images"])})
        say("calibration against a warm forward (batch 8)")
        emit("calibration", calibration(model, cache, config["calibration_images"], 8, sampler,
                                        "cuda" if cuda else "torch-cpu"))
    photos = sorted((work / "photos").glob("photo*.jpg"))[: config["images"] + config["calibration"]]
    labels = np.load(assets / "labels.npy") if (assets / "labels.npy").exists() else np.full(len(base), -1)
    dataset = Dataset("bench-ab-jpeg", [str(p) for p in photos],
                      np.asarray([labels[k % len(base)] for k in range(len(photos))], np.int64),
                      root=str(work / "photos"))
    workspace = work / "ws-1"
    if workspace.exists():
        shutil.rmtree(workspace)
    say(f"A/B cold: {len(photos)} JPEG files, no decode cache (decoding overlaps the evaluation: compare()'s default)")
    emit("cold", _guarded(ab_run, model, dataset, workspace, config["calibration"], sampler))
    if not config.get("ab_only"):
        first = _beside(workspace, "ws-decode-first", share_cache=False)
        say("A/B cold, everything decoded first (overlap_decode=False), for comparison")
        emit("cold_decode_first", _guarded(ab_run, model, dataset, first, config["calibration"], sampler,
                                           overlap=False))
        if "store" in out["cold"] and "store" in out["cold_decode_first"]:
            emit("cold_identical", {"identical": stored_logits_equal(out["cold"]["store"],
                                                                     out["cold_decode_first"]["store"],
                                                                     out["cold"]["labels"])})
        shutil.rmtree(first)
    only_decode_cache(workspace)
    say("A/B warm: the decode cache present, nothing else")
    emit("warm", _guarded(ab_run, model, dataset, workspace, config["calibration"], sampler))
    if config.get("profile"):  # the warm A/B again under cProfile (slower: its times are not the figures above)
        import cProfile

        only_decode_cache(workspace)
        say(f"A/B warm again under cProfile → {config['profile']}")
        profiler = cProfile.Profile()
        profiler.enable()
        _guarded(ab_run, model, dataset, workspace, config["calibration"], sampler)
        profiler.disable()
        profiler.dump_stats(config["profile"])
    if config["gpus"] >= 2 and torch.cuda.device_count() >= 2:
        one = ab_run(model, dataset, _beside(workspace, "ws-one-gpu"), config["calibration"], sampler, False)
        two = out["warm"] if out["warm"]["ran_on"].startswith("ran on 2") else \
            ab_run(model, dataset, _beside(workspace, "ws-two-gpus"), config["calibration"], sampler, "auto")
        say(f"two GPUs with one worker killed {config['kill_after']} s after the workers start")
        failed = ab_run(model, dataset, _beside(workspace, "ws-killed"), config["calibration"], sampler, "auto",
                        on_worker=lambda pids: _kill_later(pids[-1], config["kill_after"]))
        emit("two_gpus", {"one_gpu": one, "two_gpus": two, "killed": failed,
                          "identical": stored_logits_equal(one["store"], two["store"], one["labels"]),
                          "identical_after_kill": stored_logits_equal(one["store"], failed["store"], one["labels"])})
    sampler.stop()
    return out


def _guarded(run, *args, **kwargs) -> dict:
    """One A/B run; a failure is recorded as the section's error (with its traceback printed) so the sections after
    it are still measured within the device call's time limit."""
    import traceback

    try:
        return run(*args, **kwargs)
    except Exception as error:  # noqa: BLE001 — a bench section, reported, not hidden
        traceback.print_exc()
        return {"error": f"{type(error).__name__}: {error}"}


def _beside(workspace: Path, name: str, share_cache: bool = True) -> Path:
    """A fresh workspace next to `workspace` sharing its decode cache (a symbolic link; `share_cache=False`: none)."""
    other = workspace.parent / name
    if other.exists():
        shutil.rmtree(other)
    other.mkdir()
    if share_cache:
        (other / "decode_cache").symlink_to(workspace / "decode_cache")
    return other


def _kill_later(pid: int, seconds: float) -> None:
    import signal

    time.sleep(seconds)
    try:
        os.kill(pid, signal.SIGKILL)  # a worker this process started (ab_stages.worker_pids)
    except ProcessLookupError:
        pass


def print_section(name: str, r: dict) -> None:
    """Print section `name` of the result `r` (the sections measured so far)."""
    sizes = r["sizes"]
    if name == "machine":
        m = r["machine"]
        print(f"\n== issue 38 bench: {m['gpus_visible']}× {m['gpu']} (torch {m['torch']}, CUDA {m['cuda']}); the "
              f"measuring process pinned to {r['cores']} of {r['host_cores']} cores ==")
        print(f"images: {sizes['images'] + sizes['calibration']:,} JPEG files of 500×375 made from the 26 demo "
              f"photos' crops (flipped, shifted, upscaled; written in {r['written_seconds']:.0f} s, not timed) — no "
              f"ImageNet on this machine: accuracies mean nothing, times and agreement do")
    elif name == "warmup":
        w = r["warmup"]
        print(f"one-time cost, paid before timing: the first INT8 runner and batch {w['first']:.2f} s, "
              f"again {w['again']:.2f} s")
    elif name == "throughput":
        _print_throughput(r["throughput"])
    elif name == "calibration":
        c = r["calibration"]
        for how in ("streamed", "loop"):
            print(f"calibration ({how}) N={c['images']} batch {c['batch']}: {c[how]['seconds']:.2f} s = "
                  f"{c[how]['seconds'] / c['forward']:.2f}× a warm forward at batch {c['batch']} "
                  f"({c['forward']:.2f} s)" + _at_rows(c, c[how]['seconds']) + f", GPU busy "
                  f"{_busy(c[how]['gpu_busy'])} ({c[how]['how']})")
    elif name in ("cold", "warm", "cold_decode_first"):
        if name == "cold":
            print(f"\nA/B through compare() with its defaults: FP32 + INT8 {', '.join(RECIPES)}, "
                  f"{sizes['calibration']} calibration + {sizes['images']:,} evaluation images")
        if "error" in r[name]:
            print(f"  {name}: FAILED — {r[name]['error']}")
            return
        _print_ab(name, r[name])
        if name == "warm" and "seconds" in r.get("cold", {}):
            _print_estimate(r)
    elif name == "cold_identical":
        print(f"        cold with and without the overlap: stored logits identical: {r[name]['identical']}")
    elif name == "two_gpus":
        t = r["two_gpus"]
        print(f"\ntwo GPUs (one process each): {t['two_gpus']['seconds']:.1f} s against one GPU "
              f"{t['one_gpu']['seconds']:.1f} s ({t['two_gpus']['ran_on']}); stored results identical: "
              f"{t['identical']}")
        lines = [w for w in t["killed"]["warnings"] if "evaluation worker" in w]
        print(f"  one worker killed: {t['killed']['seconds']:.1f} s, stored results identical: "
              f"{t['identical_after_kill']}; said: {lines[0] if lines else '(nothing)'}")


def _print_throughput(section: dict) -> None:
    rows = section["rows"]
    print(f"\nevaluation img/s per variant (the evaluation loop from memory; default batch 'auto' = "
          f"{section['auto_batch']}):")
    print(f"{'variant':>28} {'batch':>5} {'graph+1-kernel Q/DQ':>20} {'eager+1-kernel':>15} {'eager+plain':>12} "
          f"{'GPU busy':>9} {'CPU s/s':>8}  bit-identical")
    for key in dict.fromkeys((x["variant"], x["batch"]) for x in rows):
        modes = [x for x in rows if (x["variant"], x["batch"]) == key]
        rate = {(x["capture"], x["fused_qdq"]): x for x in modes}
        best = rate[True, True]
        print(f"{key[0]:>28} {key[1]:>5} {best['img_s']:>20,.0f} {rate[False, True]['img_s']:>15,.0f} "
              f"{rate[False, False]['img_s']:>12,.0f} {_busy(best['gpu_busy']):>9} {best['cpu_per_s']:>8.2f}  "
              f"{all(x['identical'] for x in modes)}")
    best = [x for x in rows if x["capture"]]
    print(f"  how: {best[0]['execution']}; Q/DQ on CUDA: {best[-1]['quantize_kernel'] or 'n/a'}")


def _busy(values) -> str:
    return "/".join(f"{v:.0f}%" for v in values) if values else "n/a"


def _print_ab(name: str, ab: dict) -> None:
    stages = {}
    for row in ab["stages"]:
        stages.setdefault(row["stage"], 0.0)
        stages[row["stage"]] += row["seconds"]
    other = ab["seconds"] - sum(stages.values())  # the stages do not nest: the rest of compare()
    decode = ab["decode"]
    rate = f"{decode['decoded_this_run'] / decode['seconds']:.0f} img/s, {decode['decoded_this_run'] / decode['seconds'] / max(1, decode['workers']):.0f} per worker × {decode['workers']}" \
        if decode.get("decoded_this_run") and decode.get("seconds") else "nothing to decode"
    e = ab["evaluation"]
    print(f"  {name:>4} ({ab.get('overlap', '?')}): {ab['seconds']:.1f} s  | " + " | ".join(f"{k} {v:.1f} s" for k, v in stages.items()) +
          f" | other {other:.1f} s")
    print(f"        decode: {rate}; evaluation: GPU busy {_busy(e['gpu_busy'])}, user CPU "
          f"{e['cpu_per_s'] if e['cpu_per_s'] is None else round(e['cpu_per_s'], 2)} core-s per s; {ab['ran_on']}")
    for row in ab["stages"]:
        if row["stage"] in ("evaluate", "calibrate+build", "evaluate+decode", "decode"):
            print(f"          {row['stage']} {row['label']}: {row['seconds']:.2f} s, GPU busy {_busy(row['gpu_busy'])},"
                  f" CPU {row['cpu']:.1f} s")


def _print_estimate(r: dict) -> None:
    """Kaggle T4 ×2 from these measurements: GPU stages scaled by the datasheet band, evaluation over two GPUs,
    decoding as measured on these pinned cores (an estimate, printed as one)."""
    cold, warm = r["cold"], r["warm"]
    gpu = sum(x["seconds"] for x in warm["stages"] if x["stage"] in ("calibrate+build", "evaluate"))
    evaluate = sum(x["seconds"] for x in warm["stages"] if x["stage"] == "evaluate")
    calibrate = gpu - evaluate
    rest = warm["seconds"] - gpu - sum(x["seconds"] for x in warm["stages"] if x["stage"] == "decode")
    decode = r.get("cold_decode_first", cold)["decode"].get("seconds") or 0.0  # every image, decoded first
    low, high = (calibrate * k + evaluate * k / 2 + rest for k in T4_BAND)
    print(f"\nESTIMATE for Kaggle T4 ×2 (not measured): warm {low:.0f}–{high:.0f} s, cold {low + decode:.0f}–"
          f"{high + decode:.0f} s — calibration and evaluation GPU time × {T4_BAND[0]:.1f}–{T4_BAND[1]:.1f} (H200/T4 "
          f"FP32 and bandwidth datasheet ratios), evaluation split over two GPUs, decoding as measured here on "
          f"{r['cores']} cores ({decode:.0f} s), the rest as here — decode first; with the overlap (default) the "
          f"cold A/B here took {cold['seconds']:.0f} s against {r.get('cold_decode_first', cold)['seconds']:.0f} s")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "_side":
        print(json.dumps(side(*argv[1:])))
        return 0
    if argv and argv[0] == "_measure":
        measure(json.loads(argv[1]))
        return 0
    if argv and argv[0] == "calibration":
        return calibration_bar(argv[1:])
    parser = argparse.ArgumentParser(description="Issue 38: the A/B at the GPU's speed on few cores — per-stage "
                                                 "seconds, img/s per variant (captured and eager), GPU busy, user CPU")
    parser.add_argument("--assets", default=str(ROOT / ".devcarry" / "bench_backends"))
    parser.add_argument("--quick", action="store_true", help=f"smaller: {QUICK}")
    parser.add_argument("--cpus", type=int, default=4, help="cores the measuring process is pinned to (0: all)")
    parser.add_argument("--gpus", type=int, default=1, help="2: also one GPU against two, and a worker killed")
    parser.add_argument("--images", type=int, default=0, help="evaluation images (default: 50,000; --quick 5,000)")
    parser.add_argument("--calibration", type=int, default=0, help="calibration images (default 512; --quick 256)")
    parser.add_argument("--smoke", action="store_true", help="a few images: tries the script (no GPU needed)")
    parser.add_argument("--kill-after", type=float, default=3.0, help="--gpus 2: seconds before a worker is killed")
    parser.add_argument("--work", default=None, help="folder for the images and workspaces (default: a new temp)")
    parser.add_argument("--json", default=None)
    parser.add_argument("--ab-only", action="store_true",
                        help="only the A/B: no img/s table, no calibration timing, no decode-first comparison")
    parser.add_argument("--profile-warm", default=None, help="FILE: the warm A/B once more under cProfile, saved there")
    return issue38(parser.parse_args(argv))


def calibration_bar(argv) -> int:
    """The earlier bench: calibration against one forward pass on the CPU (pinned cores) or the GPU, and the A/B."""
    from bench_backends import DEFAULT_ASSETS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--assets", default=str(DEFAULT_ASSETS))
    parser.add_argument("--device", default="cuda", help="cuda (the torch backend) or cpu (ONNX Runtime)")
    parser.add_argument("--cores", type=int, default=2, help="with --device cpu: pinned cores")
    parser.add_argument("--ab-images", type=int, default=5000, help="0: no A/B")
    parser.add_argument("--ab-calibration", type=int, default=512)
    parser.add_argument("--ab-batch", type=int, default=256)
    parser.add_argument("--calibration-images", type=int, default=1000, help="0: no calibration timing")
    parser.add_argument("--calibration-batch", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3, help="alternating forward/calibration pairs")
    parser.add_argument("--engines", action="store_true", help="the A/B with its TensorRT engine column (timed in)")
    args = parser.parse_args(argv)
    assets = Path(args.assets)
    manifest = json.loads((assets / "manifest.json").read_text())
    base = np.load(assets / "crops.npy")
    labels = np.load(assets / "labels.npy") if (assets / "labels.npy").exists() else np.full(len(base), -1)
    work = Path(tempfile.mkdtemp(prefix="bench-ab-"))
    model = str(assets / "fp32.onnx")
    if args.calibration_images:
        print_calibration(calibration_vs_forward(model, base, manifest["preprocess"], args.calibration_images,
                                                 args.calibration_batch, args.device, work, args.cores,
                                                 args.repeats))
    if args.ab_images:
        backend = "ort" if args.device == "cpu" else "torch"
        print_ab(ab_end_to_end(model, base, labels, manifest["preprocess"], args.ab_images, args.ab_calibration,
                               backend, args.ab_batch, work, engines=args.engines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
