"""Which of two variants to ship: the one decision the quickstart, notebook 03 (widget and `result.verdict()`), the
dashboard's `dash.compare()` and `python -m trtlab calibrate` all state, in the same sentence.

Top-1 decides when McNemar's test between the two says the difference is real (on correctness with labels, on
agreement with the reference without). Where it cannot — the usual case on a notebook's 20 photos — the paired
per-image fidelity to the reference decides: the variant whose logits are closer to the reference's (logit cosine,
paired 95 % t-interval of the per-image difference excluding 0, KL of the softmax not contradicting it) is the one
to ship; two variants whose cosine difference lies within ±COSINE_MARGIN are equivalent. Where top-1 did not
decide, the sentence says so in words (issue 35: a handful of labelled photos cannot measure a top-1 cost, and a
recommendation must say what it rests on): how many labelled images there were, what top-1 difference they could
have missed (the 95 % Wilson upper bound of the share of images where only one variant is right, which bounds any
top-1 difference), and how many labelled images would resolve a top-1 difference of the size observed (Connor 1987
sample size for the paired McNemar design, α 0.05, power 0.8) — or why there is no such number.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from trtlab.evaluation.results import VariantResult
from trtlab.evaluation.significance import (PAIRED_INTERVAL_METHOD, SAMPLE_SIZE_METHOD, compare_accuracy,
                                            compare_agreement, mcnemar_sample_size, paired_fidelity)
from trtlab.views.formatting import cosine, nats, percent, pvalue


class PairError(ValueError):
    """A head-to-head that cannot be made (names not stored, fewer than two variants)."""

ALPHA = 0.05
POWER = 0.8
# Mean logit cosines within ±0.001 of each other are one variant for shipping purposes: on the demo model a
# 0.001 cosine gap is well under the 0.01–0.02 that separates minmax from entropy on 20 photos.
COSINE_MARGIN = 0.001


@dataclass(frozen=True)
class Verdict:
    """The decision between two variants: `sentence` for people, the numbers it rests on for code.

    ship: the variant to ship, or None (equivalent, or not yet decidable). decided_by: 'top-1' (McNemar said the
    top-1 difference is real), 'fidelity' (closer to the reference, paired interval), 'equivalent' (within the
    margin) or 'undecided'. fidelity: evaluation.significance.paired_fidelity (first − second). top1: the McNemar
    test used (top1_basis says on what). images_needed: Connor's sample size for the top-1 difference seen (None
    where top-1 decided or no difference was seen)."""

    sentence: str
    ship: str | None
    decided_by: str
    first: str
    second: str
    reference: str
    fidelity: dict = field(repr=False)
    top1: dict = field(repr=False)
    top1_basis: str = "labelled images"
    images_needed: int | None = None
    margin: float = COSINE_MARGIN
    speed: object = None  # graph.speed.SpeedClause of the INT8 variant the verdict points to (with_speed), or None
    methods: dict = field(default_factory=lambda: {"interval": PAIRED_INTERVAL_METHOD,
                                                   "sample size": SAMPLE_SIZE_METHOD, "alpha": ALPHA,
                                                   "power": POWER})

    def __str__(self) -> str:
        return self.sentence

    def with_speed(self, clause) -> "Verdict":
        """This verdict with its speed clause (issue 37: INT8 only where it pays): the sentence gains it — measured
        on TensorRT engines, below the threshold 'ship FP16: INT8 is not faster on this GPU'; else the estimate with
        its band and that only a build can confirm."""
        import dataclasses

        if clause is None:
            return self
        return dataclasses.replace(self, speed=clause, sentence=f"{self.sentence} Speed of {self.speed_variant}: "
                                                                 f"{clause.text}")

    @property
    def speed_variant(self) -> str:
        """The INT8 variant the verdict points to: the one to ship, else the one closer to the reference."""
        return self.record()["closer"]

    def record(self) -> dict:
        """What a results store keeps of it (ResultsStore.save_verdict): the pair, the decision, its sentence, and
        `closer` — the variant whose logits are closer to the reference on average, the one to debug or build on
        when the verdict could not decide."""
        import time

        cos = self.fidelity.get("cosine", {}) if self.fidelity else {}
        first, second = cos.get("first", math.nan), cos.get("second", math.nan)
        closer = self.ship or (self.second if math.isfinite(second) and not second <= first else self.first)
        speed = None if self.speed is None else {"source": self.speed.source, "speedup": self.speed.speedup,
                                                   "low": self.speed.low, "high": self.speed.high,
                                                   "batch": self.speed.batch, "gpu": self.speed.gpu,
                                                   "ship": self.speed.ship, "threshold": self.speed.threshold}
        return {"first": self.first, "second": self.second, "reference": self.reference, "ship": self.ship,
                "decided_by": self.decided_by, "closer": closer, "sentence": self.sentence,
                "images_needed": self.images_needed, "speed": speed, "time": time.strftime("%Y-%m-%d %H:%M:%S")}

    def _repr_markdown_(self) -> str:
        return f"**{self.sentence}**"


def verdict_line(head_to_head) -> str | None:
    """'verdict: <sentence>' from a callable returning a HeadToHead (`result.verdict`), or None where there is no
    pair to decide between (fewer than two variants besides the reference): what the CLI and text summaries
    print under the variant table."""
    try:
        return f"verdict: {head_to_head().sentence}"
    except PairError:
        return None


def decide(results: dict[str, VariantResult], first: str, second: str, reference: str, alpha: float = ALPHA,
           margin: float = COSINE_MARGIN, power: float = POWER, accuracy_test: dict | None = None,
           agreement_test: dict | None = None) -> Verdict:
    """The Verdict between stored variants `first` and `second` against `reference` (see the module's rule).
    accuracy_test / agreement_test: the McNemar results when the caller holds them already."""
    a, b, ref = results[first], results[second], results[reference]
    accuracy_test = accuracy_test or compare_accuracy(a, b, alpha)
    labelled = bool(accuracy_test["labelled"])
    test = accuracy_test if labelled else (agreement_test or compare_agreement(a, b, ref, alpha))
    n = int(test["labelled"] if labelled else test["images"])
    fidelity = paired_fidelity(a, b, ref, 1 - alpha)
    basis = "labelled images" if labelled else f"images (agreement with {reference}; no labels)"
    kwargs = dict(first=first, second=second, reference=reference, fidelity=fidelity, top1=test, top1_basis=basis,
                  margin=margin)
    top1_clause = _top1_clause(test, labelled, reference, n)
    if test.get("significant"):
        winner, loser = (first, second) if test["b"] > test["c"] else (second, first)
        why = ("it is right on more labelled images" if labelled else
               f"its top-1 agrees with {reference} on more images")
        sentence = (f"Ship {winner}: {why} than {loser} ({'top-1 ' if labelled else ''}{top1_clause})"
                    f"{_fidelity_aside(fidelity, winner == first)}.")
        return Verdict(sentence, winner, "top-1", **kwargs)

    needed = mcnemar_sample_size(test["b"] / n, test["c"] / n, alpha, power) if n and test["b"] != test["c"] \
        else None
    undecided_top1 = _undecided_top1(test, n, needed, labelled, top1_clause, reference, alpha, power)
    cos, kl = fidelity["cosine"], fidelity["kl"]
    if not fidelity["images"] or not math.isfinite(cos["low"]):
        sentence = (f"Neither {first} nor {second} can be recommended: too few images to compare their fidelity to "
                    f"{reference} ({fidelity['images']} images); {undecided_top1}.")
        return Verdict(sentence, None, "undecided", images_needed=needed, **kwargs)
    interval = _interval(cos)
    basis = f"this rests on logit fidelity over {fidelity['images']} images"
    if -margin <= cos["low"] and cos["high"] <= margin:
        sentence = (f"{first} and {second} are equivalent — {basis}: their logits are equally close to {reference} "
                    f"(cosine {cosine(cos['first'])} vs {cosine(cos['second'])}, paired 95 % CI of the difference "
                    f"{interval}, within ±{margin:g}); ship either. {_capital(undecided_top1)}.")
        return Verdict(sentence, None, "equivalent", images_needed=needed, **kwargs)
    if cos["low"] > 0 or cos["high"] < 0:
        first_closer = cos["low"] > 0
        # KL measures the same closeness on the softmax; a real difference the other way makes the evidence mixed.
        kl_against = (kl["high"] < 0) if not first_closer else (kl["low"] > 0)
        if not kl_against:
            winner = first if first_closer else second
            mine, theirs = (cos["first"], cos["second"]) if first_closer else (cos["second"], cos["first"])
            if not first_closer:
                interval = _interval({"low": -cos["high"], "high": -cos["low"]})
            # KL is quoted as what it is: closer too where its own interval says so, else within noise
            kl_agrees = (kl["high"] < 0) if first_closer else (kl["low"] > 0)
            sentence = (f"Ship {winner} — {basis}: its logits are closer to {reference} (cosine {cosine(mine)} vs "
                        f"{cosine(theirs)}, paired 95 % CI of the difference {interval}; KL "
                        f"{nats(kl['first' if first_closer else 'second'])} vs "
                        f"{nats(kl['second' if first_closer else 'first'])} nats, "
                        f"{'lower too' if kl_agrees else 'not distinguishable'}). {_capital(undecided_top1)}.")
            return Verdict(sentence, winner, "fidelity", images_needed=needed, **kwargs)
        sentence = (f"Neither {first} nor {second} can be recommended yet: logit cosine favours "
                    f"{first if first_closer else second} (paired 95 % CI of the difference {interval}) but KL of "
                    f"the softmax favours the other, over {fidelity['images']} images. {_capital(undecided_top1)}.")
        return Verdict(sentence, None, "undecided", images_needed=needed, **kwargs)
    sentence = (f"Neither {first} nor {second} can be recommended yet: their logits are not distinguishably "
                f"closer to {reference} over {fidelity['images']} images (cosine {cosine(cos['first'])} vs "
                f"{cosine(cos['second'])}, paired 95 % CI of the difference {interval}). {_capital(undecided_top1)}.")
    return Verdict(sentence, None, "undecided", images_needed=needed, **kwargs)


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def _undecided_top1(test: dict, n: int, needed: int | None, labelled: bool, top1_clause: str, reference: str,
                    alpha: float, power: float) -> str:
    """What top-1 could and could not say, in words: '5 labelled images cannot measure a top-1 cost (…): a
    difference of up to 43 points would go unseen; no difference was seen, so no number of images is predicted to
    resolve one' — or, with a difference seen, how many labelled images would resolve it."""
    from trtlab.evaluation.metrics import wilson_interval

    if not n:
        return (f"there are no labelled images, and no image to compare top-1 agreement with {reference} on, so top-1 "
                f"says nothing")
    unit = "labelled images" if labelled else f"images (agreement with {reference}; no labels)"
    count = f"{n:,} {unit}" if n != 1 else f"1 {unit.replace('images', 'image', 1)}"
    if test["b"] == test["c"]:
        # |top-1 difference| ≤ share of discordant images: its upper bound is what these images could miss.
        unseen = wilson_interval(int(test["b"] + test["c"]), n)[1]
        return (f"{count} cannot measure a top-1 cost ({top1_clause}): a difference of up to "
                f"{100 * unseen:.0f} points would go unseen; none was seen ({test['b']} vs {test['c']} images where "
                f"only one is {'right' if labelled else 'in agreement'}), so no number of images is predicted to "
                f"resolve one")
    gap = abs(test["b"] - test["c"]) / n
    return (f"{count} cannot tell whether the top-1 difference is real ({top1_clause}); about {needed:,} "
            f"{'labelled ' if labelled else ''}images would resolve a top-1 difference of this size ({100 * gap:.1f} "
            f"points; Connor 1987 sample size for McNemar, α {alpha:g}, power {power:g})")


def _top1_clause(test: dict, labelled: bool, reference: str, n: int) -> str:
    """'85.0 % vs 90.0 % on 20 labelled images, McNemar p = 1.00' (the numbers the top-1 part rests on; without
    labels, agreement with the reference)."""
    shown = pvalue(test["pvalue"]) if test["discordant"] else "1.00"
    p = f"p {shown}" if shown.startswith("<") else f"p = {shown}"
    what = "labelled images" if labelled else f"images, agreement with {reference}"
    if labelled:
        rates = f"{percent(test['first_top1'])} vs {percent(test['second_top1'])}"
    else:
        rates = f"agreement {percent(test['first_agreement'])} vs {percent(test['second_agreement'])}"
    return f"{rates} on {n} {what}, McNemar {p}"


def _fidelity_aside(fidelity: dict, winner_is_first: bool) -> str:
    cos = fidelity["cosine"]
    if not fidelity["images"] or not math.isfinite(cos["first"]):
        return ""
    mine, theirs = (cos["first"], cos["second"]) if winner_is_first else (cos["second"], cos["first"])
    return f"; logit cosine with the reference {cosine(mine)} vs {cosine(theirs)}"


def _signed(value: float, digits: int) -> str:
    return f"{value:+.{digits}f}".replace("-", "−")


def _interval(row: dict) -> str:
    """'+0.0090…+0.0160': both bounds to the same decimals (3 once a bound reaches 0.1)."""
    digits = 4 if max(abs(row["low"]), abs(row["high"])) < 0.1 else 3
    return f"{_signed(row['low'], digits)}…{_signed(row['high'], digits)}"
