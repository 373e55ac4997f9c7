"""What a stored artefact is made from — a variant's graph, an evaluation result, a TensorRT engine, and every
cache the workspace keeps — in one shape, hashed one way.

`Identity` is one frozen dataclass for all of them; each fills the fields that make it what it is:
- a variant's graph (quantization.variants: its folder name and variant.json): model, recipe, calibration images,
  where the scales came from, preprocessing, the variant code's revision and the fingerprint of the code that
  makes it (`code`, core.fingerprint);
- a result (evaluation.evaluate: its `variant_key` in the results store): recipe, calibration, scales, the sha256 of
  the graph that computed it (a graph the code makes differently is a new result) and the backend that ran it (the
  model, images and preprocessing are the store's experiment);
- an engine (backends.tensorrt.build: its file name and sidecar): the graph's sha256, the build options as its
  recipe, the variant it was built from, TensorRT's calibration;
- the caches: calibration statistics, a sanitized model, a decode cache, a split, an experiment's results store,
  an evaluation checkpoint, TensorRT's calibration cache, the debugger's saved work (their modules say which
  fields).
Its key is sha256 of its canonical JSON (core.workspace.hash_json) over the fields that are set: a field that is
None is not part of an identity, so a field added later (default None) changes no earlier key.
"""
from __future__ import annotations

import dataclasses
import functools
import json
from dataclasses import dataclass

from trtlab.core.workspace import canonical_json, hash_json

KEY_LENGTH = 16


@dataclass(frozen=True)
class Identity:
    recipe: dict | None = None  # Recipe.to_dict(); an engine's build options
    model_sha256: str | None = None  # the graph it was made from (variants, engines)
    calibration: dict | None = None  # the images calibration used (ids hash, count, batch, seed, revision)
    scales: dict | None = None  # where the scales came from: {"source": "calibration"}, an imported cache, ...
    preprocess: dict | None = None  # the calibration images' preprocessing (variants)
    revision: int | None = None  # the code revision of what made it (quantization.variants.VARIANT_REVISION)
    variant: dict | None = None  # an engine's variant: {"label", "key"}
    tensorrt: str | None = None  # 'weakly typed': TensorRT 10's legacy network (another engine than the graph's)
    backend: str | dict | None = None  # what computed a result: 'ort-cpu', 'torch-cuda', {"name": "trt", ...}
    batch_size: int | None = None  # a result's evaluation batch, where its backend's numbers depend on it
    code: dict | None = None  # fingerprints of the code that made it, {"graph": …, "statistics": …}: core.fingerprint
    data: dict | None = None  # the images it was computed on, other than calibration's: dataset, ids hash, count
    options: dict | None = None  # settings that change it and have no field above (a split's sizes, runner options)

    def __post_init__(self):
        for f in dataclasses.fields(self):  # plain JSON values, copied: nothing shared with the caller
            value = getattr(self, f.name)
            if isinstance(value, (dict, list, tuple)):
                object.__setattr__(self, f.name, json.loads(canonical_json(value)))

    def to_dict(self) -> dict:
        """The fields that are set (what is stored and hashed)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if getattr(self, f.name) is not None}

    def to_json(self) -> dict:
        return self.to_dict()

    def digest(self, length: int = KEY_LENGTH) -> str:
        """sha256 of the canonical JSON of `to_dict()`, the first `length` hex digits."""
        return hash_json(self.to_dict(), length)

    @functools.cached_property
    def key(self) -> str:
        """digest(), computed once: the fields cannot be reassigned and are copies nothing else holds
        (__post_init__). cached_property writes the instance __dict__, which a frozen dataclass without slots
        allows."""
        return self.digest()

    def __hash__(self) -> int:
        return hash(self.key)

    def replace(self, **changes) -> "Identity":
        return dataclasses.replace(self, **changes)

    @classmethod
    def of(cls, value) -> "Identity":
        """An Identity from an Identity, a stored dict of its fields (a run record's, a variant.json's) or None
        (the empty identity). A dict with other keys was not written as an Identity: refused, naming them."""
        if isinstance(value, cls):
            return value
        data = dict(value or {})
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"identity fields {unknown} are not Identity's ({', '.join(sorted(names))})")
        return cls(**data)


__all__ = ["Identity", "KEY_LENGTH"]
