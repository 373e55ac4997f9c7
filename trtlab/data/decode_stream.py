"""The rest of a decode in the background, its rows handed to the evaluation as soon as they are committed.

compare() decodes the calibration images first (build_decode_cache(first=...)), then `decode_in_background`
decodes the other pending rows with the same worker pool, off the calling thread, while the variants are
evaluated. `RowStream.batches` yields the decoded rows of the evaluation images in their order, in batches of
exactly the rows the sequential path would batch (failed rows left out as there), so every stored result is the
same bit for bit. Rows are handed on only once their chunk is committed (data synced, checksums and status saved),
so a kill at any point leaves the cache resumable as before.
"""
from __future__ import annotations

import threading

import numpy as np

from trtlab.data.decode_files import DECODED, PENDING


class BackgroundDecode:
    """A decode cache's pending rows decoded in a background thread, in `order`. Use as a context manager: leaving
    the block stops it (after the chunks in flight) and waits for it; `finish()` waits for the whole decode."""

    def __init__(self, cache, order):
        self.cache, self.order = cache, np.asarray(order, np.int64)
        self.settled = np.ones(len(cache.status), bool)  # rows not in `order` are decoded, failed or left alone
        self.settled[self.order] = False
        self._changed = threading.Condition()
        self._stop, self._done, self.error = threading.Event(), False, None
        self._thread = threading.Thread(target=self._work, name="trtlab-decode-rest", daemon=True)
        self._thread.start()

    def _work(self) -> None:
        run = self.cache.decoder
        try:
            run.decode(self.order, run.pool, self.cache.workers, run.chunk_size, None, on_commit=self._committed,
                       stop=self._stop)
        except BaseException as exc:  # raised again in the evaluating thread, where it is waited for
            self.error = exc
        finally:
            with self._changed:
                self._done = True
                self._changed.notify_all()

    def _committed(self, rows: np.ndarray) -> None:
        with self._changed:
            self.settled[rows] = True
            self._changed.notify_all()

    def wait_for(self, rows) -> None:
        """Block until every row of `rows` is committed (decoded, failed or left for the next run)."""
        rows = np.asarray(rows, np.int64)
        with self._changed:
            while not self.settled[rows].all():
                if self._done:
                    raise self.error or RuntimeError("the background decode ended before these rows were decoded")
                self._changed.wait(0.5)  # in steps: Ctrl-C stays responsive

    def finish(self) -> None:
        """Wait for the whole decode (its error raised here); the cache then counts what it decoded."""
        while self._thread.is_alive():
            self._thread.join(0.5)
        if self.error is not None:
            raise self.error
        run = self.cache.decoder
        self.cache.decoded_now, self.cache.decode_seconds = run.decoded, run.seconds

    def rows(self, requested) -> "RowStream":
        return RowStream(self, requested)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._stop.set()  # a failed evaluation stops the decode; what was committed stays for the next run
        while self._thread.is_alive():
            self._thread.join(0.5)
        return False


class RowStream:
    """The evaluation images `requested` of a decode that runs in the background: `batches(rows, skip)` yields
    their decoded rows in order as they are committed; `final()` is what `requested` holds decoded at the end.
    `stream[k:]` leaves out the first k decoded rows (an evaluation resumed after k images)."""

    def __init__(self, decode: BackgroundDecode, requested, skip: int = 0):
        self.decode, self.requested, self.skip = decode, np.asarray(requested, np.int64), int(skip)

    def __len__(self) -> int:
        return len(self.requested) - self.skip  # at most: rows that fail to decode are left out

    def __getitem__(self, key):
        if not isinstance(key, slice) or key.stop is not None or key.step not in (None, 1):
            raise TypeError("a RowStream is sliced as stream[k:] only")
        return RowStream(self.decode, self.requested, self.skip + (key.start or 0))

    def batches(self, rows: int):
        """Decoded rows of `requested`, in order, `rows` at a time (the last batch shorter), after the first `skip`
        decoded ones — the batches `indices[skip:]` makes once everything is decoded."""
        status, requested, start, ready = self.decode.cache.status, self.requested, 0, np.zeros(0, np.int64)
        skip = self.skip
        while start < len(requested):
            self.decode.wait_for(requested[start:start + 1])
            settled = self.decode.settled[requested[start:]]
            end = len(requested) if settled.all() else start + int(np.argmin(settled))
            block = requested[start:end]
            start, decoded = end, block[status[block] == DECODED]
            dropped = min(skip, len(decoded))
            skip, ready = skip - dropped, np.concatenate([ready, decoded[dropped:]])
            while len(ready) >= rows:
                yield ready[:rows]
                ready = ready[rows:]
        if len(ready):
            yield ready

    def final(self) -> np.ndarray:
        """The requested rows decoded, in order, once the whole decode has finished."""
        self.decode.finish()
        return self.requested[self.decode.cache.status[self.requested] == DECODED]


def decode_in_background(cache, first_in_order=()) -> BackgroundDecode | None:
    """Decode `cache`'s pending rows in the background — those of `first_in_order` first, in that order (the
    evaluation images), then the others — or None when nothing is pending."""
    pending = cache.pending()
    if not len(pending):
        return None
    first = np.asarray(first_in_order, np.int64)
    first = first[np.isin(first, pending)]
    first = first[np.sort(np.unique(first, return_index=True)[1])]
    return BackgroundDecode(cache, np.concatenate([first, np.setdiff1d(pending, first)]))


__all__ = ["BackgroundDecode", "RowStream", "decode_in_background"]
