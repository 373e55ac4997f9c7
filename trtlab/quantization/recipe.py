"""What a variant is: a `Recipe` (precision, calibration algorithm and images, float path, placement rules, guards),
checked when it is made.

Every impossible value — a precision or algorithm trtlab does not have, a percentile outside (0, 100], a calibration
size or batch below 1, a float path or placement rule that does not exist, a guard that is not understood — is
refused at construction as one `UserValueError` line (`error: <what> — <fix>` on the CLI, the same line in the
widgets). Guards are parsed once here (texts accepted) and held as `Guard` values (trtlab.graph.guards); nothing
downstream re-parses guard strings.

INT8 recipes have a float path (`high_precision`, trtlab.quantization.insertion): 'fp16' (the default: everything
not quantized in FP16, FP16 Q/DQ scales at opset 19) or 'fp32' (the graph trtlab made before issue 17, kept for A/B:
FP32 float path with the placement rules of that time). The label marks the FP32 path (`int8-entropy@6+fp32path`);
the FP16 path is the unmarked default. `placement` lists the placement rules (trtlab.quantization.placement.RULES);
None means the float path's default (DEFAULT_RULES on the FP16 path, LEGACY_RULES on the FP32 path), and rules that
differ from it show in the label ('+no-pool', '+gemv'). `recovery` names the recovery methods
(trtlab.quantization.recovery: 'equalization', 'adaround', 'bias_correction'), run in that order whatever order they
are given in; they show in the label ('+cle', '+adaround', '+biascorr') and, when any is chosen, in the identity (a
recipe without recovery keeps the identity it had before recovery existed).
"""
from __future__ import annotations

import dataclasses
import numbers
import re
from dataclasses import dataclass

import numpy as np

from trtlab.core.errors import UserValueError
from trtlab.core.workspace import hash_json
from trtlab.data.split import (DEFAULT_CALIBRATION_IMAGES, CalibrationSizeError,  # noqa: F401  (re-exported)
                               select_calibration_images)
from trtlab.graph.guards import parse_guards
from trtlab.quantization.insertion import HIGH_PRECISIONS
from trtlab.quantization.placement import DEFAULT_RULES, LEGACY_RULES, RULES, resolve_rules
from trtlab.quantization.recovery import recovery_label, resolve_methods
from trtlab.quantization.thresholds import algorithm_named

PRECISIONS = ("fp32", "fp16", "int8")


@dataclass(frozen=True)
class Recipe:
    """What a variant is. `algorithm`, `percentile`, `calibration_images`, `calibration_batch`, `seed`,
    `high_precision` and `placement` apply to int8 only; fp16 converts the graph to float16 (guards keep their nodes
    in their precision)."""

    precision: str = "int8"
    algorithm: str = "entropy"
    percentile: float = 99.99
    calibration_images: int | None = None  # None: the split's calibration images, at most DEFAULT_CALIBRATION_IMAGES
    calibration_batch: int = 8  # the first batch of this many images sets every histogram's range (statistics.py)
    guards: tuple = ()  # Guard values (texts are parsed on construction)
    seed: int = 0
    high_precision: str = "fp16"  # the INT8 float path: 'fp16' (default) or 'fp32' (the graph before issue 17)
    placement: tuple | None = None  # placement rule names; None: the float path's default (resolved on construction)
    recovery: tuple = ()  # recovery method names (quantization.recovery.METHODS), run in that table's order

    def __post_init__(self):
        if self.precision not in PRECISIONS:
            raise UserValueError(f"precision {self.precision!r} is not one of {', '.join(PRECISIONS)}",
                                 f"use one of {', '.join(PRECISIONS)}")
        if self.precision == "int8":
            algorithm_named(self.algorithm)  # an unregistered name: one line listing the registered ones
        if not isinstance(self.percentile, numbers.Real) or isinstance(self.percentile, bool):
            raise UserValueError(f"percentile {self.percentile!r} is not a number",
                                 "use e.g. percentile=99.99 (a number, not a text)")
        if not 0 < float(self.percentile) <= 100:
            raise UserValueError(f"percentile {self.percentile!r} is outside (0, 100]",
                                 "use e.g. 99.99 (the share of |x| values the threshold keeps, in %)")
        if self.calibration_images is not None:
            _check_count("calibration_images", self.calibration_images)
        _check_count("calibration_batch", self.calibration_batch)
        if not isinstance(self.seed, numbers.Integral) or isinstance(self.seed, bool):
            raise UserValueError(f"seed {self.seed!r} is not a whole number", "use e.g. seed=0")
        if self.high_precision not in HIGH_PRECISIONS:
            raise UserValueError(f"high_precision {self.high_precision!r} is not one of {', '.join(HIGH_PRECISIONS)}",
                                 "use 'fp16' (everything not quantized in FP16, the default) or 'fp32' (A/B only)")
        default = self.default_placement
        object.__setattr__(self, "placement", default if self.placement is None else
                           resolve_rules(self.placement, base=default))
        object.__setattr__(self, "recovery", resolve_methods(self.recovery))
        if self.recovery and self.precision != "int8":
            raise UserValueError(f"recovery {', '.join(self.recovery)} was asked for a {self.precision} recipe",
                                 "recovery recovers INT8 accuracy: use it with precision='int8'")
        # Every guard with its precision spelt out (issue 35): 'first_layer' and 'first_layer=fp16' make the same
        # graph on the FP16 float path, so they are one recipe — one identity, one label.
        object.__setattr__(self, "guards", tuple(g.resolved(self.int8_float_path) for g in parse_guards(self.guards)))

    @property
    def default_placement(self) -> tuple:
        """The placement rules of this recipe's float path when none are named."""
        return DEFAULT_RULES if self.high_precision == "fp16" else LEGACY_RULES

    @property
    def uses_percentile(self) -> bool:
        """Whether the algorithm reads `percentile` (only then is it part of the label and the identity)."""
        return self.precision == "int8" and "percentile" in algorithm_named(self.algorithm).parameters

    @property
    def int8_float_path(self) -> str | None:
        """The float path a guard without a precision follows (None outside INT8: there it means FP32)."""
        return self.high_precision if self.precision == "int8" else None

    @property
    def name(self) -> str:
        """Readable variant label, e.g. 'int8-entropy@64+first_layer-fp16+last_layer-fp16' (@ calibration images;
        each guard with its precision; a node guard shows its node's name, e.g. '+Conv_12-fp16')."""
        guards = "".join(f"+{g.label}" for g in self.guards)
        if self.precision == "fp32":
            return "fp32"
        if self.precision == "fp16":
            return "fp16" + guards
        algo = f"percentile{self.percentile:g}" if self.uses_percentile else self.algorithm
        # Calibration size always; batch and seed when not the defaults (they rarely change, and rarely matter).
        algo += f"@{self.calibration_images or 'auto'}" \
            + (f"b{self.calibration_batch}" if self.calibration_batch != 8 else "") \
            + (f"s{self.seed}" if self.seed else "")
        algo += ("+fp32path" if self.high_precision == "fp32" else "") + self.placement_label \
            + recovery_label(self.recovery)
        name = re.sub(r"[^A-Za-z0-9_.+=@-]", "_", f"int8-{algo}") + guards
        return name if len(name) <= 80 else f"int8-{algo}+{len(self.guards)}guards-{hash_json(self.guard_texts, 8)}"

    @property
    def placement_label(self) -> str:
        """'' for the float path's default rules; else '+no-<rule>' per default rule left out and '+<rule>' per
        rule added (short names, e.g. '+no-pool+gemv')."""
        default = set(self.default_placement)
        return "".join(f"+no-{RULES[n].label}" for n in RULES if n in default and n not in self.placement) \
            + "".join(f"+{RULES[n].label}" for n in RULES if n in self.placement and n not in default)

    @property
    def guard_texts(self) -> list[str]:
        """The guards as their canonical texts (what is stored and hashed)."""
        return [str(g) for g in self.guards]

    def to_dict(self) -> dict:
        if self.precision == "fp32":
            return {"precision": "fp32"}
        if self.precision == "fp16":
            return {"precision": "fp16", "guards": self.guard_texts}
        data = dataclasses.asdict(self)
        data["guards"] = self.guard_texts
        data["placement"] = list(self.placement)
        if not self.uses_percentile:
            data.pop("percentile")
        if self.recovery:
            data["recovery"] = list(self.recovery)
        else:  # recipes without recovery keep the identity (and stored results) they had before it existed
            data.pop("recovery")
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "Recipe":
        listed = ("guards", "placement", "recovery")
        return cls(**{k: (tuple(v) if k in listed and v is not None else v) for k, v in data.items()})

    @classmethod
    def of(cls, item) -> "Recipe":
        """A Recipe from what a notebook passes (a Recipe or a dict of its fields); a misspelt field or another
        type is one UserValueError line naming the fields there are."""
        if isinstance(item, cls):
            return item
        fields = [f.name for f in dataclasses.fields(cls)]
        if not isinstance(item, dict):
            raise UserValueError(f"recipe {item!r} is not a Recipe or a dict of its fields",
                                 f"write e.g. Recipe(precision='int8', algorithm='entropy') or "
                                 f"{{'algorithm': 'minmax'}} (fields: {', '.join(fields)})")
        unknown = sorted(str(k) for k in item if k not in fields)
        if unknown:
            raise UserValueError(f"recipe field(s) {', '.join(map(repr, unknown))} do not exist",
                                 f"use only {', '.join(fields)}")
        return cls.from_dict(item)


def recipes_of(recipes) -> list[Recipe]:
    """The recipes a notebook passes — one Recipe or dict, or a list of them — as a list of Recipes."""
    if recipes is None:
        raise UserValueError("no recipes given", "pass e.g. [Recipe(algorithm='entropy'), {'algorithm': 'minmax'}]")
    if isinstance(recipes, (Recipe, dict)):
        recipes = [recipes]
    return [Recipe.of(r) for r in recipes]


def _check_count(field: str, value) -> None:
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1:
        raise UserValueError(f"{field} {value!r} must be a whole number ≥ 1", f"use e.g. {field}=8")


def select_calibration_indices(cache, calibration_indices, recipe: Recipe) -> tuple[Recipe, np.ndarray]:
    """(recipe with its calibration size made explicit, the images it calibrates on), by the one calibration-image
    rule (trtlab.data.split.select_calibration_images): the first `recipe.calibration_images` decodable images of
    the split's calibration set (None: all, at most DEFAULT_CALIBRATION_IMAGES)."""
    try:
        indices = select_calibration_images(cache, calibration_indices, recipe.calibration_images)
    except CalibrationSizeError as exc:
        raise CalibrationSizeError(f"{recipe.name}: {exc.what}", exc.fix) from None
    if recipe.calibration_images is None:
        recipe = dataclasses.replace(recipe, calibration_images=len(indices))
    return recipe, indices
