"""The results store: per variant, per image top-5 indices/probabilities and float16 logits, plus a run record.

Inference writes here once; metrics, dashboards and reports only read. One folder per experiment (model sha256,
dataset fingerprint, evaluation images, preprocessing — see identity.py), one `<label>.npz` + `<label>.json` pair
per variant, each written atomically.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from trtlab.evaluation.identity import STORE_SCHEMA
from trtlab.core.workspace import atomic_path, atomic_write_json, read_json_checked, read_npz_checked, set_aside, workspace_dir

RESULT_ARRAYS = ("image_ids", "labels", "top5_indices", "top5_probs", "logits")


@dataclass
class VariantResult:
    variant: str
    image_ids: list[str]
    labels: np.ndarray  # int64, -1 = unlabelled
    top5_indices: np.ndarray  # (N, 5) int32
    top5_probs: np.ndarray  # (N, 5) float32
    logits: np.ndarray  # (N, classes) float16
    record: dict = field(default_factory=dict)
    # Paired figures against another loaded result, computed once (a 50,000-image A/B's report and verdict ask for
    # the same pairs ~20 times; issue 38). A result is read-only once made; the other result is kept with its
    # figures, so an id is never matched to a different object.
    _paired: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def paired(self, what: str, other: "VariantResult", compute):
        """`compute()` once per (what, other): the memo of the paired figures above."""
        key = (what, id(other))
        hit = self._paired.get(key)
        if hit is None or hit[0] is not other:
            hit = self._paired[key] = (other, compute())
        return hit[1]

    @property
    def top1(self) -> np.ndarray:
        return self.top5_indices[:, 0]

    @property
    def valid(self) -> np.ndarray:
        """Rows with a prediction: an image whose outputs were NaN/inf has top-5 indices −1 (evaluation.outputs)
        and is left out of every score."""
        return self.top5_indices[:, 0] >= 0 if len(self.top5_indices) and self.top5_indices.shape[1] else \
            np.ones(len(self.image_ids), bool)

    @property
    def non_finite(self) -> int:
        """How many images gave non-finite outputs (no prediction)."""
        return int((~self.valid).sum())

    def __len__(self) -> int:
        return len(self.image_ids)

    def align(self, other: "VariantResult") -> tuple[np.ndarray, np.ndarray]:
        """Row indices into self and other for the images both hold (same id) with a prediction in both (rows with
        non-finite outputs are left out of every comparison), in self's order."""
        return self.paired("align", other, lambda: self._align(other))

    def _align(self, other: "VariantResult") -> tuple[np.ndarray, np.ndarray]:
        other_valid, my_valid = other.valid, self.valid
        position = {image_id: i for i, image_id in enumerate(other.image_ids) if other_valid[i]}
        mine = [i for i, image_id in enumerate(self.image_ids) if image_id in position and my_valid[i]]
        return np.asarray(mine, np.int64), np.asarray([position[self.image_ids[i]] for i in mine], np.int64)


def softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits.astype(np.float32) - logits.max(axis=1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=1, keepdims=True)


def top5_from_logits(logits: np.ndarray, k: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """Top-k classes and softmax confidences of logits (rows with NaN/inf: indices −1, confidences NaN). Model
    outputs that may be probabilities already go through evaluation.outputs.interpret_outputs instead."""
    from trtlab.evaluation.outputs import interpret_outputs

    outputs = interpret_outputs(logits, k=k, kind="logits")
    return outputs.top5_indices, outputs.top5_probs


_VARIANT_NAME = re.compile(r"^[A-Za-z0-9_.+@~-]{1,100}$")
STORE_FILE = "store.json"
#: The last head-to-head verdict stated on this store's variants (views.decision.Verdict.record): what notebook 03
#: recommended, which notebook 04 compares by default and notebook 05 debugs (issue 35).
VERDICT_FILE = "verdict.json"
LOCK_FILE = ".lock"
_held = threading.local()  # .folders: store folder → how deep this thread holds the store's lock
_held_guard = threading.Lock()
_thread_locks: dict = {}  # store folder → the lock that keeps this process's threads apart


class ResultsStore:
    """Results of every variant of one experiment (model, evaluation images, preprocessing; see identity.py).

    `store.json` names the experiment; each variant is `<label>.npz` + `<label>.json`, the record carrying the
    variant's key. A label stays with one variant key: a different variant gets a different label.
    """

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)
        # variant → (the two files' (inode, size, mtime), its VariantResult): a file replaced on disk (saves are
        # atomic renames: a new inode) is read again; an unchanged one is the same object, with its paired memo
        self._loaded: dict = {}

    @classmethod
    def for_experiment(cls, experiment, workspace=None) -> "ResultsStore":
        """The store of `experiment` (identity.Experiment) under <workspace>/results, created when new."""
        store = cls(cls.folder_for(experiment, workspace))
        store.bind(experiment)
        return store

    @staticmethod
    def folder_for(experiment, workspace=None) -> Path:
        """Where the store of `experiment` is (or would be), without creating it: its folder, or the one an earlier
        trtlab named it by when only that one exists (kept and used)."""
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{experiment.dataset_name[:32]}-{experiment.model_name[:24]}")
        folder = workspace_dir(workspace) / "results" / f"{name}-{experiment.key}"
        earlier = folder.with_name(f"{name}-{experiment.earlier_key}")
        return earlier if not folder.exists() and earlier.exists() else folder

    # -- identity ------------------------------------------------------------------------------------------------
    @property
    def experiment(self):
        """The experiment this store holds (None for a store that records none: built by hand, or empty)."""
        from trtlab.evaluation.identity import Experiment

        path = self.folder / STORE_FILE
        raw = (read_json_checked(path) or {}).get("experiment") if path.exists() else None
        if raw is None:  # store.json damaged (set aside) or lost: the records carry the experiment too
            raw = next((r["experiment"] for r in map(read_json_checked, self._record_paths())
                        if r and r.get("experiment")), None)
        return Experiment.from_dict(raw) if raw else None

    def is_legacy(self) -> bool:
        """Written by trtlab 0.1: variants stored, but no store.json and no schema in the records."""
        if (self.folder / STORE_FILE).exists():
            return False
        return any("schema" not in (read_json_checked(p) or {"schema": None}) for p in self._record_paths())

    def check_identity(self) -> None:
        from trtlab.evaluation.identity import LegacyStoreError

        if self.is_legacy():
            raise LegacyStoreError(
                f"{self.folder} was written by trtlab 0.1, which recorded neither the model of each result nor the "
                f"calibration settings (results of different models could share it), so it cannot be trusted",
                f"rebuild it by re-running what made it (python -m trtlab demo, eval or calibrate) and delete the "
                f"old folder (rm -r {self.folder})")

    def bind(self, experiment) -> None:
        """Make this the store of `experiment`; refuse when it already holds another experiment."""
        from trtlab.evaluation.identity import MixedExperimentError

        self.check_identity()
        current = self.experiment
        if current is None and (self.folder / STORE_FILE).exists() and self.variants():
            raise MixedExperimentError(f"{self.folder} holds results without experiment identity",
                                       f"results of {experiment.describe()} go to a store of their own: leave "
                                       f"store=None")
        if current is not None:
            if current.key != experiment.key:
                raise MixedExperimentError(
                    f"{self.folder} holds {current.describe()}, not {experiment.describe()} (they differ in "
                    f"{', '.join(current.differences(experiment))}); each results store holds one experiment",
                    "leave store=None: trtlab picks (or makes) the store of this model and data")
            return
        atomic_write_json(self.folder / STORE_FILE, {"schema": STORE_SCHEMA, "experiment": experiment.to_dict()})

    def _record_paths(self) -> list[Path]:
        if not self.folder.is_dir():
            return []
        return [p for p in self.folder.glob("*.json") if p.name != STORE_FILE and p.with_suffix(".npz").exists()]

    def variants(self) -> list[str]:
        """Stored variant labels, oldest first."""
        found = self._record_paths()
        return [p.stem for p in sorted(found, key=lambda p: (p.stat().st_mtime, p.stem))]

    def __contains__(self, variant: str) -> bool:
        npz, record = self.folder / f"{variant}.npz", self.folder / f"{variant}.json"
        return npz.exists() and record.exists() and self._intact(variant)

    def _intact(self, variant: str) -> bool:
        """Cheap damage check (the record parses, the .npz's zip directory lists the arrays); a damaged pair is
        set aside (named in a warning) so the variant counts as not stored and is evaluated again."""
        import zipfile

        npz, record = self.folder / f"{variant}.npz", self.folder / f"{variant}.json"
        try:
            with zipfile.ZipFile(npz) as archive:
                names = {n.removesuffix(".npy") for n in archive.namelist()}
            missing = [k for k in RESULT_ARRAYS if k not in names]
            reason = f"arrays {missing} missing" if missing else None
        except (zipfile.BadZipFile, OSError, ValueError) as exc:
            reason = f"{type(exc).__name__}: {exc}"
        if reason is not None:
            set_aside(npz, reason)
        if read_json_checked(record) is None or reason is not None:
            for path in (npz, record):  # never leave half a variant behind
                if path.exists():
                    set_aside(path, "its other half was damaged")
            return False
        return True

    def record(self, variant: str) -> dict:
        return read_json_checked(self.folder / f"{variant}.json") or {}

    def find(self, variant_key: str) -> str | None:
        """The label under which the variant with this key is stored, if it is."""
        return next((p.stem for p in self._record_paths()
                     if (read_json_checked(p) or {}).get("variant_key") == variant_key and p.stem in self), None)

    @contextlib.contextmanager
    def locked(self):
        """Exclusive lock on this store for choosing a label and saving under it: evaluation processes on several
        GPUs (and threads) write one store, and each file is written atomically, but two writers must not pick the
        same free label. flock on <folder>/.lock between processes, a lock per folder between threads; re-entrant
        in a thread. Where flock does not exist, only threads are kept apart."""
        key = str(self.folder.resolve())
        held = _held.__dict__.setdefault("folders", {})
        if held.get(key):
            held[key] += 1
            try:
                yield
            finally:
                held[key] -= 1
            return
        with _held_guard:
            thread_lock = _thread_locks.setdefault(key, threading.Lock())
        with thread_lock:
            self.folder.mkdir(parents=True, exist_ok=True)
            with open(self.folder / LOCK_FILE, "a+") as handle:
                try:
                    import fcntl
                except ImportError:  # not POSIX
                    fcntl = None
                if fcntl is not None:
                    fcntl.flock(handle, fcntl.LOCK_EX)
                held[key] = 1
                try:
                    yield
                finally:
                    held.pop(key, None)
                    if fcntl is not None:
                        fcntl.flock(handle, fcntl.LOCK_UN)

    def label_for(self, label: str, variant_key: str | None, identity: dict | None = None,
                  backend: str | None = None) -> str:
        """The label to store a variant under: `label` when free or already this variant's; `label@<backend>` when
        it holds the same variant evaluated on another backend (the first backend keeps the plain label); else
        `label~<key>` (free_label)."""
        if label not in self or self.record(label).get("variant_key") == variant_key:
            return label
        if backend and identity is not None:
            from trtlab.evaluation.identity import backend_of, same_variant

            other = self.record(label)
            if same_variant(other.get("identity"), identity) and backend_of(other) != backend:
                return self.free_label(f"{label}@{backend}", variant_key)
        return self.free_label(label, variant_key)

    def free_label(self, label: str, variant_key: str | None) -> str:
        """`label` when it is free or already this variant's; else `label~<key>` (two variants that share a
        readable name, e.g. calibrated on different image sets, both stay)."""
        key = variant_key or "nokey"
        # longer key prefixes, then a counter, when a shorter one is taken by yet another variant
        candidates = [label] + [f"{label}~{key[:n]}" for n in (6, 10, 16) if n <= len(key)] + [f"{label}~{key}"]
        candidates += [f"{label}~{key[:6]}-{k}" for k in range(2, 1000)]
        for candidate in candidates:
            if candidate not in self or self.record(candidate).get("variant_key") == variant_key:
                return candidate
        raise ValueError(f"{self.folder} holds over 1000 variants labelled {label!r}; choose another label")

    def save(self, result: VariantResult, replaces: str | None = None) -> Path:
        """Write `result` under its label (atomically, under the store's lock). A label holding another variant key
        is never overwritten, except `replaces`: the key of an older record of this very variant (e.g. stored
        before the backend was part of the identity)."""
        with self.locked():
            return self._save(result, replaces)

    def _save(self, result: VariantResult, replaces: str | None) -> Path:
        if not _VARIANT_NAME.match(result.variant):
            raise ValueError(f"variant name {result.variant!r} must be 1-100 letters, digits or _.+@~-")
        from trtlab.evaluation.identity import experiment_of

        experiment = experiment_of(result.record)
        if experiment is not None:
            self.bind(experiment)
        elif not (self.folder / STORE_FILE).exists():  # results without identity (made by hand): say so, once
            self.check_identity()
            atomic_write_json(self.folder / STORE_FILE, {"schema": STORE_SCHEMA, "experiment": None})
        key = result.record.get("variant_key")
        if result.variant in self and self.record(result.variant).get("variant_key") not in (key, replaces or key):
            raise ValueError(f"{self.folder / result.variant}.npz holds another variant (key "
                             f"{self.record(result.variant).get('variant_key')}, not {key}); refusing to overwrite it "
                             f"— store this one under store.free_label({result.variant!r}, key)")
        self.folder.mkdir(parents=True, exist_ok=True)
        # the returned result carries the date it was stored with, like one loaded from the store
        result.record.setdefault("date", _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
        record = dict(result.record)
        record["variant"] = result.variant
        record["images"] = len(result)
        record["schema"] = STORE_SCHEMA
        npz_path = self.folder / f"{result.variant}.npz"
        with atomic_path(npz_path, suffix=".npz") as tmp:
            with open(tmp, "wb") as fh:  # a file handle keeps numpy from appending another .npz
                np.savez(
                    fh,
                    image_ids=np.asarray(result.image_ids, dtype=str),
                    labels=np.asarray(result.labels, np.int64),
                    top5_indices=np.asarray(result.top5_indices, np.int32),
                    top5_probs=np.asarray(result.top5_probs, np.float32),
                    logits=np.asarray(result.logits, np.float16),
                )
        # The record is written last: a variant counts as stored only when both files exist.
        atomic_write_json(self.folder / f"{result.variant}.json", record)
        return npz_path

    def load(self, variant: str) -> VariantResult:
        self.check_identity()
        if variant not in self:
            known = ", ".join(self.variants()) or "none"
            raise KeyError(f"no stored results for variant {variant!r} in {self.folder} (stored: {known}); "
                           f"evaluate it first")
        signature = self._signature(variant)
        cached = self._loaded.get(variant)
        if cached is not None and signature is not None and cached[0] == signature:
            return cached[1]
        arrays = read_npz_checked(self.folder / f"{variant}.npz", RESULT_ARRAYS, same_length=True)
        record = read_json_checked(self.folder / f"{variant}.json")
        if arrays is None or record is None:  # damaged beyond the cheap check: set aside, named, evaluate again
            for path in (self.folder / f"{variant}.npz", self.folder / f"{variant}.json"):
                if path.exists():
                    set_aside(path, "its other half was damaged")
            from trtlab.core.errors import DamagedArtefact

            raise DamagedArtefact(f"the stored results of {variant!r} in {self.folder} were damaged and have been "
                                  f"set aside", "run the evaluation again; it recomputes them")
        result = VariantResult(variant, arrays["image_ids"].tolist(), arrays["labels"], arrays["top5_indices"],
                               arrays["top5_probs"], arrays["logits"], record)
        for array in (result.labels, result.top5_indices, result.top5_probs, result.logits):
            array.flags.writeable = False  # shared by every later load of the unchanged files
        if signature is not None:
            self._loaded[variant] = (signature, result)
        return result

    def _signature(self, variant: str):
        try:
            stats = [os.stat(self.folder / f"{variant}{suffix}") for suffix in (".npz", ".json")]
        except OSError:
            return None
        return tuple((s.st_ino, s.st_size, s.st_mtime_ns) for s in stats)

    def load_all(self, variants=None) -> dict[str, VariantResult]:
        return {v: self.load(v) for v in (variants or self.variants())}

    def save_verdict(self, record: dict) -> None:
        """Keep the verdict just stated (views.decision.Verdict.record()) as this store's last one. A store that
        cannot be written (a finished workspace attached read-only) keeps the one it has."""
        try:
            atomic_write_json(self.folder / VERDICT_FILE, record)
        except PermissionError:
            pass

    def last_verdict(self) -> dict | None:
        """The last verdict stated on this store's variants, while both its variants are still stored; else
        None (a damaged file is set aside by read_json_checked)."""
        path = self.folder / VERDICT_FILE
        record = read_json_checked(path) if path.exists() else None
        if not record or not all(record.get(k) in self for k in ("first", "second", "reference")):
            return None
        return record

    def describe(self) -> str:
        experiment = self.experiment
        return experiment.describe() if experiment else f"results in {self.folder}"
