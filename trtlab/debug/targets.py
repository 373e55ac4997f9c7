"""What a guard search must reach: bounds on how closely the INT8 variant's logits follow FP32's, each one of
top-1 agreement, mean logit cosine, logit SQNR or mean softmax KL; every bound given must hold.

Top-1 agreement alone is blind on a notebook's handful of photos: a variant whose logits have cosine 0.83 with FP32
(one layer's scale broken) still agrees on 8 of 10 top-1s, and a clean entropy calibration (cosine 0.98) on all of
them. Polygraphy's `debug precision` judges each candidate by an output tolerance for the same reason (its `--check`
compares outputs with `--atol/--rtol`). The default, mean logit cosine ≥ 0.99, is about 17 dB of logit SQNR
(noise orthogonal to the logits: cos = 1/√(1 + 1/SQNR)); on EfficientNet-Lite0 and the bundled photos minmax and
percentile calibrations reach it unguarded (0.995) and entropy does not (0.982), so it separates what top-1 cannot
while asking nothing of a sound recipe.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

DEFAULT_TARGET = "cosine=0.99"


@dataclass(frozen=True)
class Metric:
    key: str  # the key in the metrics dicts (ErrorSums.metrics, verification)
    label: str
    higher_is_better: bool
    low: float  # bounds allowed: (low, high]
    high: float

    def text(self, value: float) -> str:
        if value is None or not math.isfinite(value):
            return "—" if value is None or math.isnan(value) else ("exact" if value > 0 else "−∞")
        if self.key == "top1_agreement":
            return f"{100 * value:.1f}%"
        if self.key == "sqnr_db":
            return f"{value:.1f} dB"
        return f"{value:.4f}"  # logit cosine, softmax KL

    def bound_text(self, bound: float) -> str:
        if self.key == "top1_agreement":
            return f"{100 * bound:g}%"
        return f"{bound:g} dB" if self.key == "sqnr_db" else f"{bound:g}"


METRICS = {
    "top1": Metric("top1_agreement", "top-1 agreement", True, 0.0, 1.0),
    "cosine": Metric("cosine_mean", "mean logit cosine", True, 0.0, 1.0),
    "sqnr": Metric("sqnr_db", "logit SQNR", True, -math.inf, math.inf),
    "kl": Metric("kl_mean", "mean softmax KL", False, 0.0, math.inf),
}
SPELLING = "METRIC=BOUND[,METRIC=BOUND] with METRIC top1, cosine, sqnr (dB) or kl, e.g. cosine=0.99 or top1=0.995"


@dataclass(frozen=True)
class Target:
    """Bounds on the logits' fidelity to FP32, all of which must hold: ((metric, bound), ...)."""

    bounds: tuple[tuple[str, float], ...]

    @classmethod
    def of(cls, value=None) -> "Target":
        """A Target from a Target, None (the default), a number (a top-1 agreement fraction, as before fidelity
        bounds existed), 'cosine=0.99' / 'top1=0.995,sqnr=20' or {'cosine': 0.99}; ValueError naming the fix."""
        if isinstance(value, Target):
            return value
        if value is None:
            value = DEFAULT_TARGET
        if isinstance(value, dict):
            items = list(value.items())
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            items = [("top1", value)]
        elif isinstance(value, str):
            items = []
            for part in (p.strip() for p in value.split(",") if p.strip()):
                name, sep, bound = part.rpartition("=")
                items.append((name.strip().lower() if sep else "top1", bound.strip()))
        else:
            raise ValueError(f"target {value!r}: write {SPELLING}")
        if not items:
            raise ValueError(f"target {value!r} names no bound: write {SPELLING}")
        bounds = []
        for name, bound in items:
            if name not in METRICS:
                raise ValueError(f"target {value!r}: {name!r} is not a metric; write {SPELLING}")
            try:
                bound = float(bound)
            except (TypeError, ValueError):
                raise ValueError(f"target {value!r}: {bound!r} is not a number; write {SPELLING}") from None
            metric = METRICS[name]
            if not (math.isfinite(bound) and metric.low <= bound <= metric.high) or (
                    metric.low == 0.0 and metric.higher_is_better and bound == 0.0):
                where = "in (0, 1]" if metric.high == 1.0 else ("≥ 0" if metric.low == 0.0 else "finite")
                raise ValueError(f"target {name}={bound:g} is out of range: {metric.label} bounds are {where}")
            bounds.append((name, bound))
        return cls(tuple(dict(bounds).items()))

    def met(self, metrics: dict) -> bool:
        return not self.missed(metrics)

    def missed(self, metrics: dict) -> list[str]:
        """The bounds `metrics` miss, as 'mean logit cosine 0.9825 < 0.99'."""
        out = []
        for name, bound in self.bounds:
            metric = METRICS[name]
            value = metrics.get(metric.key, math.nan)
            ok = (value >= bound) if metric.higher_is_better else (value <= bound)
            if not ok:  # NaN misses too
                out.append(f"{metric.label} {metric.text(value)} {'<' if metric.higher_is_better else '>'} "
                           f"{metric.bound_text(bound)}")
        return out

    def compared(self, metrics: dict) -> str:
        """Each bound with the measured value beside it, held or missed: 'mean logit cosine 0.9930 ≥ 0.99'."""
        out = []
        for name, bound in self.bounds:
            metric = METRICS[name]
            value = metrics.get(metric.key, math.nan)
            ok = (value >= bound) if metric.higher_is_better else (value <= bound)
            sign = ("≥" if ok else "<") if metric.higher_is_better else ("≤" if ok else ">")
            out.append(f"{metric.label} {metric.text(value)} {sign} {metric.bound_text(bound)}")
        return " and ".join(out)

    def describe(self) -> str:
        """For people: 'mean logit cosine ≥ 0.99'."""
        return " and ".join(f"{METRICS[n].label} {'≥' if METRICS[n].higher_is_better else '≤'} "
                            f"{METRICS[n].bound_text(b)}" for n, b in self.bounds)

    def values(self, metrics: dict) -> str:
        """The measured values of the target's metrics: 'mean logit cosine 0.9926'."""
        return ", ".join(f"{METRICS[n].label} {METRICS[n].text(metrics.get(METRICS[n].key, math.nan))}"
                         for n, _ in self.bounds)

    def spelling(self) -> str:
        """As `--target` takes it: 'cosine=0.99'."""
        return ",".join(f"{n}={b:g}" for n, b in self.bounds)

    def to_dict(self) -> dict:
        return dict(self.bounds)

    def __str__(self) -> str:
        return self.describe()
