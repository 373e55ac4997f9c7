"""Variants evaluated on several GPUs at once (Kaggle's T4 ×2): one worker process per GPU, each pinned to its GPU
with CUDA_VISIBLE_DEVICES, each evaluating its share of the variants into the one results store.

What is stored is what one GPU would store: every worker runs `evaluate_variant` (same backend, same batches, same
identity — the backend identity is 'torch-cuda' on either GPU of one model), the store's files are written
atomically and the choice of a label plus the write happen under the store's lock (ResultsStore.locked), so two
workers never take one label. The variants are built (calibrated) before, in the calling process.

Workers are plain subprocesses (`python -c ...`), not multiprocessing children: nothing of the caller's __main__ is
re-imported, and each gets its own environment (the GPU it may see). They report progress (images done) and the
labels they stored as JSON lines on stdout; their stderr goes to a log file named in any error.

A worker that fails (crashes, is killed — out of memory —, raises an unexpected error) loses nothing: what it and
the others stored stays, and the variants it had not stored are evaluated in the calling process, each resuming
from its checkpoint; one warning line says so and where the worker's log is kept. A user mistake a worker meets is
raised as its one line, as in one process.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import pickle
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from trtlab.evaluation.options import RunOptions

log = logging.getLogger(__name__)

PARALLEL_BACKENDS = ("torch", "trt")  # backends that run on a GPU: worth one process per GPU
_COST = {"int8": 2.0, "fp16": 1.0, "fp32": 1.0}  # relative evaluation time, to balance the GPUs


def visible_gpus() -> list[str]:
    """The CUDA devices torch sees here (respecting CUDA_VISIBLE_DEVICES), as the ids a child's
    CUDA_VISIBLE_DEVICES takes: ['0', '1'] on Kaggle's T4 ×2; [] without a GPU (torch is not imported then)."""
    from trtlab.backends import torch_gpu_available

    if not torch_gpu_available():
        return []
    import torch

    count = torch.cuda.device_count()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        ids = [v.strip() for v in visible.split(",") if v.strip()]
        return ids[:count]
    return [str(i) for i in range(count)]


def parallel_devices(parallel, backend: str) -> list[str] | None:
    """The devices to spread the evaluations over ('cuda:<id>' or 'cpu'), or None to evaluate in this process.

    `parallel`: 'auto' (one worker per visible GPU when more than one is visible and `backend` — the resolved
    one — runs on a GPU), False/None/0/1 (off), N (N workers: over the visible GPUs in turn, or on the CPU where
    there is none — how the tests check the orchestration), or a list of devices."""
    if parallel in (None, False, 0, 1, "off"):
        return None
    if isinstance(parallel, (list, tuple)):
        return [str(d) for d in parallel] if len(parallel) > 1 else None
    if parallel == "auto":
        if backend not in PARALLEL_BACKENDS:
            return None
        gpus = visible_gpus()
        return [f"cuda:{g}" for g in gpus] if len(gpus) > 1 else None
    if isinstance(parallel, int) and not isinstance(parallel, bool) and parallel > 1:
        gpus = visible_gpus()
        return [f"cuda:{gpus[i % len(gpus)]}" if gpus else "cpu" for i in range(parallel)]
    from trtlab.core.errors import UserValueError

    raise UserValueError(f"parallel={parallel!r} is not 'auto', off (False) or a number of workers ≥ 2",
                         "use parallel='auto' (one process per GPU when there are several), parallel=False, or "
                         "parallel=2")


def share_out(variants, workers: int) -> list[list[int]]:
    """Variant positions per worker: the most expensive first onto the least loaded worker."""
    loads, shares = [0.0] * workers, [[] for _ in range(workers)]
    costs = [_COST.get(v.recipe.precision, 1.0) for v in variants]
    for k in sorted(range(len(variants)), key=lambda k: -costs[k]):
        w = loads.index(min(loads))
        shares[w].append(k)
        loads[w] += costs[k]
    return [sorted(share) for share in shares]


@dataclass(frozen=True)
class SharedEvaluation:
    """What every worker of one parallel evaluation shares: the data (dataset, preprocessing, split), where the
    results go (experiment, store folder, workspace) and how to run (RunOptions: backend — the resolved one —,
    batch size, force)."""

    dataset: object
    preprocess: object
    split: object
    experiment: object
    store_folder: object
    workspace: object = None
    run: RunOptions = RunOptions()


def evaluate_in_parallel(variants, devices: list[str], shared: SharedEvaluation) -> list[str]:
    """Evaluate `variants` (BuiltVariants) on the split's evaluation images, spread over `devices`, into the store
    at `shared.store_folder`; returns the label each variant was stored under, in order."""
    from trtlab.core.progress import progress_bar

    split = shared.split
    shares = [share for share in share_out(variants, len(devices)) if share]
    labels: list = [None] * len(variants)
    with tempfile.TemporaryDirectory(prefix="trtlab-parallel-") as folder:
        workers = []
        for device, share in zip(devices, shares):
            job = Path(folder) / f"job-{len(workers)}.pkl"
            with open(job, "wb") as fh:
                workspace = str(shared.workspace) if shared.workspace is not None else None
                pickle.dump({"variants": [variants[k] for k in share],
                             "shared": dataclasses.replace(shared, workspace=workspace)}, fh)
            workers.append(_Worker(device, share, job, Path(folder) / f"worker-{len(workers)}.log"))
        log.info("evaluating %d variant(s) in %d processes on %s", len(variants), len(workers),
                 ", ".join(w.device for w in workers))
        total = len(split.evaluation) * len(variants)
        bar = progress_bar(total=total, desc=f"evaluate on {len(workers)} devices", unit="img",
                           enabled=shared.run.progress)
        lock = threading.Lock()

        def advance(count: int) -> None:
            with lock:
                bar.update(count)

        readers = [threading.Thread(target=w.read, args=(advance,), daemon=True) for w in workers]
        for reader in readers:
            reader.start()
        for reader in readers:
            reader.join()
        bar.close()
        failed = []
        for worker in workers:
            try:
                worker.finish()
            except WorkerFailed as exc:
                failed.append((worker, exc))
            for position, label in zip(worker.share, worker.labels):
                labels[position] = label
        if failed:
            _evaluate_here(variants, labels, failed, shared)
    return labels


class WorkerFailed(RuntimeError):
    """A worker process that crashed, was killed or raised an unexpected error (not a user mistake)."""


def _evaluate_here(variants, labels: list, failed: list, shared: SharedEvaluation) -> None:
    """The variants failed workers had not stored, evaluated in this process (each resumes from its checkpoint);
    said in one line per worker, its log kept in the workspace. What the workers stored stays as it is."""
    import shutil

    from trtlab.core.workspace import workspace_dir
    from trtlab.data.decode_cache import build_decode_cache
    from trtlab.evaluation.evaluate import evaluate_variant
    from trtlab.evaluation.results import ResultsStore

    folder = workspace_dir(shared.workspace) / "logs"
    folder.mkdir(parents=True, exist_ok=True)
    for worker, error in failed:
        kept = folder / f"evaluation-worker-{worker.device.replace(':', '')}-{os.getpid()}.log"
        shutil.copy(worker.log_path, kept)
        missing = len(worker.share) - len(worker.labels)
        stored = sum(label is not None for label in labels)
        log.warning("the evaluation worker on %s failed (%s; its log: %s): its %d variant(s) not stored yet are "
                    "evaluated in this process, the %d stored are kept", worker.device, error.reason, kept, missing,
                    stored)
    cache = build_decode_cache(shared.dataset, shared.preprocess, shared.workspace, progress=False)
    store = ResultsStore(shared.store_folder)
    for worker, _ in failed:
        for position in worker.share[len(worker.labels):]:
            labels[position] = evaluate_variant(variants[position], cache, shared.split.evaluation, store,
                                                split=shared.split, workspace=shared.workspace,
                                                experiment=shared.experiment, run=shared.run).variant


class _Worker:
    def __init__(self, device: str, share: list[int], job: Path, log_path: Path):
        self.device, self.share, self.log_path = device, share, log_path
        self.labels: list[str] = []
        self.error: str | None = None
        root = str(Path(__file__).resolve().parents[2])  # the trtlab this process runs
        env = {**os.environ,
               "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
               "CUDA_VISIBLE_DEVICES": device.split(":", 1)[1] if device.startswith("cuda:") else ""}
        if device == "cpu":  # the workers share the cores
            env["TRTLAB_CALIBRATION_DEVICE"] = "cpu"
        self.log_file = open(log_path, "wb")
        self.process = subprocess.Popen(worker_command(job), stdout=subprocess.PIPE, stderr=self.log_file, env=env)

    def read(self, advance) -> None:
        for line in self.process.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if "images" in event:
                advance(int(event["images"]))
            elif "stored" in event:
                self.labels.append(event["stored"])
            elif "error" in event:
                self.error = event
        self.process.wait()

    def finish(self) -> None:
        self.log_file.close()
        if self.error is None and self.process.returncode == 0 and len(self.labels) == len(self.share):
            return
        if self.error and self.error.get("what"):
            from trtlab.core.errors import UserError

            raise UserError(f"worker on {self.device}: {self.error['what']}", self.error.get("fix", ""))
        code = self.process.returncode
        status = f"killed by signal {-code}" if code is not None and code < 0 else f"exit status {code}"
        message = (self.error or {}).get("error") or status
        failure = WorkerFailed(f"evaluation worker on {self.device} failed: {message} (log: {self.log_path})")
        failure.reason = message.splitlines()[0][:200] if message else status
        raise failure


def worker_command(job: Path) -> list[str]:
    """The command line of one worker process serving the job file `job`."""
    return [sys.executable, "-c", "from trtlab.workflows.parallel import serve; serve()", str(job)]


def serve() -> None:
    """A worker: evaluate the variants of the job file (argv[1]) on the one device it sees; JSON lines out."""
    out = sys.stdout
    sys.stdout = sys.stderr  # logs and prints go to the log file; stdout carries events only

    def emit(event: dict) -> None:
        out.write(json.dumps(event) + "\n")
        out.flush()

    try:
        with open(sys.argv[1], "rb") as fh:
            job = pickle.load(fh)
        from trtlab.core.log import setup

        setup(0)
        from trtlab.data.decode_cache import build_decode_cache
        from trtlab.evaluation.evaluate import evaluate_variant
        from trtlab.evaluation.results import ResultsStore

        shared = job["shared"]
        cache = build_decode_cache(shared.dataset, shared.preprocess, shared.workspace, progress=False)
        store = ResultsStore(shared.store_folder)
        run = dataclasses.replace(shared.run, progress=False)
        for built in job["variants"]:
            result = evaluate_variant(built, cache, shared.split.evaluation, store, split=shared.split,
                                      workspace=shared.workspace, experiment=shared.experiment, run=run,
                                      on_images=lambda count: emit({"images": count}))
            emit({"stored": result.variant})
    except Exception as exc:  # noqa: BLE001 - reported to the caller, which raises it
        import traceback

        from trtlab.core.errors import UserError

        traceback.print_exc()
        if isinstance(exc, UserError):
            emit({"error": str(exc), "what": exc.what, "fix": exc.fix})
        else:
            emit({"error": f"{type(exc).__name__}: {exc}"})
        sys.exit(1)


__all__ = ["SharedEvaluation", "WorkerFailed", "evaluate_in_parallel", "parallel_devices", "serve", "share_out", "visible_gpus"]
