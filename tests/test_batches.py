"""The one batch source (trtlab.data.batches): calibration, evaluation and debugging read the same pixels in the
same batches, padded to a fixed batch in one place, with one read-ahead loop."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from trtlab.data.batches import iter_batches, read_ahead
from trtlab.data.preprocess import normalize_batch


def test_crops_and_float_batches_are_the_same_images_padded_in_one_place(demo_cache):
    indices = demo_cache.valid_indices[:5]
    crops = list(iter_batches(demo_cache, indices, 2, fixed_batch=4, prefetch=True, crops=True))
    floats = list(iter_batches(demo_cache, indices, 2, fixed_batch=4))
    assert [b.count for b in crops] == [b.count for b in floats] == [4, 1]  # the model's fixed batch wins
    for c, f in zip(crops, floats):
        assert c.images.dtype == np.uint8 and c.images.flags.c_contiguous and len(c.images) == 4
        assert np.array_equal(normalize_batch(c.images, demo_cache.preprocess), f.images)
        assert (c.images[c.count:] == c.images[c.count - 1]).all()  # padding: copies of the last real image
    assert np.array_equal(np.concatenate([b.indices for b in crops]), indices)
    plain = list(iter_batches(demo_cache, indices, 2, crops=True))
    assert [len(b.images) for b in plain] == [2, 2, 1]  # no fixed batch: the last batch is shorter
    assert [(i, c) for i, c in demo_cache.iter_batches(indices, 2)][2][1].shape[0] == 1  # the cache's own view


def test_read_ahead_keeps_order_works_one_ahead_and_passes_errors_on():
    started, lock = [], threading.Lock()

    def produce(item):
        with lock:
            started.append(item)
        if item == 4:
            raise RuntimeError("item 4 failed")
        return item * 10

    seen = []
    with pytest.raises(RuntimeError, match="item 4 failed"):
        for value in read_ahead(range(6), produce):
            seen.append((value, len(started)))
    assert [v for v, _ in seen] == [0, 10, 20, 30]
    assert all(started_then <= value // 10 + 2 for value, started_then in seen)  # at most one item ahead
    assert list(read_ahead([], produce)) == []
