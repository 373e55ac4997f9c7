"""TorchRunner: the backends.Runner on torch — CUDA when there is a GPU, else the CPU (what CI checks).

The converted graph (graph_module) runs every tensor in the type the ONNX graph gives it and Q/DQ literally, with
the numerics pinned while the runner is active and restored after:
- TF32 off for matmuls and cuDNN convolutions (an FP32 variant means FP32; torch lets cuDNN use TF32 by default);
- FP16 GEMMs without reduced-precision reductions (cuBLAS may otherwise accumulate split-K partials in FP16);
- cuDNN deterministic (the same batch gives the same logits on every run; an INT8 rounding must not depend on the
  algorithm cuDNN happened to pick) and benchmark off, unless asked.

Input: float32 host batches go through one pinned staging buffer and a non-blocking copy; `infer_crops` takes the
decode cache's uint8 NHWC crops instead (a quarter of the bytes over PCIe) and normalises on the device with the
exact float32 arithmetic of `data.preprocess.normalize_batch`, so both entries give bit-identical inputs.
"""
from __future__ import annotations

import os

import numpy as np

from trtlab.backends.runner import Runner

DTYPE_POLICY = ("every tensor in the type the ONNX graph gives it; QuantizeLinear = saturate(round_half_to_even(x / "
                "scale) + zero_point), DequantizeLinear = (q - zero_point) * scale, unfused")


QUANTIZE_DIVISION = {"scale": "x / scale in the scale's type (FP16 scales: FP16 division), as the ONNX spec says",
                     "float32": "x / scale in float32, as ONNX Runtime's CPU kernel does"}


class TorchRunner(Runner):
    backend = "torch"

    def __init__(self, model_path: str | os.PathLike, device: str | None = None, deterministic: bool = True,
                 benchmark: bool = False, quantize_precision: str = "scale", name: str | None = None):
        """`device`: 'cuda', 'cuda:1', 'cpu' (default: CUDA when torch sees a GPU). `deterministic=False` and
        `benchmark=True` let cuDNN pick its fastest (possibly run-to-run varying) algorithms.
        `quantize_precision`: 'scale' divides in the Q scale's type as the ONNX spec says (FP16 on the FP16 float
        path); 'float32' as ONNX Runtime's CPU kernel does (graph_module.convert_onnx)."""
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
        self.device = None
        self.module = None
        self.input_dtype = None
        self._saved_flags: dict | None = None
        self.feed = None  # CropFeed: host arrays onto the device

    # -- lifecycle ---------------------------------------------------------------------------------------------
    def activate_impl(self) -> None:
        import onnx
        import torch

        from trtlab.backends.gpu.graph_module import convert_onnx
        from trtlab.backends.gpu.registry import torch_dtype

        self.device = torch.device(self.requested_device or ("cuda" if torch.cuda.is_available() else "cpu"))
        if self.device.type == "cuda" and not torch.cuda.is_available():
            from trtlab.core.errors import UserError

            raise UserError(f"{self.name}: device {self.device} was asked for but torch sees no CUDA GPU "
                            f"(torch {torch.__version__}, CUDA build {torch.version.cuda})",
                            "use device='cpu' or backend='ort', or install a CUDA build of torch")
        model = onnx.load(self.model_path)
        module = convert_onnx(model, self.quantize_precision)  # a UserError naming the node when an op is not supported: before any copy
        graph_input = next(i for i in model.graph.input if i.name == module.input_names[0])
        dims = graph_input.type.tensor_type.shape.dim
        self.input_name = graph_input.name
        self.input_shape = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in dims)
        self.input_dtype = torch_dtype(graph_input.type.tensor_type.elem_type)
        self._saved_flags = pin_numerics(self.deterministic, self.benchmark)
        self.module = module.to(self.device).eval()
        self.feed = CropFeed(self.device)

    def deactivate_impl(self) -> None:
        import torch

        if self.feed is not None:
            self.feed.close()
        self.module = None
        self.feed = None
        if self._saved_flags is not None:
            restore_numerics(self._saved_flags)
            self._saved_flags = None
        if self.device is not None and self.device.type == "cuda":
            torch.cuda.empty_cache()

    # -- inference ---------------------------------------------------------------------------------------------
    def infer_impl(self, batch: np.ndarray) -> np.ndarray:
        return self._run(self.feed.upload(batch).to(self.input_dtype))

    def infer_crops(self, crops: np.ndarray, preprocess) -> np.ndarray:
        """uint8 N×H×W×3 crops (decode cache layout) → N×classes float32 logits; normalised on the device."""
        import time

        if not self.is_active:
            raise RuntimeError(f"runner {self.name} is not active; use `with runner:` or call runner.activate()")
        crops = np.ascontiguousarray(crops)
        if crops.dtype != np.uint8 or crops.ndim != 4 or crops.shape[-1] != 3:
            raise ValueError(f"{self.name}: crops must be uint8 N×H×W×3, got {crops.dtype} {list(crops.shape)}")
        count = len(crops)
        fixed = self.input_shape[0] if self.input_shape and isinstance(self.input_shape[0], int) else None
        if fixed and count > fixed:
            raise ValueError(f"{self.name}: the model has a fixed batch of {fixed}, got {count}")
        if fixed and count < fixed:
            from trtlab.data.batches import pad_batch

            crops = pad_batch(crops, fixed)
        start = time.perf_counter()
        logits = self._run(self.feed.normalised(crops, preprocess).to(self.input_dtype))
        self.last_inference_time = time.perf_counter() - start
        return logits[:count]

    def _run(self, batch) -> np.ndarray:
        import torch

        with torch.inference_mode():
            logits = self.module(batch)[0]
            return logits.to(torch.float32).cpu().numpy()

    # -- description -------------------------------------------------------------------------------------------
    def identity(self) -> str:
        """'torch-cuda' or 'torch-cpu': the device type (a result of one GPU model is reused on another; the GPU's
        name is in describe())."""
        if self.device is not None:
            return f"torch-{self.device.type}"
        requested = self.requested_device or ("cuda" if torch_cuda_available() else "cpu")
        return f"torch-{requested.split(':')[0]}"

    def describe(self) -> dict:
        import torch

        description = {"backend": self.backend, "runner": self.name, "torch": torch.__version__,
                       "cuda": torch.version.cuda, "device": device_name(self.device), "dtype_policy": DTYPE_POLICY,
                       "quantize_precision": self.quantize_precision,
                       "quantize_division": QUANTIZE_DIVISION[self.quantize_precision], "identity": self.identity(),
                       "tf32": False, "fp16_reduced_precision_reduction": False,
                       "cudnn_deterministic": self.deterministic, "cudnn_benchmark": self.benchmark}
        if self.device is not None and self.device.type == "cuda":
            description["cudnn"] = torch.backends.cudnn.version()
            description["input_copy"] = "pinned staging buffer, non-blocking host→device copy"
        else:
            description["cpu_half_precision"] = "FP16 conv/GEMM in float32, rounded once to FP16 (as ORT's CPU)"
        if self.module is not None:
            description["onnx_opset"] = self.module.opset
        return description


class CropFeed:
    """Host arrays onto `device`: on CUDA through one pinned staging buffer per dtype (reused, grown when needed)
    and a non-blocking copy, the previous copy out of the buffer finished before it is overwritten; on the CPU as
    they are. `normalised` turns the decode cache's uint8 NHWC crops into the float32 NCHW model input on the device
    with the exact float32 arithmetic of `data.preprocess.normalize_batch` (a quarter of the bytes cross PCIe)."""

    def __init__(self, device):
        import torch

        self.device = torch.device(device)
        self._staging: dict = {}
        self._constants: dict = {}
        self._copied = torch.cuda.Event() if self.device.type == "cuda" else None

    def upload(self, array: np.ndarray):
        import torch

        source = torch.from_numpy(np.ascontiguousarray(array))
        if self.device.type != "cuda":
            return source
        staging = self._staging.get(source.dtype)
        if staging is None or staging.numel() < source.numel():
            staging = torch.empty(source.numel(), dtype=source.dtype, pin_memory=True)
            self._staging[source.dtype] = staging
        self._copied.synchronize()  # the previous copy out of the buffer is done before it is overwritten
        view = staging[: source.numel()].view(source.shape)
        view.copy_(source)
        on_device = view.to(self.device, non_blocking=True)
        self._copied.record()
        return on_device

    def normalised(self, crops: np.ndarray, preprocess):
        """uint8 N×H×W×3 → float32 N×3×H×W on the device: (x - mean) then × float32(1/std), as normalize_batch."""
        import torch

        mean, inverse_std = self._normalisation(preprocess)
        pixels = self.upload(crops)
        return pixels.permute(0, 3, 1, 2).to(torch.float32).sub_(mean).mul_(inverse_std).contiguous()

    def _normalisation(self, preprocess):
        """(mean, 1/std) as float32 1×3×1×1 device tensors, made once per preprocessing."""
        import torch

        key = mean, std = preprocess.channel_constants()  # in the crops' channel order (BGR reverses them)
        if key not in self._constants:
            values = [[np.float32(m) for m in mean], [np.float32(1.0 / s) for s in std]]
            self._constants[key] = tuple(torch.tensor(v, dtype=torch.float32).view(1, 3, 1, 1).to(self.device)
                                         for v in values)
        return self._constants[key]

    def close(self) -> None:
        if self._copied is not None:
            self._copied.synchronize()
        self._staging.clear()
        self._constants.clear()


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
