"""Is a top-1 difference between two variants real? McNemar's test on their paired correctness, from stored
results only (nothing here runs inference).

The tails come from scipy: the exact test is the two-sided binomial test of the discordant pairs at p = 1/2
(`scipy.stats.binomtest`), the χ² test the survival function of χ² with one degree of freedom
(`scipy.stats.chi2.sf`). Which one "auto" takes, and the continuity correction, follow MedCalc and R.
"""
from __future__ import annotations

import math

import numpy as np

from trtlab.evaluation.results import VariantResult

MCNEMAR_EXACT_MAX_DISCORDANT = 25  # MedCalc's rule: exact binomial up to 25 discordant pairs, chi-square above


def _discordant_counts(table, b, c) -> tuple[int, int]:
    """(b, c) from a 2×2 table or the counts themselves, checked to be non-negative integers."""
    if table is not None:
        grid = np.asarray(table)
        if grid.shape != (2, 2):
            raise ValueError(f"McNemar needs a 2×2 contingency table, got shape {list(grid.shape)}")
        b, c = grid[0, 1], grid[1, 0]
    if b is None or c is None:
        raise ValueError("pass a 2×2 table or both discordant counts b= and c=")
    if float(b) != int(b) or float(c) != int(c) or b < 0 or c < 0:
        raise ValueError(f"discordant counts must be non-negative integers, got b={b}, c={c}")
    return int(b), int(c)


def mcnemar(table=None, *, b: int | None = None, c: int | None = None, method: str = "auto",
            correction: bool = True) -> dict:
    """McNemar's test for paired proportions, from a 2×2 table [[a, b], [c, d]] or the discordant counts b, c.

    For two variants on the same images: a = both correct, b = only the first correct, c = only the second
    correct, d = both wrong. method: "exact" (two-sided binomial on the discordant pairs, p = 1/2), "chi2"
    (chi-square, 1 dof, with the continuity correction (|b−c|−1)²/(b+c) unless correction=False), or "auto":
    exact when b + c ≤ 25, chi-square with continuity correction above.
    Returns b, c, discordant, method, statistic (min(b, c) for exact, the chi-square value otherwise), pvalue.
    """
    b, c = _discordant_counts(table, b, c)
    n = b + c
    if method == "auto":
        method = "exact" if n <= MCNEMAR_EXACT_MAX_DISCORDANT else "chi2"
    if method not in ("exact", "chi2"):
        raise ValueError(f"unknown McNemar method {method!r}; use 'auto', 'exact' or 'chi2'")
    if n == 0:
        # No discordant pair: the two are indistinguishable on these images.
        return {"b": 0, "c": 0, "discordant": 0, "method": method, "statistic": 0.0, "pvalue": 1.0}
    from scipy import stats  # imported here: scipy.stats takes a while to import and most callers never test

    if method == "exact":
        # At p = 1/2 the distribution is symmetric: binomtest's two-sided p is min(1, 2·P(X ≤ min(b, c))).
        statistic, pvalue = float(min(b, c)), float(stats.binomtest(b, n, 0.5).pvalue)
    else:
        # As R's mcnemar.test: no correction when b == c (the statistic is 0, not 1/(b+c)).
        shift = 1.0 if correction and b != c else 0.0
        statistic = (abs(b - c) - shift) ** 2 / n
        pvalue = float(stats.chi2.sf(statistic, df=1))
    return {"b": b, "c": c, "discordant": n, "method": method, "statistic": statistic, "pvalue": pvalue}


def paired_correctness(first: VariantResult, second: VariantResult) -> np.ndarray:
    """2×2 table [[both correct, only first correct], [only second correct, both wrong]] of top-1 correctness
    over the labelled images both results hold."""
    mine, theirs = first.align(second)
    labels = first.labels[mine]
    labelled = labels >= 0
    first_ok = first.top1[mine][labelled] == labels[labelled]
    second_ok = second.top1[theirs][labelled] == labels[labelled]
    return np.array([[np.sum(first_ok & second_ok), np.sum(first_ok & ~second_ok)],
                     [np.sum(~first_ok & second_ok), np.sum(~first_ok & ~second_ok)]], np.int64)


def compare_accuracy(first: VariantResult, second: VariantResult, alpha: float = 0.05, method: str = "auto") -> dict:
    """Is `second` more or less accurate than `first` on the same labelled images? Top-1 of each, the
    difference, McNemar's test on the paired correctness, and a one-line verdict."""
    table = paired_correctness(first, second)
    n = int(table.sum())
    out = {"first": first.variant, "second": second.variant, "labelled": n, "table": table}
    if n == 0:
        out.update({"first_top1": math.nan, "second_top1": math.nan, "delta_top1": math.nan, "b": 0, "c": 0,
                    "discordant": 0, "method": None, "statistic": math.nan, "pvalue": math.nan,
                    "significant": None,
                    "verdict": f"{second.variant} vs {first.variant}: no labelled images in common, so accuracy "
                               f"cannot be compared; agreement and cosine still apply"})
        return out
    first_top1 = (table[0, 0] + table[0, 1]) / n
    second_top1 = (table[0, 0] + table[1, 0]) / n
    test = mcnemar(table, method=method)
    significant = test["pvalue"] < alpha
    delta = second_top1 - first_top1
    kind = "exact binomial" if test["method"] == "exact" else "chi-square (continuity-corrected)"
    verdict = (f"{second.variant} vs {first.variant}: {100 * delta:+.2f} points top-1 on {n} labelled images; "
               f"{test['c']} image(s) only {second.variant} gets right, {test['b']} only {first.variant}; "
               f"McNemar {kind} p = {test['pvalue']:.3g} → "
               + (f"a real difference at the {100 * alpha:g}% level" if significant else
                  f"not distinguishable from chance at the {100 * alpha:g}% level"))
    out.update({"first_top1": float(first_top1), "second_top1": float(second_top1), "delta_top1": float(delta),
                **test, "significant": bool(significant), "verdict": verdict})
    return out


SIGNIFICANCE_COLUMNS = ["first", "second", "labelled", "first_top1", "second_top1", "delta_top1", "b", "c",
                        "discordant", "method", "statistic", "pvalue", "significant", "verdict"]


def pairwise_significance(results: dict[str, VariantResult], alpha: float = 0.05, method: str = "auto",
                          reference: str | None = None, allow_mixed_backends: bool = False):
    """pandas DataFrame, one row per pair of variants (first stored first) — or, given `reference`, one row per
    variant against the reference (what a dashboard of many variants shows) — with top-1 of each, difference,
    discordant counts, McNemar statistic and p-value, significant at `alpha`, verdict. Results of different
    backends are refused unless `allow_mixed_backends` (identity.check_one_backend)."""
    import pandas as pd

    from trtlab.evaluation.identity import check_one_backend, check_one_experiment

    check_one_experiment(results)
    check_one_backend(results, allow_mixed_backends)
    names = list(results)
    if reference is not None:
        pairs = [(reference, name) for name in names if name != reference]
    else:
        pairs = [(first, second) for i, first in enumerate(names) for second in names[i + 1:]]
    rows = []
    for first, second in pairs:
        row = compare_accuracy(results[first], results[second], alpha, method)
        row.pop("table")
        rows.append(row)
    return pd.DataFrame(rows, columns=SIGNIFICANCE_COLUMNS)


def compare_agreement(first: VariantResult, second: VariantResult, reference: VariantResult, alpha: float = 0.05,
                      method: str = "auto") -> dict:
    """Does `first` or `second` agree more often with `reference`'s top-1? McNemar's test on the paired outcome
    "top-1 equals the reference's" over the images all three hold — the comparison that needs no labels.
    b = images only `first` agrees on, c = only `second`."""
    images = set(first.image_ids) & set(second.image_ids)
    shared = [k for k, image_id in enumerate(reference.image_ids) if image_id in images]
    order = [reference.image_ids[k] for k in shared]
    truth = reference.top1[shared]

    def agrees(result: VariantResult) -> np.ndarray:
        position = {image_id: k for k, image_id in enumerate(result.image_ids)}
        return result.top1[[position[i] for i in order]] == truth

    a, s = agrees(first), agrees(second)
    b, c = int(np.sum(a & ~s)), int(np.sum(~a & s))
    test = mcnemar(b=b, c=c, method=method)
    return {"first": first.variant, "second": second.variant, "reference": reference.variant, "images": len(order),
            "first_agreement": float(a.mean()) if len(order) else math.nan,
            "second_agreement": float(s.mean()) if len(order) else math.nan,
            "both": int(np.sum(a & s)), "neither": int(np.sum(~a & ~s)), **test,
            "significant": bool(test["pvalue"] < alpha) if len(order) else None}


# --- Paired fidelity to the reference and the sample size McNemar needs (issue 26). ---

PAIRED_INTERVAL_METHOD = "paired t-interval on the per-image differences"
SAMPLE_SIZE_METHOD = "Connor 1987, paired McNemar design"


def paired_interval(differences, confidence: float = 0.95) -> dict:
    """Mean of per-image differences with its Student-t interval (n − 1 degrees of freedom): the paired interval,
    which removes the image-to-image spread both variants share. With n < 2 or no spread the bounds are the mean
    itself (n ≥ 2) or NaN (n < 2)."""
    values = np.asarray(differences, np.float64)
    n = len(values)
    if n == 0:
        return {"mean": math.nan, "low": math.nan, "high": math.nan, "n": 0}
    mean = float(values.mean())
    if n < 2:
        return {"mean": mean, "low": math.nan, "high": math.nan, "n": n}
    from scipy import stats

    half = float(stats.t.ppf(0.5 + confidence / 2, n - 1)) * float(values.std(ddof=1)) / math.sqrt(n)
    return {"mean": mean, "low": mean - half, "high": mean + half, "n": n}


def paired_fidelity(first: VariantResult, second: VariantResult, reference: VariantResult,
                    confidence: float = 0.95) -> dict:
    """Both variants' per-image fidelity to `reference` on the images all three hold, and the paired interval of
    each metric's difference (first − second). {metric: {first, second, difference, low, high, n}} for logit
    cosine (higher is closer), KL (reference ‖ variant, lower is closer), top-1 and top-5 flips (lower is closer)."""
    from trtlab.evaluation.fidelity import FIDELITY_METRICS, fidelity_per_image, shared_images

    ids = shared_images([first, second], reference)
    a = fidelity_per_image(first, reference, ids)
    b = fidelity_per_image(second, reference, ids)
    out = {"images": len(ids)}
    for metric in FIDELITY_METRICS:
        interval = paired_interval(a[metric] - b[metric], confidence)
        out[metric] = {"first": float(a[metric].mean()) if len(ids) else math.nan,
                       "second": float(b[metric].mean()) if len(ids) else math.nan,
                       "difference": interval["mean"], "low": interval["low"], "high": interval["high"],
                       "n": interval["n"]}
    return out


def pairwise_fidelity(results: dict[str, VariantResult], reference: str, confidence: float = 0.95):
    """pandas DataFrame, one row per pair of variants other than the reference (first stored first) and metric:
    both means, the paired difference (first − second) and its interval (PAIRED_INTERVAL_METHOD), over the images
    every variant and the reference hold (each variant's per-image fidelity is computed once)."""
    import pandas as pd

    from trtlab.evaluation.fidelity import FIDELITY_METRICS, fidelity_per_image, shared_images

    names = [n for n in results if n != reference]
    ids = shared_images([results[n] for n in names], results[reference])
    per_image = {name: fidelity_per_image(results[name], results[reference], ids) for name in names}
    rows = []
    for i, first in enumerate(names):
        for second in names[i + 1:]:
            for metric in FIDELITY_METRICS:
                a, b = per_image[first][metric], per_image[second][metric]
                interval = paired_interval(a - b, confidence)
                rows.append({"first": first, "second": second, "metric": metric,
                             "first_mean": float(a.mean()) if len(ids) else math.nan,
                             "second_mean": float(b.mean()) if len(ids) else math.nan,
                             "difference": interval["mean"], "low": interval["low"], "high": interval["high"],
                             "n": interval["n"]})
    return pd.DataFrame(rows, columns=["first", "second", "metric", "first_mean", "second_mean", "difference", "low",
                                       "high", "n"])


def mcnemar_sample_size(discordant_first: float, discordant_second: float, alpha: float = 0.05,
                        power: float = 0.8) -> int | None:
    """Pairs (images) a two-sided McNemar test at `alpha` needs to detect, with probability `power`, a difference
    of the size observed: Connor (1987), from the discordant proportions p10 (only the first right) and p01 (only
    the second): n = (z_{1−α/2}·√ψ + z_{power}·√(ψ − δ²))² / δ², ψ = p10 + p01, δ = p10 − p01. None when the
    observed proportions are equal (no difference to detect)."""
    from scipy import stats

    psi = discordant_first + discordant_second
    delta = discordant_first - discordant_second
    if delta == 0 or psi <= 0:
        return None
    za, zb = float(stats.norm.ppf(1 - alpha / 2)), float(stats.norm.ppf(power))
    n = (za * math.sqrt(psi) + zb * math.sqrt(max(psi - delta * delta, 0.0))) ** 2 / (delta * delta)
    return int(math.ceil(n))
