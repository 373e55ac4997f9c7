"""How many calibration images are enough: for each algorithm, how much its thresholds and the INT8 variant's output
fidelity move with the calibration set, against calibration size.

One statistics pass per calibration image (trtlab's cached `calibration_statistics`, one image each, so a rerun reads
them back), then for each size n and each of K bootstrap resamples (n images drawn with replacement from the pool:
the pool stands in for the images a user could have calibrated on, and with replacement the spread at n = pool
size is not zero by construction) the per-image histograms are merged (`merge_histograms`, the merge the Concat
groups use: the widest bin width, each bin moved to the bin holding its centre) and each algorithm's thresholds
computed from the merge — no model run per subset. Threshold spread: per quantized tensor, the coefficient of
variation of its threshold over the resamples; the median over tensors, and the 90th percentile (on a ReLU6
network most tensors' range is 6 in every image, so the median tensor never moves: the tenth that move most decide
whether calibration has settled). Output fidelity: the INT8 variant built in
memory with each resample's scales (the recipe's placement and float path, as build_variant makes it), its mean
logit cosine with FP32 on a few evaluation images, for the first few resamples.

An algorithm's thresholds "settle" at the smallest size from which 9 in 10 quantized tensors' spread stays within
`tolerance` (5 %: the scale of an INT8 step moves by 5 %, a shift of about 6 codes at the top of the range). Where
none of the sizes the pool allows settles, the spread's power-law fit over the sizes (spread ≈ a·n^b; 1/√n for a
mean) says roughly how many images would.

Calibration batch and image order (`batch_order`): a real calibration streams its images, and the first calibration
batch sets every histogram's range (trtlab.quantization.statistics, as TensorRT's entropy calibrator does), so the
same images give other entropy and percentile thresholds with another batch or another order. The whole pool is
calibrated in `orders` orders (its own, then shuffles) at calibration batches 1, the recipe's and the whole pool (one
batch of every image: the order cannot matter), one statistics pass each (cached); per batch, the thresholds' spread
across the orders, and their distance from the one-batch thresholds.
"""
from __future__ import annotations

import contextlib
import logging
import math
from dataclasses import dataclass, field

import numpy as np

log = logging.getLogger(__name__)

ALGORITHMS = ("minmax", "entropy", "percentile")
TOLERANCE = 0.05


@dataclass
class CalibrationSizeStudy:
    """Threshold spread and output fidelity against calibration size, per algorithm."""

    table: object  # pandas DataFrame, one row per (algorithm, size): spread, drift, cosine (mean, low, high)
    resamples: object  # pandas DataFrame, one row per (algorithm, size, resample) with fidelity: cosine
    pool: int  # calibration images the resamples draw from
    evaluation_images: int
    tolerance: float
    model: str = ""
    pool_ids: list = field(default_factory=list)
    batch_order: object = None  # pandas DataFrame, one row per (algorithm, calibration batch): spread over orders

    @property
    def algorithms(self) -> list[str]:
        return list(dict.fromkeys(self.table["algorithm"]))

    def settled(self, algorithm: str) -> int | None:
        """The smallest size from which 9 in 10 tensors' threshold spread stays within the tolerance (None: none)."""
        rows = self.table[self.table["algorithm"] == algorithm].sort_values("size")
        within = list(rows["threshold_spread_p90"] <= self.tolerance)
        for i, size in enumerate(rows["size"]):
            if all(within[i:]):
                return int(size)
        return None

    def needed(self, algorithm: str) -> int | None:
        """Images the power-law fit of the spread over sizes ≥ 2 says would bring it within the tolerance (None:
        the spread does not shrink with size here)."""
        rows = self.table[(self.table["algorithm"] == algorithm) & (self.table["size"] >= 2)]
        rows = rows[rows["threshold_spread_p90"] > 0]
        if len(rows) < 2:
            return None
        slope, intercept = np.polyfit(np.log(rows["size"]), np.log(rows["threshold_spread_p90"]), 1)
        if slope >= -0.05:
            return None
        return int(math.ceil(math.exp((math.log(self.tolerance) - intercept) / slope)))

    def sentences(self) -> list[str]:
        """One sentence per algorithm."""
        out = []
        for algorithm in self.algorithms:
            rows = self.table[self.table["algorithm"] == algorithm].sort_values("size")
            last = rows.iloc[-1]
            settled = self.settled(algorithm)
            cosine = (f"; logit cosine with FP32 {last['cosine_mean']:.3f} (resamples {last['cosine_low']:.3f}–"
                      f"{last['cosine_high']:.3f}) at {int(last['size'])}" if not math.isnan(last["cosine_mean"])
                      else "")
            if settled is not None:
                spread = rows[rows["size"] == settled]["threshold_spread_p90"].iloc[0]
                text = (f"{algorithm}'s thresholds settle by about {settled} image{'s' * (settled != 1)} on this model "
                        f"(9 in 10 tensors' thresholds vary by ≤ {100 * spread:.1f} % between resampled calibration "
                        f"sets)")
            else:
                needed = self.needed(algorithm)
                more = (f"; about {needed:,} would, by a power-law fit of the spread over sizes" if needed else
                        "; the spread does not shrink with size here, so more images alone may not settle them")
                text = (f"{algorithm}'s thresholds have not settled by {self.pool} images, the whole pool (the "
                        f"tenth of tensors that move most still vary by {100 * last['threshold_spread_p90']:.1f} % > "
                        f"{100 * self.tolerance:g} %){more}")
            out.append(text + cosine + ".")
        return out

    def sentence(self) -> str:
        """The answer in one sentence: which algorithms' thresholds settle by about how many images, how many
        more the others would need, and how much the output fidelity moves."""
        settled = {a: self.settled(a) for a in self.algorithms}
        parts = [f"{a}'s thresholds settle by about {n} image{'s' * (n != 1)}" for a, n in settled.items()
                 if n is not None]
        open_ = [a for a, n in settled.items() if n is None]
        if open_:
            needed = [(a, self.needed(a)) for a in open_]
            estimate = ", ".join(f"{a} about {n:,}" if n else f"{a} not by size alone" for a, n in needed)
            owners = f"{open_[0]}'s thresholds have" if len(open_) == 1 else \
                f"the thresholds of {_listed(open_)} have"
            parts.append(f"{owners} not settled within the {self.pool}-image pool (images that would, by a "
                         f"power-law fit of the spread over sizes: {estimate})")
        text = f"On this model, {'; '.join(parts)}"
        last = self.table[self.table["size"] == self.table["size"].max()]
        if not last["cosine_mean"].isna().all():
            widths = last["cosine_high"] - last["cosine_low"]
            text += (f"; the logit cosine with FP32 moves by at most {widths.max():.4f} between resamples at "
                     f"{self.pool} images (" + ", ".join(f"{a} {c:.3f}" for a, c in zip(last["algorithm"],
                                                                                     last["cosine_mean"])) + ")")
        return text + "."

    def summary(self) -> str:
        text = (self.sentence() + f" (Thresholds of {self.pool} pool images resampled "
                f"{int(self.table['resamples'].max())}× with replacement per size; settled: 9 in 10 quantized tensors "
                f"vary by ≤ {100 * self.tolerance:g} %; fidelity on {self.evaluation_images} evaluation images.)")
        batch_order = self.batch_order_sentence()
        return f"{text} {batch_order}" if batch_order else text

    def batch_order_sentence(self) -> str:
        """One sentence: how much the calibration batch and the image order move the thresholds ('' when not
        measured)."""
        table = self.batch_order
        if table is None or not len(table):
            return ""
        batches = sorted(int(b) for b in table["calibration_batch"].unique())

        def spreads(algorithm):
            rows = table[table["algorithm"] == algorithm].set_index("calibration_batch")
            return ", ".join(f"{100 * rows.loc[b, 'order_spread_p90']:.1f} % at batch {b}" for b in batches)

        orders = int(table["orders"].max())
        parts = "; ".join(f"{a} {spreads(a)}" for a in dict.fromkeys(table["algorithm"]))
        return (f"Calibration batch and image order (the first calibration batch sets every histogram's range, as in "
                f"TensorRT's entropy calibrator): the same {self.pool} images calibrated in {orders} orders give "
                f"thresholds that vary, for 9 in 10 tensors, by ≤ {parts}; at batch {batches[-1]} every image is in "
                f"the first batch, so the order cannot matter.")

    def plot(self):
        from trtlab.views.calibration_size import plot_calibration_size

        return plot_calibration_size(self)

    def show(self) -> None:
        from trtlab.views.calibration_size import show_calibration_size

        show_calibration_size(self)

    def _repr_markdown_(self) -> str:
        return self.summary()


def _listed(names: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + f" and {names[-1]}"


def default_sizes(pool: int) -> list[int]:
    """1, 2, 4, … up to the pool, and the pool itself."""
    sizes, n = [], 1
    while n < pool:
        sizes.append(n)
        n *= 2
    return sizes + [pool]


def calibration_size_study(model, data, split=None, recipe=None, algorithms=ALGORITHMS, sizes=None,
                           resamples: int = 8, fidelity_resamples: int = 2, evaluation_images: int = 4,
                           pool_images: int = 32, tolerance: float = TOLERANCE, seed: int = 0, workspace=None,
                           preprocess="tf-lite", progress: bool = True, orders: int = 3) -> CalibrationSizeStudy:
    """Threshold stability and output fidelity against calibration size for each algorithm (module docstring).

    model: the ONNX classifier; data: a Dataset (or what `trtlab.prepared_data()` returns, with its split);
    split: the calibration/evaluation split (default: the data's own, else the saved split); recipe: placement,
    float path and percentile to study (its algorithm is replaced by each of `algorithms`); the pool is the first
    `pool_images` images the recipe would calibrate on. `resamples` per size for the thresholds, the first
    `fidelity_resamples` of them also for the logits (0: thresholds only) on the first `evaluation_images`
    evaluation images. `orders`: image orders of the whole pool for the calibration batch and order part (module
    docstring; 0 leaves it out, else at least 2)."""
    from trtlab.core.errors import UserValueError

    if orders == 1 or orders < 0:
        raise UserValueError(f"orders={orders}", "use orders ≥ 2 (a spread over orders needs two) or 0 to skip it")
    if resamples < 2 or fidelity_resamples < 0 or evaluation_images < 1 or pool_images < 1:
        raise UserValueError(f"resamples={resamples}, fidelity_resamples={fidelity_resamples}, evaluation_images="
                             f"{evaluation_images}, pool_images={pool_images}",
                             "use resamples ≥ 2 (a spread needs two), fidelity_resamples ≥ 0, "
                             "evaluation_images ≥ 1 and pool_images ≥ 1")
    unknown = [a for a in algorithms if a not in ALGORITHMS]
    if unknown:
        raise UserValueError(f"algorithms {unknown} cannot be studied", f"choose from {', '.join(ALGORITHMS)}")
    if not 0 < tolerance < 1:
        raise UserValueError(f"tolerance={tolerance}", "give a relative spread in (0, 1), e.g. 0.05")
    setting = _Setting(model, data, split, recipe, pool_images, evaluation_images, workspace, progress, preprocess)
    sizes = sorted({int(s) for s in (sizes or default_sizes(len(setting.pool)))})
    log.info(f"calibration size: {len(setting.pool)} pool images, sizes {sizes}, {resamples} resamples each; "
             f"per-image statistics are cached, so a rerun only recomputes thresholds and fidelity")
    if sizes[0] < 1 or sizes[-1] > len(setting.pool):
        raise UserValueError(f"sizes {sizes} for a pool of {len(setting.pool)} calibration images",
                             f"give sizes from 1 to {len(setting.pool)} (or more pool_images / a larger split)")
    with _quiet("trtlab.quantization"):  # one line per image and per resample would bury the answer
        study = _study(setting, algorithms, sizes, resamples, fidelity_resamples, tolerance, seed)
        if orders:
            study.batch_order = _batch_order(setting, algorithms, orders, seed)
    return study


def _batch_order(setting, algorithms, orders: int, seed: int):
    """The pool streamed in `orders` orders at calibration batches 1, the recipe's and the whole pool: per algorithm
    and batch, the thresholds' spread over the orders and their distance from the whole-pool batch's."""
    import pandas as pd

    pool = np.asarray(setting.pool, np.int64)
    rng = np.random.default_rng(seed + 1)
    permutations = [pool] + [rng.permutation(pool) for _ in range(orders - 1)]
    batches = sorted({1, min(setting.recipe.calibration_batch, len(pool)), len(pool)})
    bar = setting.bar(len(batches) * orders, "calibration size: batch and order", "pass")
    thresholds = {}
    for batch in batches:
        for k, order in enumerate(permutations):
            stats = setting.streamed_statistics(order, batch)
            for algorithm in algorithms:
                thresholds[algorithm, batch, k] = setting.thresholds_of(stats, algorithm)
            bar.update(1)
    bar.close()
    rows = []
    for algorithm in algorithms:
        whole = thresholds[algorithm, len(pool), 0]
        for batch in batches:
            spread = _spread([thresholds[algorithm, batch, k] for k in range(orders)], whole, setting.tensors)
            rows.append({"algorithm": algorithm, "calibration_batch": batch, "orders": orders,
                         "order_spread": spread["threshold_spread"], "order_spread_p90": spread["threshold_spread_p90"],
                         "from_one_batch_p90": spread["threshold_drift_p90"]})
    return pd.DataFrame(rows)


def _study(setting, algorithms, sizes, resamples, fidelity_resamples, tolerance, seed) -> CalibrationSizeStudy:
    per_image = setting.per_image_statistics()
    rng = np.random.default_rng(seed)
    draws = {n: [rng.integers(0, len(per_image), n) for _ in range(resamples)] for n in sizes}
    rows, fidelity_rows = [], []
    total = len(algorithms) * len(sizes) * min(fidelity_resamples, resamples)
    bar = setting.bar(total, "calibration size: fidelity", "variant") if total else None
    measured = {}
    for algorithm in algorithms:
        for n in sizes:
            thresholds = [setting.thresholds(per_image, draw, algorithm) for draw in draws[n]]
            cosines = []
            for r, draw_thresholds in enumerate(thresholds[:fidelity_resamples]):
                key = tuple(draw_thresholds[t] for t in setting.tensors)  # equal thresholds: the same variant
                if key not in measured:
                    measured[key] = setting.cosine(draw_thresholds)
                cosines.append(measured[key])
                fidelity_rows.append({"algorithm": algorithm, "size": n, "resample": r, "cosine_mean": cosines[-1]})
                bar.update(1)
            rows.append({"algorithm": algorithm, "size": n, "resamples": resamples,
                         **_spread(thresholds, setting.reference(per_image, algorithm), setting.tensors),
                         **_fidelity(cosines)})
    if bar is not None:
        bar.close()
    import pandas as pd

    return CalibrationSizeStudy(pd.DataFrame(rows), pd.DataFrame(fidelity_rows), len(setting.pool),
                                len(setting.evaluation) if fidelity_resamples else 0, float(tolerance),
                                setting.model_name, setting.pool_ids)


@contextlib.contextmanager
def _quiet(logger_name: str):
    """INFO of `logger_name` off for the block (warnings still show)."""
    logger = logging.getLogger(logger_name)
    level = logger.level
    logger.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        logger.setLevel(level)


def _spread(thresholds: list[dict], reference: dict, tensors: list[str]) -> dict:
    """Median and 90th percentile over tensors of the thresholds' coefficient of variation over resamples, and the
    90th percentile of their median relative distance from the whole pool's threshold."""
    values = np.array([[t[name] for name in tensors] for t in thresholds], np.float64)  # resamples × tensors
    mean = values.mean(axis=0)
    live = mean > 0  # an all-zero tensor has no threshold to move
    cv = values[:, live].std(axis=0, ddof=1) / mean[live]
    ref = np.array([reference[name] for name in tensors], np.float64)[live]
    drift = np.median(np.abs(values[:, live] - ref) / np.where(ref > 0, ref, 1.0), axis=0)  # per tensor
    return {"threshold_spread": float(np.median(cv)) if cv.size else 0.0,
            "threshold_spread_p90": float(np.percentile(cv, 90)) if cv.size else 0.0,
            "threshold_drift_p90": float(np.percentile(drift, 90)) if drift.size else 0.0}


def _fidelity(cosines: list[float]) -> dict:
    if not cosines:
        return {"cosine_mean": math.nan, "cosine_low": math.nan, "cosine_high": math.nan}
    return {"cosine_mean": float(np.mean(cosines)), "cosine_low": float(np.min(cosines)),
            "cosine_high": float(np.max(cosines))}


class _Setting:
    """The model, images and recipe a study works on, and the three things it does with them: per-image
    statistics, thresholds of a resample, the logit cosine of the variant those thresholds make."""

    def __init__(self, model, data, split, recipe, pool_images: int, evaluation_images: int, workspace,
                 progress: bool, preprocess="tf-lite"):
        import onnx

        from trtlab.data.decode_cache import build_decode_cache
        from trtlab.data.preprocess import get_preprocess
        from trtlab.graph.classifier_view import preprocess_for
        from trtlab.graph.sanitize import sanitize_model
        from trtlab.quantization.placement import plan_for_recipe
        from trtlab.quantization.recipe import Recipe, select_calibration_indices
        from trtlab.workflows.checks import check_model
        from trtlab.workflows.compare import default_calibration_pool, saved_split

        dataset = getattr(data, "dataset", data)  # prepared_data() gives (dataset, split) with attributes
        split = split or getattr(data, "split", None)
        self.recipe = Recipe.of(recipe or Recipe())
        self.workspace, self.progress, self.model_path = workspace, progress, model
        self.model_name = str(getattr(model, "name", model))
        spec = preprocess_for(check_model(model), get_preprocess(preprocess))
        self.cache = build_decode_cache(dataset, spec, workspace, progress=progress)
        split = split or saved_split(dataset, default_calibration_pool(dataset), workspace=workspace)
        _, calibration = select_calibration_indices(self.cache, split.calibration, self.recipe)
        self.pool = calibration[:pool_images]
        ids = dataset.image_ids()
        self.pool_ids = [ids[i] for i in self.pool]
        evaluation = np.asarray(split.evaluation, np.int64)
        self.evaluation = evaluation[np.isin(evaluation, self.cache.valid_indices)][:evaluation_images]
        self.source = sanitize_model(model, workspace)
        self.fp32 = onnx.load(str(self.source))
        self.plan = plan_for_recipe(self.fp32, self.recipe)  # as build_variant plans
        self.tensors = list(self.plan.activations)
        self._references, self._fp32_logits = {}, None

    def bar(self, total: int, desc: str, unit: str):
        from trtlab.core.progress import progress_bar

        return progress_bar(total=total, desc=desc, unit=unit, enabled=self.progress)

    def per_image_statistics(self) -> list:
        """One CalibrationStats per pool image (trtlab's statistics cache: a rerun reads them back)."""
        from trtlab.quantization.variants import calibration_statistics

        bar = self.bar(len(self.pool), "calibration size: per-image statistics", "img")
        out = []
        for index in self.pool:
            out.append(calibration_statistics(self.source, self.cache, [int(index)], 1, self.workspace,
                                              progress=False))
            bar.update(1)
        bar.close()
        return out

    def streamed_statistics(self, order, batch: int):
        """The pool's statistics as build_variant collects them: one stream in this order at this calibration batch
        (trtlab's statistics cache: a rerun reads them back)."""
        from trtlab.quantization.variants import calibration_statistics

        return calibration_statistics(self.source, self.cache, order, batch, self.workspace, progress=False)

    def thresholds(self, per_image: list, draw, algorithm: str) -> dict[str, float]:
        """Thresholds of the quantized tensors from the merged histograms of the drawn images (with repeats)."""
        from trtlab.quantization.statistics import CalibrationStats
        from trtlab.quantization.variants import merge_histograms

        first = per_image[0]
        names = first.tensors if self.plan.shared_scales else self.tensors  # Concat groups: every tensor
        merged = CalibrationStats({name: merge_histograms([per_image[i].tensors[name] for i in draw])
                                   for name in names}, len(draw), first.model_sha256, first.preprocess)
        return self.thresholds_of(merged, algorithm)

    def thresholds_of(self, stats, algorithm: str) -> dict[str, float]:
        """Thresholds of the quantized tensors from `stats`, Concat groups sharing one, as build_variant sets them."""
        from trtlab.quantization.statistics import CalibrationStats
        from trtlab.quantization.thresholds import compute_thresholds
        from trtlab.quantization.variants import joint_thresholds

        quantized = CalibrationStats({name: stats.tensors[name] for name in self.tensors}, stats.images,
                                     stats.model_sha256, stats.preprocess)
        thresholds = compute_thresholds(quantized, algorithm, self.recipe.percentile)
        if self.plan.shared_scales:  # Concat groups share one scale, as build_variant makes them
            thresholds.update(joint_thresholds(stats, self.plan, algorithm, self.recipe.percentile, thresholds))
        return thresholds

    def reference(self, per_image: list, algorithm: str) -> dict[str, float]:
        """The whole pool's thresholds (each image once)."""
        if algorithm not in self._references:
            self._references[algorithm] = self.thresholds(per_image, range(len(per_image)), algorithm)
        return self._references[algorithm]

    def logits(self, session) -> np.ndarray:
        from trtlab.data.batches import iter_batches

        name_in, name_out = session.get_inputs()[0].name, session.get_outputs()[0].name
        return np.concatenate([session.run([name_out], {name_in: batch.images})[0]
                               for batch in iter_batches(self.cache, self.evaluation, 8)])

    def cosine(self, thresholds: dict[str, float]) -> float:
        """Mean per-image logit cosine with FP32 of the INT8 variant these thresholds make (built in memory as
        build_variant builds it, run literally: graph optimizations off)."""
        from trtlab.core.ort_session import ort_session
        from trtlab.quantization.insertion import quantize_graph
        from trtlab.quantization.thresholds import scales_from_thresholds

        if self._fp32_logits is None:
            self._fp32_logits = self.logits(ort_session(self.fp32, optimization="disable")).astype(np.float64)
        scales = scales_from_thresholds({t: thresholds[t] for t in self.tensors})
        model = quantize_graph(self.fp32, self.plan, scales, self.recipe.high_precision, check=False).model
        test = self.logits(ort_session(model, optimization="disable")).astype(np.float64)
        ref = self._fp32_logits
        dots = (ref * test).sum(axis=1)
        norms = np.sqrt((ref * ref).sum(axis=1) * (test * test).sum(axis=1))
        return float(np.mean(np.where(norms > 0, dots / np.where(norms > 0, norms, 1.0), 0.0)))
