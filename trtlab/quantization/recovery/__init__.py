"""Recovery: INT8 accuracy won back without leaving INT8 — methods chosen per recipe (`Recipe(recovery=(...))`),
kept in a table like the placement rules (trtlab.quantization.placement.RULES).

- `equalization` (cross-layer equalization; Nagel et al., "Data-Free Quantization", 2019): consecutive weighted
  layers whose activation between them is positively homogeneous (f(x/s) = f(x)/s for s > 0: ReLU, LeakyReLU,
  PReLU, Clip(0, ∞), none) get their per-channel weight ranges equalized; the FP32 output is unchanged. Pairs with
  ReLU6, HardSwish, SiLU or another activation are left as they are and named with the reason (`equalization.py`).
- `adaround` (adaptive rounding; Nagel et al., "Up or Down? Adaptive Rounding", 2020): per layer, each weight
  rounded up or down — never further than one step from where nearest rounding puts it — to minimise the layer's
  output error against FP32 on calibration activations (`adaround.py`).
- `bias_correction` (empirical bias correction): per output channel, the mean error quantization leaves in each
  Conv/Gemm output, layer by layer in graph order with the upstream layers already corrected, folded into the
  float bias — only where the calibration images tell it from zero (`bias_correction.py`).

They run in table order: equalization rewrites the FP32 graph before calibration (activation ranges change, so
the statistics are those of the equalized graph); adaptive rounding and bias correction share one layer-by-layer
pass of the quantized graph over the calibration images (`layerwise.py`), rounding a layer's weights before it
runs and correcting its output after. Every method writes a float model that trtlab's one Q/DQ writer
(quantization.insertion) quantizes as it quantizes any: signed INT8, zero point 0, weights per output channel (or
per tensor), the same op types as the plain variant — the precision report and the speed estimate are those of the
plain variant by construction. `recover.py` runs them; this module only names them (Recipe imports it).
"""
from __future__ import annotations

from dataclasses import dataclass

from trtlab.core.errors import UserValueError


@dataclass(frozen=True)
class Method:
    """One recovery method: its name (what a Recipe lists), the short label variant names carry, and what it is."""

    name: str
    label: str
    what: str


#: The recovery methods, in the order they run.
METHODS = {m.name: m for m in (
    Method("equalization", "cle", "cross-layer equalization of weight ranges (FP32 output unchanged)"),
    Method("adaround", "adaround", "adaptive rounding of each weight, up or down, against FP32 layer outputs"),
    Method("bias_correction", "biascorr", "per-channel mean quantization error folded into the float bias"),
)}
#: The modules that carry the methods out (their code is part of every variant's identity: quantization.variants
#: GRAPH_SOURCES), with the batch source and preprocessing that give adaptive rounding and bias correction their
#: calibration images (an imported-cache variant's identity holds no statistics code that would name them).
MODULES = ("trtlab.quantization.recovery", "trtlab.quantization.recovery.recover",
           "trtlab.quantization.recovery.layerwise", "trtlab.quantization.recovery.equalization",
           "trtlab.quantization.recovery.adaround", "trtlab.quantization.recovery.bias_correction",
           "trtlab.data.batches", "trtlab.data.preprocess")


def resolve_methods(recovery) -> tuple[str, ...]:
    """Recovery method names in METHODS order: None, '' or () → (); a text 'a,b' or an iterable of names. An
    unknown name is one UserValueError line listing the methods there are."""
    if recovery is None:
        return ()
    if isinstance(recovery, str):
        recovery = [part.strip() for part in recovery.split(",") if part.strip()]
    names = list(recovery)
    if names in (["none"], ["off"]):
        return ()
    bad = [n for n in names if not isinstance(n, str) or n not in METHODS]
    if bad:
        raise UserValueError(f"recovery method(s) {', '.join(map(repr, bad))} are not trtlab's",
                             f"choose from {', '.join(METHODS)} (e.g. recovery=('bias_correction', 'adaround'))")
    return tuple(name for name in METHODS if name in names)


def check_imported_scales(recipe, imported: bool) -> None:
    """Refuse, before any work, equalization with the scales of an imported calibration cache: it changes the
    graph's activation ranges, so scales measured on the original graph do not fit it."""
    if imported and "equalization" in recipe.recovery:
        raise UserValueError(f"{recipe.name}: equalization changes the graph's activation ranges, so the scales of "
                             f"an imported calibration cache do not fit it",
                             "drop 'equalization' from recovery, or calibrate instead of importing the cache")


def recovery_label(methods) -> str:
    """'+cle+adaround+biascorr' for the methods given ('' for none)."""
    return "".join(f"+{METHODS[name].label}" for name in methods)


__all__ = ["METHODS", "Method", "MODULES", "resolve_methods", "recovery_label", "check_imported_scales"]
