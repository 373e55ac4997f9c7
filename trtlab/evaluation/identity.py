"""Who a stored number belongs to.

An **experiment** is (model sha256, dataset fingerprint, which of its images are evaluated, preprocessing): every
result in one results store shares it, and no table or plot compares results of two experiments. A **variant** is
its full recipe plus the calibration images it really used and where its scales came from (own calibration or an
imported cache, with that cache's hash); its key decides whether a stored result may be reused, and nothing is
overwritten by a result with another key. Variant, result and engine identities are one shape: `Identity`
(trtlab.core.identity), one frozen dataclass hashed one way.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from trtlab.core.errors import UserValueError
from trtlab.core.identity import Identity  # noqa: F401  (re-exported)
from trtlab.quantization.variants import variant_identity, variant_key  # noqa: F401  (re-exported)
from trtlab.core.workspace import hash_json

STORE_SCHEMA = 2  # results stores before this one (trtlab 0.1) recorded neither the experiment nor the variant key


class MixedExperimentError(UserValueError):
    """Results of different models, data or preprocessing were put side by side."""


class LegacyStoreError(UserValueError):
    """A results store written before experiment identity existed."""


@dataclass(frozen=True)
class Experiment:
    model_sha256: str
    model_name: str  # the model file's stem, for people
    dataset_name: str
    dataset_fingerprint: str  # the whole dataset: files (path and content hash) and labels
    evaluation_ids_hash: str  # which of its images are evaluated: the evaluation split
    evaluation_images: int
    preprocess: dict
    split: dict = field(default_factory=dict)  # how the evaluation images were chosen (seed, method), for people

    @property
    def key(self) -> str:
        """Its Identity's key (12 digits): model, dataset, evaluation images, preprocessing."""
        return Identity(model_sha256=self.model_sha256, preprocess=self.preprocess,
                        data={"dataset": self.dataset_fingerprint, "ids_hash": self.evaluation_ids_hash}).digest(12)

    @property
    def earlier_key(self) -> str:
        """The key an earlier trtlab named its results store by (a hash of its own dict of the same fields): such a
        store is found under that name and used as it is (ResultsStore.for_experiment)."""
        return hash_json({"model": self.model_sha256, "data": self.dataset_fingerprint,
                          "eval": self.evaluation_ids_hash, "pre": self.preprocess}, 12)

    @classmethod
    def for_evaluation(cls, model_info, cache, indices, split=None) -> "Experiment":
        """The experiment of evaluating the model `model_info` (ModelInfo of the *source* FP32 model, also for its
        INT8/FP16 variants) on the images `indices` of the decode cache `cache`."""
        from pathlib import Path

        ids = cache.dataset.image_ids()
        split_info = {} if split is None else {"seed": split.seed, "method": split.method,
                                               "calibration_images": len(split.calibration)}
        return cls(model_sha256=model_info.sha256, model_name=Path(model_info.path).stem,
                   dataset_name=cache.dataset.name, dataset_fingerprint=cache.dataset.fingerprint(),
                   evaluation_ids_hash=hash_json([ids[int(i)] for i in indices]),
                   evaluation_images=int(len(indices)), preprocess=cache.preprocess.to_dict(), split=split_info)

    def to_dict(self) -> dict:
        return {**asdict(self), "key": self.key}

    @classmethod
    def from_dict(cls, data: dict) -> "Experiment":
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})

    def short(self) -> str:
        """One line for figure titles: model [sha] · data (images) · preprocessing."""
        return (f"{self.model_name} [{self.model_sha256[:8]}] · {self.dataset_name}, {self.evaluation_images} "
                f"evaluation images [{self.dataset_fingerprint[:8]}] · {self.preprocess.get('name', 'custom')}")

    def describe(self) -> str:
        return (f"model {self.model_name} (sha256 {self.model_sha256[:12]}) on {self.dataset_name} "
                f"({self.evaluation_images} evaluation images, data {self.dataset_fingerprint[:8]}, "
                f"evaluation ids {self.evaluation_ids_hash[:8]}, preprocessing {self.preprocess.get('name', 'custom')})")

    def differences(self, other: "Experiment") -> list[str]:
        names = {"model_sha256": "model", "dataset_fingerprint": "dataset", "evaluation_ids_hash": "evaluation images",
                 "preprocess": "preprocessing"}
        return [label for attr, label in names.items() if getattr(self, attr) != getattr(other, attr)]


def experiment_of(record: dict) -> Experiment | None:
    raw = (record or {}).get("experiment")
    return Experiment.from_dict(raw) if raw else None


def check_one_experiment(results: dict) -> Experiment | None:
    """The one experiment all `results` (name → VariantResult) belong to; MixedExperimentError naming both sides
    when they belong to two. Results that record no experiment (built by hand) form a group of their own."""
    groups: dict = {}
    for name, result in results.items():
        experiment = experiment_of(result.record)
        groups.setdefault(experiment.key if experiment else None, (name, experiment))
    if len(groups) <= 1:
        return next(iter(groups.values()))[1] if groups else None
    (first, a), (second, b) = list(groups.values())[:2]
    what = ", ".join(a.differences(b)) if a and b else "experiment identity"
    raise MixedExperimentError(
        f"refusing to compare {first!r} with {second!r}: they differ in {what} — {first!r} is "
        f"{a.describe() if a else 'a result without experiment identity'}; {second!r} is "
        f"{b.describe() if b else 'a result without experiment identity'}",
        "compare variants of one model on one evaluation set (each results store holds one experiment; "
        "`python -m trtlab dashboard --list` shows them)")


# -- the backend a result was computed on ----------------------------------------------------------------------------
class MixedBackendError(UserValueError):
    """Results computed on different backends were put side by side without allow_mixed_backends."""


def backend_label(description: dict | None) -> str | None:
    """'ort-cpu', 'torch-cuda', 'trt', ... from a run record's backend description (records written before the
    backend was part of the identity have no 'identity' there: derived from the runner and its providers)."""
    if not description:
        return None
    if description.get("identity"):
        return str(description["identity"])
    backend = description.get("backend")
    if backend == "ort":
        providers = description.get("providers") or ["CPUExecutionProvider"]
        return f"ort-{str(providers[0]).removesuffix('ExecutionProvider').lower()}"
    if backend == "torch":
        return f"torch-{'cpu' if str(description.get('device', 'cpu')) == 'cpu' else 'cuda'}"
    return backend


def backend_of(record: dict | None) -> str | None:
    """What computed a stored result: the backend in its identity, else its run record's backend (None for results
    made by hand, which are compared with anything)."""
    record = record or {}
    named = (record.get("identity") or {}).get("backend")
    if isinstance(named, dict):  # TensorRT engines: {"name": "trt", engine facts...}
        named = named.get("name")
    return str(named) if named else backend_label(record.get("backend"))


def without_backend(identity) -> Identity:
    """A variant's identity (an Identity or a stored dict of one) apart from the backend it was evaluated on, and
    the batch size where that backend's numbers depend on it (the same variant on two backends)."""
    return Identity.of(identity).replace(backend=None, batch_size=None)


def same_variant(a, b) -> bool:
    """Whether two result identities (Identity or stored dicts) are one variant, whichever backend computed them and
    whichever graph the code made for it (a result of an older graph is this variant's, to be replaced)."""
    return without_backend(a).replace(model_sha256=None) == without_backend(b).replace(model_sha256=None)


def check_one_backend(results: dict, allow_mixed_backends: bool = False) -> dict | None:
    """None when every result of `results` (name → VariantResult) was computed on one backend; else name → backend
    when `allow_mixed_backends`, and MixedBackendError naming two of them otherwise."""
    backends = {name: backend_of(result.record) for name, result in results.items()}
    distinct = {}
    for name, backend in backends.items():
        if backend is not None:
            distinct.setdefault(backend, name)
    if len(distinct) <= 1:
        return None
    if allow_mixed_backends:
        return backends
    (a, first), (b, second) = list(distinct.items())[:2]
    raise MixedBackendError(
        f"refusing to compare {first!r} (evaluated on {a}) with {second!r} (on {b}): two literal implementations "
        f"of one graph differ by float summation order, which flips INT8 roundings, so their differences are not "
        f"the variants' own",
        f"compare variants evaluated on one backend (choose them with variants=[...]), or pass "
        f"allow_mixed_backends=True (--allow-mixed-backends) to compare them anyway")


def mixed_backends_note(backends: dict) -> str:
    """The line a table or dashboard shows when it compares results of several backends (asked for)."""
    groups: dict = {}
    for name, backend in backends.items():
        groups.setdefault(backend or "unknown", []).append(name)
    listed = "; ".join(f"{backend}: {', '.join(names)}" for backend, names in groups.items())
    return (f"Mixed backends (allow_mixed_backends=True): {listed}. Differences between these groups include float "
            f"summation order, which flips INT8 roundings — not only the variants' own differences.")
