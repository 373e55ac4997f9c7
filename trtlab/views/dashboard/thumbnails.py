"""Thumbnails for the flips gallery, looked up by image id without running any model."""
from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np

from trtlab.evaluation.results import VariantResult

log = logging.getLogger(__name__)


class Thumbnails:
    """Crops of stored images, looked up by image id without running any model.

    Sources, in order: the decode cache passed in; the decode cache the results were evaluated from (found in the
    workspace through the run record); the original file (absolute id, or `image_root`/id) decoded with the
    record's preprocessing; a grey placeholder when the image cannot be found.
    """

    def __init__(self, result: VariantResult, store_folder=None, decode_cache=None, image_root=None):
        self.record = result.record
        self.image_root = Path(image_root) if image_root else None
        self.missing: list[str] = []
        self._crops = None
        self._index: dict[str, int] = {}
        self._crop_size = int((self.record.get("preprocess") or {}).get("crop", 224))
        if decode_cache is not None:
            self._use_cache(decode_cache.crops, decode_cache.dataset.image_ids(), decode_cache.valid_indices)
        elif store_folder is not None:
            self._find_cache(Path(store_folder), result)

    def _use_cache(self, crops, ids, decoded):
        self._crops = crops
        decoded = set(int(i) for i in decoded)
        self._index = {image_id: i for i, image_id in enumerate(ids) if i in decoded}
        self._crop_size = int(crops.shape[1])

    def _find_cache(self, store_folder: Path, result: VariantResult) -> None:
        """The decode cache named in the run record, in the workspace the store lives in (read-only)."""
        from trtlab.data.decode_cache import UnreadableCache, open_decode_cache

        dataset = self.record.get("dataset") or {}
        key, fingerprint = dataset.get("decode_cache"), dataset.get("fingerprint")
        if not key or not fingerprint or store_folder.parent.name != "results":
            return
        try:
            stored = open_decode_cache(key, store_folder.parent.parent, fingerprint=fingerprint)
        except UnreadableCache as exc:
            log.debug("thumbnails from the original files: %s", exc)
            return
        decoded = stored.valid_indices
        # Evaluation stores the decoded images in cache order, so the k-th stored id is the k-th decoded crop.
        if len(decoded) == len(result.image_ids):
            self._crops = stored.crops
            self._index = {image_id: int(i) for image_id, i in zip(result.image_ids, decoded)}
            self._crop_size = int(stored.crops.shape[1])

    def get(self, image_id: str) -> tuple[np.ndarray, bool]:
        """(uint8 HWC image, found). `found` is False for the placeholder."""
        if self._crops is not None and image_id in self._index:
            return np.asarray(self._crops[self._index[image_id]]), True
        from trtlab.data.preprocess import ImageDecodeError, decode_image, get_preprocess

        candidates = [Path(image_id)] if os.path.isabs(image_id) else []
        if self.image_root is not None:
            candidates.insert(0, self.image_root / image_id)
        spec = get_preprocess(self.record["preprocess"]) if self.record.get("preprocess") else get_preprocess("tf-lite")
        for path in candidates:
            if path.is_file():
                try:
                    return decode_image(path, spec), True
                except ImageDecodeError:
                    break
        self.missing.append(image_id)
        return np.full((self._crop_size, self._crop_size, 3), 200, np.uint8), False
