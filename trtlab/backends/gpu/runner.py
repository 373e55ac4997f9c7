"""TorchRunner: the backends.Runner on torch — CUDA when there is a GPU, else the CPU (what CI checks).

The converted graph (graph_module) runs every tensor in the type the ONNX graph gives it and Q/DQ literally, with
the numerics pinned while the runner is active and restored after:
- TF32 off for matmuls and cuDNN convolutions (an FP32 variant means FP32; torch lets cuDNN use TF32 by default);
- FP16 GEMMs without reduced-precision reductions (cuBLAS may otherwise accumulate split-K partials in FP16);
- cuDNN deterministic (the same batch gives the same logits on every run; an INT8 rounding must not depend on the
  algorithm cuDNN happened to pick) and benchmark off, unless asked.

At the GPU's speed (issue 38):
- one launch per batch: each batch shape's forward (normalisation included) is captured once as a CUDA graph and
  replayed (capture.py: checked bit for bit against the eager run; the eager interpreter where it cannot be, said
  in one line); on CUDA every batch is padded to the evaluation batch (`pads_batches`), so one shape serves a run
  and each image is computed in a batch of the same size wherever it falls;
- one batch in flight (`run_crop_batches`): batch k+1's upload and replay are queued before batch k's logits are
  read back, from ring slots the batch reader fills in its own thread (feed.py: no second host copy);
- torch's CPU thread pool held to one thread while a CUDA runner is active (restored after): its threads would
  otherwise spin on the cores the batch reader and the JPEG decoders need;
- QuantizeLinear / DequantizeLinear one kernel each where bit for bit the same (ops_quant, qdq_kernel).

Input: float32 host batches go through one pinned staging buffer and a non-blocking copy; `infer_crops` and
`run_crop_batches` take the decode cache's uint8 NHWC crops instead (a quarter of the bytes over PCIe) and normalise
on the device with the exact float32 arithmetic of `data.preprocess.normalize_batch`, so both entries give
bit-identical inputs.
"""
from __future__ import annotations

import logging
import os
import time

import numpy as np

from trtlab.backends.runner import Runner

log = logging.getLogger(__name__)

DTYPE_POLICY = ("every tensor in the type the ONNX graph gives it; QuantizeLinear = saturate(round_half_to_even(x / "
                "scale) + zero_point), DequantizeLinear = (q - zero_point) * scale")


QUANTIZE_DIVISION = {"scale": "x / scale in the scale's type (FP16 scales: FP16 division), as the ONNX spec says",
                     "float32": "x / scale in float32, as ONNX Runtime's CPU kernel does"}
GPU_HOST_THREADS = 1  # torch intra-op threads while a CUDA runner is active (host work is a few small copies)
_said: set = set()


class TorchRunner(Runner):
    backend = "torch"

    def __init__(self, model_path: str | os.PathLike, device: str | None = None, deterministic: bool = True,
                 benchmark: bool = False, quantize_precision: str = "scale", name: str | None = None,
                 capture: bool = True, fused_qdq: bool = True):
        """`device`: 'cuda', 'cuda:1', 'cpu' (default: CUDA when torch sees a GPU). `deterministic=False` and
        `benchmark=True` let cuDNN pick its fastest (possibly run-to-run varying) algorithms.
        `quantize_precision`: 'scale' divides in the Q scale's type as the ONNX spec says (FP16 on the FP16 float
        path); 'float32' as ONNX Runtime's CPU kernel does (graph_module.convert_onnx). `capture=False` runs the
        eager interpreter on CUDA too; `fused_qdq=False` the plain Q/DQ ops (both bit for bit the same results:
        what the bench compares)."""
        super().__init__(name or f"torch:{os.path.basename(os.fspath(model_path))}")
        from trtlab.backends.gpu.graph_module import QUANTIZE_PRECISIONS

        if quantize_precision not in QUANTIZE_PRECISIONS:
            from trtlab.core.errors import UserValueError

            raise UserValueError(f"quantize_precision={quantize_precision!r} is not one of {QUANTIZE_PRECISIONS}",
                                 "use 'scale' (the ONNX spec) or 'float32' (ONNX Runtime's CPU arithmetic)")
        self.model_path = os.fspath(model_path)
        self.requested_device = device
        self.deterministic = bool(deterministic)
        self.benchmark = bool(benchmark)
        self.quantize_precision = quantize_precision
        self.capture, self.fused_qdq = bool(capture), bool(fused_qdq)
        self.device = None
        self.module = None
        self.input_dtype = None
        self._saved_flags: dict | None = None
        self._saved_threads: int | None = None
        self.feed = None  # CropFeed: host arrays onto the device, logits back
        self._graphs: dict = {}  # entry ('crops', 'float') → capture.ShapeGraphs
        self.batches_run = {"graph": 0, "eager": 0}

    # -- lifecycle ---------------------------------------------------------------------------------------------
    def activate_impl(self) -> None:
        import onnx
        import torch

        from trtlab.backends.gpu.capture import ShapeGraphs
        from trtlab.backends.gpu.feed import CropFeed
        from trtlab.backends.gpu.graph_module import convert_onnx
        from trtlab.backends.gpu.registry import torch_dtype

        self.device = torch.device(self.requested_device or ("cuda" if torch.cuda.is_available() else "cpu"))
        if self.device.type == "cuda" and not torch.cuda.is_available():
            from trtlab.core.errors import UserError

            raise UserError(f"{self.name}: device {self.device} was asked for but torch sees no CUDA GPU "
                            f"(torch {torch.__version__}, CUDA build {torch.version.cuda})",
                            "use device='cpu' or backend='ort', or install a CUDA build of torch")
        model = onnx.load(self.model_path)
        # a UserError naming the node when an op is not supported: before any copy
        module = convert_onnx(model, self.quantize_precision, fused_qdq=self.fused_qdq)
        graph_input = next(i for i in model.graph.input if i.name == module.input_names[0])
        dims = graph_input.type.tensor_type.shape.dim
        self.input_name = graph_input.name
        self.input_shape = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in dims)
        self.input_dtype = torch_dtype(graph_input.type.tensor_type.elem_type)
        self.module = module.to(self.device).eval()
        self._saved_flags = pin_numerics(self.deterministic, self.benchmark)
        if self.device.type == "cuda":
            self._saved_threads = hold_host_threads(GPU_HOST_THREADS)
        self.feed = CropFeed(self.device)
        self._preprocess = None
        self._graphs = {"float": ShapeGraphs(self._forward_float, self.capture)}
        self.batches_run = {"graph": 0, "eager": 0}

    def deactivate_impl(self) -> None:
        import torch

        for graphs in self._graphs.values():
            self._say_eager(graphs)
            graphs.release()
        self._graphs = {}
        if self.feed is not None:
            self.feed.close()
        self.module = None
        self.feed = None
        if self._saved_flags is not None:
            restore_numerics(self._saved_flags)
            self._saved_flags = None
        if self._saved_threads is not None:
            torch.set_num_threads(self._saved_threads)
            self._saved_threads = None
        if self.device is not None and self.device.type == "cuda":
            torch.cuda.empty_cache()

    # -- the functions captured per shape ----------------------------------------------------------------------
    def _forward_crops(self, pixels):
        """uint8 N×H×W×3 device crops → float32 logits (normalised on the device, the graph's input type)."""
        import torch

        images = self.feed.normalise_on_device(pixels, self._preprocess).to(self.input_dtype)
        return self.module(images)[0].to(torch.float32)

    def _forward_float(self, batch):
        import torch

        return self.module(batch.to(self.input_dtype))[0].to(torch.float32)

    # -- inference ---------------------------------------------------------------------------------------------
    def infer_impl(self, batch: np.ndarray) -> np.ndarray:
        return self._launch("float", batch).result()

    def pads_batches(self) -> bool:
        """Whether the evaluation should pad its last batch to the batch size (on CUDA: one captured shape per run,
        and every image computed in a batch of the same size)."""
        return self.device is not None and self.device.type == "cuda"

    def host_buffer(self, shape: tuple) -> np.ndarray:
        """A host buffer for the next batch of crops, to be filled by the batch reader (any thread) and handed to
        `run_crop_batches`: a pinned ring slot on CUDA, reached by the GPU with one copy."""
        return self.feed.ring.take(tuple(shape))

    def infer_crops(self, crops: np.ndarray, preprocess) -> np.ndarray:
        """uint8 N×H×W×3 crops (decode cache layout) → N×classes float32 logits; normalised on the device."""
        if not self.is_active:
            raise RuntimeError(f"runner {self.name} is not active; use `with runner:` or call runner.activate()")
        crops = self._checked_crops(crops)
        count = len(crops)
        fixed = self.input_shape[0] if self.input_shape and isinstance(self.input_shape[0], int) else None
        if fixed and count > fixed:
            raise ValueError(f"{self.name}: the model has a fixed batch of {fixed}, got {count}")
        if fixed and count < fixed:
            from trtlab.data.batches import pad_batch

            crops = pad_batch(crops, fixed)
        start = time.perf_counter()
        self._preprocess = preprocess
        logits = self._launch(self._crops_entry(), crops).result()
        self.last_inference_time = time.perf_counter() - start
        return logits[:count]

    def run_crop_batches(self, batches, preprocess):
        """(batch, float32 logits of its real rows) for each data.batches.Batch of uint8 crops, batch k+1 queued on
        the GPU before batch k's logits are read back (one batch in flight)."""
        if not self.is_active:
            raise RuntimeError(f"runner {self.name} is not active; use `with runner:` or call runner.activate()")
        self._preprocess = preprocess
        entry = self._crops_entry()
        pending = None
        for batch in batches:
            launched = (batch, self._launch(entry, self._checked_crops(batch.images)))
            if pending is not None:
                yield pending[0], pending[1].result()[:pending[0].count]
            pending = launched
        if pending is not None:
            yield pending[0], pending[1].result()[:pending[0].count]

    def _crops_entry(self) -> tuple:
        """The captured graphs of the crops entry for the current preprocessing (its constants are in the graph)."""
        from trtlab.backends.gpu.capture import ShapeGraphs

        entry = ("crops", self._preprocess.channel_constants())
        if entry not in self._graphs:
            self._graphs[entry] = ShapeGraphs(self._forward_crops, self.capture)
        return entry

    def _checked_crops(self, crops: np.ndarray) -> np.ndarray:
        if not isinstance(crops, np.ndarray) or not crops.flags.c_contiguous:
            crops = np.ascontiguousarray(crops)
        if crops.dtype != np.uint8 or crops.ndim != 4 or crops.shape[-1] != 3:
            raise ValueError(f"{self.name}: crops must be uint8 N×H×W×3, got {crops.dtype} {list(crops.shape)}")
        return crops

    def _launch(self, entry, array: np.ndarray) -> "_InFlight":
        """Queue one batch: its upload, its forward (a graph replay where captured) and the copy of its logits back."""
        import torch

        graphs = self._graphs[entry]
        host = self.feed.host_tensor(array)
        with torch.inference_mode():
            if graphs.calls.get(_shape_key(host)) is not None:  # the replay copies the host batch in itself
                outputs, how = graphs.run(host)
            else:
                outputs, how = graphs.run(host.to(self.device, non_blocking=True) if self.feed.on_cuda else host)
            self.feed.mark_read(array)
            logits, event = self.feed.download(outputs[0])
        self.batches_run[how] += 1
        if how == "eager" and graphs.enabled and self.feed.on_cuda:
            self._say_eager(graphs)
        return _InFlight(logits, event)

    def _say_eager(self, graphs) -> None:
        """The one line saying why the eager interpreter runs (once per model and reason)."""
        for shape, reason in graphs.reasons.items():
            key = (self.model_path, reason)
            if key not in _said:
                _said.add(key)
                log.info("%s: the eager interpreter runs batches of %s (one CUDA graph per batch could not be "
                         "used: %s)", os.path.basename(self.model_path), shape[0][0][0], reason)

    # -- description -------------------------------------------------------------------------------------------
    def identity(self) -> str:
        """'torch-cuda' or 'torch-cpu': the device type (a result of one GPU model is reused on another; the GPU's
        name is in describe())."""
        if self.device is not None:
            return f"torch-{self.device.type}"
        requested = self.requested_device or ("cuda" if torch_cuda_available() else "cpu")
        return f"torch-{requested.split(':')[0]}"

    def execution(self) -> str:
        """How the batches ran, in words: '195 batches as CUDA graph replays, 0 eager'."""
        graphs, eager = self.batches_run["graph"], self.batches_run["eager"]
        reasons = sorted({r for g in self._graphs.values() for r in g.reasons.values()})
        text = f"{graphs} batch(es) as CUDA graph replays, {eager} by the eager interpreter"
        return text + (f" ({'; '.join(reasons)})" if reasons else "")

    def describe(self) -> dict:
        import torch

        description = {"backend": self.backend, "runner": self.name, "torch": torch.__version__,
                       "cuda": torch.version.cuda, "device": device_name(self.device), "dtype_policy": DTYPE_POLICY,
                       "quantize_precision": self.quantize_precision,
                       "quantize_division": QUANTIZE_DIVISION[self.quantize_precision], "identity": self.identity(),
                       "tf32": False, "fp16_reduced_precision_reduction": False,
                       "cudnn_deterministic": self.deterministic, "cudnn_benchmark": self.benchmark}
        if self.device is not None and self.device.type == "cuda":
            from trtlab.backends.gpu.qdq_kernel import status

            description["cudnn"] = torch.backends.cudnn.version()
            description["input_copy"] = "pinned ring slots filled by the batch reader, non-blocking host→device copy"
            description["launch"] = ("one CUDA graph replay per batch shape (checked bit for bit against the eager "
                                      "run), the eager interpreter where capture fails") if self.capture else \
                "the eager interpreter (capture=False)"
            description["quantize_kernel"] = status() if self.fused_qdq else "plain torch ops (fused_qdq=False)"
            description["host_threads"] = f"torch intra-op threads held at {GPU_HOST_THREADS} while active"
        else:
            description["cpu_half_precision"] = "FP16 conv/GEMM in float32, rounded once to FP16 (as ORT's CPU)"
        if self.module is not None:
            description["onnx_opset"] = self.module.opset
        return description


class _InFlight:
    """A queued batch: its logits are read (after the device finished them) by `result()`."""

    def __init__(self, logits, event):
        self.logits, self.event = logits, event

    def result(self) -> np.ndarray:
        if self.event is not None:
            self.event.synchronize()
        return self.logits.numpy().copy()


def _shape_key(tensor) -> tuple:
    return ((tuple(tensor.shape), tensor.dtype),)


def hold_host_threads(threads: int) -> int:
    """Set torch's intra-op thread count to `threads` for GPU work; returns the previous count (to restore). Said once
    per process: a CUDA run's host work is a few copies, and an idle OpenMP pool spins on the cores the batch
    reader and the decoders need (issue 38: 92–103 user CPU seconds against 18–19 for the same 5,000-image A/B)."""
    import torch

    previous = torch.get_num_threads()
    if previous != threads:
        torch.set_num_threads(threads)
        if "threads" not in _said:
            _said.add("threads")
            log.info("torch's CPU threads: %d while the GPU computes (was %d; restored after), leaving the cores to "
                     "the batch reader and the decoders", threads, previous)
    return previous


def device_name(device) -> str:
    import torch

    if device is None:
        return "not active"
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        major, minor = torch.cuda.get_device_capability(index)
        return f"{torch.cuda.get_device_name(index)} (cuda:{index}, sm_{major}{minor})"
    return "cpu"


def pin_numerics(deterministic: bool = True, benchmark: bool = False) -> dict:
    """Set torch's numerics for literal runs; returns the previous settings for `restore_numerics`."""
    import torch

    saved = {"matmul_tf32": torch.backends.cuda.matmul.allow_tf32, "cudnn_tf32": torch.backends.cudnn.allow_tf32,
             "fp16_reduction": torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
             "deterministic": torch.backends.cudnn.deterministic, "benchmark": torch.backends.cudnn.benchmark}
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    torch.backends.cudnn.deterministic = deterministic
    torch.backends.cudnn.benchmark = benchmark
    return saved


def restore_numerics(saved: dict) -> None:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = saved["matmul_tf32"]
    torch.backends.cudnn.allow_tf32 = saved["cudnn_tf32"]
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = saved["fp16_reduction"]
    torch.backends.cudnn.deterministic = saved["deterministic"]
    torch.backends.cudnn.benchmark = saved["benchmark"]


def torch_cuda_available() -> bool:
    """Whether torch sees a CUDA GPU. Answers without importing torch where no NVIDIA driver is present (CPU
    machines, CI), since importing torch takes seconds."""
    import importlib.util
    import sys

    if "torch" not in sys.modules:
        if importlib.util.find_spec("torch") is None:
            return False
        # /dev/nvidiactl: every Linux NVIDIA driver (containers, Kaggle); /dev/dxg: WSL
        if not any(os.path.exists(p) for p in ("/dev/nvidiactl", "/proc/driver/nvidia", "/dev/dxg")):
            return False
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # a broken torch install is "no GPU backend", not a crash of make_runner
        return False
