"""Histogram counting in worker processes: every core counts, none waits for the GIL. This is how large calibrations
count where the compiled counter (native_counting) is not available — numpy holds the GIL between its steps, so
threads would not use every core; with the compiled counter, threads of the calling process do (statistics_ort).

ONNX Runtime writes each sub-batch's exposed tensors straight into one of two slots of anonymous shared memory
(IO binding into exposed_slots.ExposedSlots over a memfd); while it computes the next sub-batch into the other slot,
worker processes histogram this one. Each worker owns a fixed set of tensors (balanced by size) and keeps their
TensorHistograms, updating them in sub-batch order — the same sequence of updates as one thread, hence the same
counts. At the end the workers send their histograms back.

Workers are plain subprocesses (`python -c ...`), not multiprocessing children: nothing of the caller's __main__ is
re-imported (a script without an `if __name__ == "__main__":` guard stays safe), and the shared memory is a memfd
handed over as a file descriptor, so nothing is left in /dev/shm (whose size Docker limits) if a process dies.
"""
from __future__ import annotations

import logging
import mmap
import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from trtlab.quantization.exposed_slots import ExposedSlots, run_into

log = logging.getLogger(__name__)


def processes_available() -> bool:
    return hasattr(os, "memfd_create") and sys.platform.startswith("linux")


def _balanced(sizes: list[int], workers: int) -> list[list[int]]:
    """Tensor indices per worker, largest first onto the least loaded worker (greedy LPT)."""
    loads, assignment = [0] * workers, [[] for _ in range(workers)]
    for k in sorted(range(len(sizes)), key=lambda k: -sizes[k]):
        w = loads.index(min(loads))
        assignment[w].append(k)
        loads[w] += sizes[k]
    return [sorted(a) for a in assignment if a]


class CountingPool:
    """Two shared-memory slots (exposed_slots.ExposedSlots over a memfd), each holding `rows` images of every tensor
    in `layout` ((name, per-image shape), float32), and the worker processes that histogram them."""

    def __init__(self, layout: list[tuple[str, tuple]], rows: int, workers: int, histograms: dict):
        self.fd = os.memfd_create("trtlab-calibration")
        self.processes, self.logs, self.slots = [], [], None
        try:
            self.slots = ExposedSlots(layout, rows, fd=self.fd)
            self.layout, self.size = self.slots.layout, self.slots.size
            sizes = [int(np.prod(shape, dtype=np.int64)) for _, shape in self.layout]
            for mine in _balanced(sizes, max(1, workers)):
                self._start({"size": self.size, "slot_bytes": self.slots.slot_bytes, "rows": self.slots.rows,
                             "tensors": [(self.layout[k][0], self.slots.offsets[k], tuple(self.layout[k][1]))
                                         for k in mine],
                             "histograms": {self.layout[k][0]: histograms[self.layout[k][0]].state() for k in mine}})
            for process in range(len(self.processes)):
                self._expect(process, "ready")
        except BaseException:
            self.close()
            raise

    def _start(self, init: dict) -> None:
        root = str(Path(__file__).resolve().parents[2])  # the trtlab this process runs, not another one
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
               "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        log_file = tempfile.TemporaryFile()
        process = subprocess.Popen(
            [sys.executable, "-c", "from trtlab.quantization.histogram_workers import serve; serve()", str(self.fd)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log_file, pass_fds=(self.fd,), env=env)
        self.processes.append(process)
        self.logs.append(log_file)
        self._send(len(self.processes) - 1, init)

    def _send(self, process: int, message) -> None:
        try:
            pickle.dump(message, self.processes[process].stdin, protocol=pickle.HIGHEST_PROTOCOL)
            self.processes[process].stdin.flush()
        except (BrokenPipeError, OSError):
            self._failed(process, "stopped")

    def _expect(self, process: int, kind: str):
        try:
            message = pickle.load(self.processes[process].stdout)
        except (EOFError, pickle.UnpicklingError, OSError):
            self._failed(process, "stopped")
        if message[0] == "error":
            self._failed(process, message[1])
        if message[0] != kind:
            self._failed(process, f"answered {message[0]!r}, expected {kind!r}")
        return message[1:] if len(message) > 1 else None

    def _failed(self, process: int, what: str):
        self.logs[process].seek(0)
        stderr = self.logs[process].read().decode(errors="replace")[-3000:]
        raise RuntimeError(f"histogram worker {process} {what.strip()}" + (f"; its stderr:\n{stderr}" if stderr else ""))

    def views(self, slot: int, rows: int) -> list[np.ndarray]:
        """The first `rows` rows of every tensor in `slot`: where ONNX Runtime writes them."""
        return self.slots.views(slot, rows)

    def submit(self, slot: int, rows: int) -> None:
        """Count the first `rows` rows of every tensor in `slot` (asynchronously: `wait(slot)`)."""
        for process in range(len(self.processes)):
            self._send(process, ("count", slot, rows))

    def wait(self, slot: int) -> None:
        for process in range(len(self.processes)):
            done = self._expect(process, "done")
            if done[0] != slot:
                self._failed(process, f"finished slot {done[0]}, expected {slot}")

    def finish(self) -> dict:
        """name → TensorHistogram of every tensor, from the workers."""
        from trtlab.quantization.statistics import TensorHistogram

        histograms = {}
        for process in range(len(self.processes)):
            self._send(process, ("finish",))
            states = self._expect(process, "histograms")[0]
            histograms.update({name: TensorHistogram.from_state(state) for name, state in states.items()})
        return histograms

    def close(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                try:
                    process.stdin.close()
                except OSError:
                    pass
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
            for stream in (process.stdout,):
                stream.close()
        for log_file in self.logs:
            log_file.close()
        self.processes, self.logs = [], []
        if self.slots is not None:
            self.slots.close()
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> "CountingPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def count_in_processes(session, input_name: str, requested: list[str], shapes: list[tuple], input_tensors: list[str],
                       histograms: dict, batches, rows: int, total: int, progress: bool, workers: int) -> int:
    """Run every batch through `session` with its outputs bound into shared memory and count them in `workers`
    processes while the next batch runs; `histograms` (name → TensorHistogram) are replaced by the counted ones.
    Returns the bytes of the two slots (the peak the sub-batches hold)."""
    from trtlab.core.progress import progress_bar

    first = next(batches, None)
    if first is None:
        return 0
    image_shape = tuple(first.images.shape[1:])
    layout = list(zip(requested, shapes)) + [(name, image_shape) for name in input_tensors]
    rows = max(rows, len(first.images))
    bar = progress_bar(total=total, desc="calibrate (collect stats)", unit="img", enabled=progress)
    with CountingPool(layout, rows, workers, histograms) as pool:
        binding = session.io_binding()
        counting, slot, batch = None, 0, first
        while batch is not None:
            views = pool.views(slot, len(batch.images))
            run_into(session, input_name, batch.images, requested, views, binding)
            for view in views[len(requested):]:
                np.copyto(view, batch.images)
            if counting is not None:
                pool.wait(counting)
                bar.update(counted)
            pool.submit(slot, batch.count)
            counting, counted, slot = slot, batch.count, 1 - slot
            batch = next(batches, None)
        binding.clear_binding_outputs()
        pool.wait(counting)
        bar.update(counted)
        histograms.update(pool.finish())
        del views
    bar.close()
    return pool.size


# -- the worker process --------------------------------------------------------------------------------------------
def serve() -> None:
    """A worker: attach the shared memory (fd in argv[1]), then count slots on request (pickled messages on
    stdin/stdout)."""
    from trtlab.quantization.statistics import TensorHistogram

    fd = int(sys.argv[1])
    requests, replies = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing but replies goes to the reply pipe

    def reply(*message):
        pickle.dump(message, replies, protocol=pickle.HIGHEST_PROTOCOL)
        replies.flush()

    try:
        init = pickle.load(requests)
        buffer = mmap.mmap(fd, init["size"])
        histograms = {name: TensorHistogram.from_state(state) for name, state in init["histograms"].items()}
        reply("ready")
        while True:
            try:
                message = pickle.load(requests)
            except EOFError:  # the caller went away
                return
            if message[0] == "finish":
                reply("histograms", {name: h.state() for name, h in histograms.items()})
                return
            _, slot, rows = message
            base = slot * init["slot_bytes"]
            for name, offset, shape in init["tensors"]:
                view = np.ndarray((rows,) + shape, np.float32, buffer=buffer, offset=base + offset)
                histograms[name].update(view)
                del view
            reply("done", slot)
    except Exception:  # noqa: BLE001 - reported to the caller, which raises it with this text
        import traceback

        reply("error", traceback.format_exc())


__all__ = ["CountingPool", "count_in_processes", "processes_available", "serve"]
