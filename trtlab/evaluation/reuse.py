"""Which stored result an evaluation is: the label a variant's result is stored under (also in the forms older
trtlab versions keyed it), and whether it can be reused as it is."""
from __future__ import annotations

import logging

from trtlab.core.errors import DamagedArtefact
from trtlab.core.identity import Identity
from trtlab.evaluation.results import ResultsStore

log = logging.getLogger("trtlab.evaluation.evaluate")  # the lines users know come from the evaluation


def reusable_result(store: ResultsStore, label: str | None, info, image_ids: list, progress: bool):
    """The stored result under `label` when it was computed from this model file on these images, else None."""
    if label is None:
        return None
    try:
        stored = store.load(label)
    except DamagedArtefact:  # set aside (named) by the store: evaluated again now
        return None
    if stored.record.get("model_sha256") != info.sha256 or stored.image_ids != image_ids:
        return None
    if progress:
        log.info(f"{label}: reusing stored results ({len(stored)} images) from {store.folder}")
    return stored


def find_stored(store: ResultsStore, identity: Identity, key: str, backend: str) -> tuple[str | None, str | None]:
    """(label of the stored result of this variant on this backend, or None; the older key it is stored under:
    then it is replaced, not kept beside it). An older key is this variant's result
    - computed from another graph (the code makes the graph differently now: the graph's sha256 differs), or
      stored before the graph's sha256 was part of the identity — reused only when its record names this very
      graph (reusable_result), else evaluated again and replaced;
    - stored before the batch size was part of the identity, when its record names this batch size;
    - stored before the backend was part of the identity, when its record names this backend (and batch size)."""
    from trtlab.evaluation.identity import backend_of, variant_key, without_backend

    label = store.find(key)
    if label is not None:
        return label, None
    ours = identity.replace(model_sha256=None)
    older_forms = {variant_key(ours): "graph"}
    if identity.batch_size is not None:
        older_forms.setdefault(variant_key(ours.replace(batch_size=None)), "batch")
    older_forms.setdefault(variant_key(without_backend(ours)), "backend")
    for stored_label in store.variants():
        record = store.record(stored_label)
        form = older_forms.get(_key_without_graph(record))
        if form is None or stored_label not in store:
            continue
        same_batch = identity.batch_size is None or record.get("batch_size") == identity.batch_size
        if form == "graph" or (form == "batch" and record.get("batch_size") == identity.batch_size) or \
                (form == "backend" and backend_of(record) == backend and same_batch):
            return stored_label, record.get("variant_key")
    return None, None


def _key_without_graph(record: dict) -> str | None:
    """A stored result's key with the graph's sha256 left out of its identity (records written before it was part
    of the identity are keyed without it already)."""
    stored = record.get("identity")
    if not isinstance(stored, dict) or not stored.get("model_sha256"):
        return record.get("variant_key")
    try:
        return Identity.of(stored).replace(model_sha256=None).key
    except (TypeError, ValueError):  # a record from a newer trtlab with fields this one does not know
        return None
