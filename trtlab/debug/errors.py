"""Running error sums: a tensor (or the logits) of a variant against the reference, one batch at a time, in O(1)
memory per tensor (Σref², Σerr², Σref·test, max|err|, per-image cosine), so SQNR and cosine cover any number of
images without holding them."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

# the verdict's KL (evaluation.fidelity), so the debugger and the verdict report one KL for the same logits
from trtlab.evaluation.fidelity import softmax_kl

SQNR_CAP_DB = 100.0  # plotted for tensors with no error at all (SQNR = inf in the tables)


@dataclass
class ErrorSums:
    """Running sums comparing a tensor (or the logits) of a variant with the reference, over images."""

    images: int = 0
    ref2: float = 0.0  # Σ ref²
    err2: float = 0.0  # Σ (test − ref)²
    dot: float = 0.0  # Σ ref·test
    test2: float = 0.0  # Σ test²
    max_abs_error: float = 0.0
    ref_absmax: float = 0.0
    cosine_sum: float = 0.0  # Σ per-image cosine
    cosine_worst: float = 1.0
    top1_agree: int = 0  # logits only
    kl_sum: float = 0.0  # logits only: Σ per-image KL(softmax(ref) ‖ softmax(test)), in nats

    def update(self, ref: np.ndarray, test: np.ndarray, logits: bool = False) -> None:
        if ref.shape != test.shape:
            raise ValueError(f"reference shape {ref.shape} differs from variant shape {test.shape}")
        n = ref.shape[0] if ref.ndim else 1
        ref2d = ref.reshape(n, -1)
        test2d = test.reshape(n, -1)
        for r, t in zip(ref2d, test2d):  # one image at a time in float64: bounded temporaries, exact sums
            r = r.astype(np.float64)
            t = t.astype(np.float64)
            diff = t - r
            rr, tt, rt, ee = float(r @ r), float(t @ t), float(r @ t), float(diff @ diff)
            self.ref2 += rr
            self.test2 += tt
            self.dot += rt
            self.err2 += ee
            if diff.size:
                self.max_abs_error = max(self.max_abs_error, float(np.abs(diff).max()))
                self.ref_absmax = max(self.ref_absmax, float(np.abs(r).max()))
            denom = math.sqrt(rr * tt)
            cosine = rt / denom if denom > 0 else (1.0 if rr == tt == 0 else 0.0)
            self.cosine_sum += cosine
            self.cosine_worst = min(self.cosine_worst, cosine)
        if logits:
            self.top1_agree += int((ref2d.argmax(axis=1) == test2d.argmax(axis=1)).sum())
            self.kl_sum += float(softmax_kl(ref2d, test2d).sum())
        self.images += n

    @property
    def sqnr_db(self) -> float:
        """10·log10(Σref² / Σerr²); inf when the variant matches exactly."""
        if self.err2 == 0:
            return math.inf
        if self.ref2 == 0:
            return -math.inf
        return 10.0 * math.log10(self.ref2 / self.err2)

    @property
    def cosine(self) -> float:
        """Cosine similarity of the whole tensor (all images flattened together)."""
        denom = math.sqrt(self.ref2 * self.test2)
        return self.dot / denom if denom > 0 else (1.0 if self.ref2 == self.test2 == 0 else 0.0)

    @property
    def top1_agreement(self) -> float:
        """Fraction of images whose arg-max matches the reference's (logits only)."""
        return self.top1_agree / self.images if self.images else math.nan

    def metrics(self, logits: bool = False) -> dict:
        out = {"sqnr_db": self.sqnr_db, "cosine": self.cosine,
               "cosine_mean": self.cosine_sum / self.images if self.images else math.nan,
               "cosine_worst": self.cosine_worst, "max_abs_error": self.max_abs_error}
        if logits:
            out["top1_agreement"] = self.top1_agreement
            out["kl_mean"] = self.kl_sum / self.images if self.images else math.nan
        return out

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "ErrorSums":
        return cls(**data)
