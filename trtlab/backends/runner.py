"""The Runner interface every backend implements (after Polygraphy's runner template).

A runner is built or loaded once, activated, fed float32 N×3×H×W batches and returns N×classes logits.
It checks each batch against the model's input metadata, records the last inference time, and is a
context manager so resources are released even when a notebook cell fails.
"""
from __future__ import annotations

import time
from abc import ABC, abstractmethod

import numpy as np


class Runner(ABC):
    backend: str = "base"

    def __init__(self, name: str):
        self.name = name
        self.is_active = False
        self.last_inference_time: float | None = None
        self.input_name: str = ""
        self.input_shape: tuple = ()

    # -- lifecycle ---------------------------------------------------------------------------------
    def activate(self) -> "Runner":
        if not self.is_active:
            self.activate_impl()
            self.is_active = True
        return self

    def deactivate(self) -> None:
        if self.is_active:
            self.deactivate_impl()
            self.is_active = False

    def __enter__(self) -> "Runner":
        return self.activate()

    def __exit__(self, *exc) -> None:
        self.deactivate()

    # -- inference ---------------------------------------------------------------------------------
    def infer(self, batch: np.ndarray) -> np.ndarray:
        """float32 N×3×H×W → float32 N×classes logits."""
        if not self.is_active:
            raise RuntimeError(f"runner {self.name} is not active; use `with runner:` or call runner.activate()")
        batch = self.check_input(batch)
        count = batch.shape[0]
        fixed = self.input_shape[0] if self.input_shape and isinstance(self.input_shape[0], int) else None
        if fixed and count < fixed:
            # The last batch of a fixed-batch model: padded by the batch source's rule; only the real rows return.
            from trtlab.data.batches import pad_batch

            batch = pad_batch(batch, fixed)
        start = time.perf_counter()
        logits = self.infer_impl(batch)
        self.last_inference_time = time.perf_counter() - start
        return logits[:count]

    def check_input(self, batch: np.ndarray) -> np.ndarray:
        batch = np.asarray(batch)
        if batch.dtype != np.float32:
            raise TypeError(f"{self.name}: input {self.input_name!r} must be float32, got {batch.dtype}")
        expected = self.input_shape
        if expected and (batch.ndim != len(expected) or any(
                isinstance(e, int) and e != b for e, b in zip(expected[1:], batch.shape[1:]))):
            raise ValueError(f"{self.name}: input {self.input_name!r} expects shape {list(expected)}, "
                             f"got {list(batch.shape)}")
        if expected and isinstance(expected[0], int) and batch.shape[0] > expected[0]:
            raise ValueError(f"{self.name}: the model has a fixed batch of {expected[0]}, got {batch.shape[0]}; "
                             f"re-export it with a dynamic batch or use batch_size={expected[0]}")
        return np.ascontiguousarray(batch)

    @abstractmethod
    def activate_impl(self) -> None: ...

    @abstractmethod
    def infer_impl(self, batch: np.ndarray) -> np.ndarray: ...

    @abstractmethod
    def deactivate_impl(self) -> None: ...

    def describe(self) -> dict:
        """Backend name, versions and settings: stored in each run record."""
        return {"backend": self.backend, "runner": self.name}

    def identity(self) -> str:
        """What computes this runner's numbers, as part of a result's identity ('ort-cpu', 'torch-cuda', 'trt'):
        two literal implementations of one graph differ by float summation order, which flips INT8 roundings, so
        their results are never reused for, or compared with, each other silently. Known before activation."""
        return self.backend

    def batch_dependent(self) -> bool:
        """Whether this runner's numbers for one image change with the batch it is run in (kernels chosen per
        shape sum in another order): then the evaluation batch size is part of a result's identity. True unless
        a runner knows better (ONNX Runtime on the CPU computes each image alike at any batch)."""
        return True
