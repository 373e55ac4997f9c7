"""One GPU launch per batch: a converted graph's forward captured once per input shape as a CUDA graph and replayed.

Why: the torch backend interprets the ONNX graph node by node in Python; at the batches a GPU evaluates (32–256)
that interpreter, not the GPU, set the pace (issue 38: 49 % of a 50,000-image A/B's samples, GPU waiting). A CUDA
graph records the kernels of one forward once and replays them with one launch, so Python runs once per batch.

How, as PyTorch's CUDA graphs notes prescribe (docs.pytorch.org "CUDA Graphs", torch.cuda.graph): warm-up runs on a
side stream first (lazy cuDNN/cuBLAS handles and workspaces are created outside the capture), then the capture on
that same stream (cuBLAS/hipBLASLt handles are per stream: pytorch#187745), inputs copied into static tensors
before each replay, outputs read from static tensors after it. `capture_error_mode="thread_local"`: the batch
reader's thread keeps synchronising on its own copy events while this thread captures (the "global" mode would
refuse any CUDA call of another thread during the capture).

What stays literal: the replay runs the kernels the eager run picked for this shape, with the numerics pinned by the
runner (cuDNN deterministic, no TF32); each capture is checked once on real data — the replay's outputs must equal
the eager run's bit for bit (NaN payloads included) — and a graph that cannot be captured (an op reading a device
value on the host, a library call capture refuses) or whose replay differs is dropped: the eager interpreter runs
instead, and `CaptureResult.reason` says why in one line.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass

WARMUP_RUNS = 2  # the first pays lazy initialisation on the side stream; the second runs as the capture will


@dataclass
class CaptureResult:
    """A captured call (`call`, None when the eager interpreter must run), the eager outputs of the example (the
    caller's result for that batch, computed while capturing) and why capture was not used (one line)."""

    call: "CapturedCall | None"
    outputs: tuple
    reason: str = ""


class CapturedCall:
    """`fn` at the shapes of its static inputs as one CUDA graph: `call(*inputs)` copies the inputs into the static
    tensors (on the current stream, asynchronously) and replays; the returned tensors are the static outputs, valid
    until the next replay."""

    def __init__(self, graph, static_inputs: tuple, static_outputs: tuple):
        self.graph, self.static_inputs, self.static_outputs = graph, static_inputs, static_outputs

    def __call__(self, *inputs) -> tuple:
        for static, value in zip(self.static_inputs, inputs):
            if value is not static:
                static.copy_(value, non_blocking=True)
        self.graph.replay()
        return self.static_outputs

    def shapes(self) -> tuple:
        return tuple(tuple(t.shape) for t in self.static_inputs)


def _as_tuple(result) -> tuple:
    return result if isinstance(result, tuple) else (result,)


def same_bits(first, second) -> bool:
    """Whether two tensors are equal bit for bit (shape, dtype and every byte: NaN payloads and -0.0 included)."""
    import torch

    if first.shape != second.shape or first.dtype != second.dtype:
        return False
    if first.dtype.is_floating_point:
        bits = {2: torch.int16, 4: torch.int32, 8: torch.int64}[first.element_size()]
        return bool(torch.equal(first.contiguous().view(bits), second.contiguous().view(bits)))
    return bool(torch.equal(first, second))


def capture(fn, examples: tuple, warmups: int = WARMUP_RUNS) -> CaptureResult:
    """Capture `fn(*examples)` (CUDA tensors) as a CUDA graph; see the module docstring. Never raises for a graph
    that cannot be captured: the result then has no `call` and says why."""
    import torch

    device = examples[0].device
    static_inputs = tuple(e.detach().clone() for e in examples)
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):  # eager warm-ups: their last outputs are the reference for the replay
        for _ in range(max(1, warmups)):
            expected = tuple(t.clone() for t in _as_tuple(fn(*static_inputs)))
    current = torch.cuda.current_stream(device)
    current.wait_stream(side)
    for tensor in expected:  # made on the side stream, read on the current one: not reused before it has
        tensor.record_stream(current)
    graph = torch.cuda.CUDAGraph()
    options = {"stream": side}
    if "capture_error_mode" in inspect.signature(torch.cuda.graph.__init__).parameters:
        options["capture_error_mode"] = "thread_local"
    try:
        with torch.cuda.graph(graph, **options):
            static_outputs = _as_tuple(fn(*static_inputs))
        graph.replay()
        torch.cuda.current_stream(device).synchronize()
    except Exception as exc:  # noqa: BLE001 - any capture failure means: run eagerly, and say why
        torch.cuda.synchronize(device)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return CaptureResult(None, expected, f"capture failed ({type(exc).__name__}: {first[:160]})")
    if len(static_outputs) != len(expected) or not all(same_bits(a, b) for a, b in zip(static_outputs, expected)):
        return CaptureResult(None, expected, "the replay's outputs differ from the eager run's")
    return CaptureResult(CapturedCall(graph, static_inputs, static_outputs), expected)


class ShapeGraphs:
    """Captured calls of one function, one per input shape, made on first sight of a shape (at most `limit`
    shapes: a run's batches have one or two). `run(*inputs)` → (outputs, how) with how 'graph' or 'eager'.
    `enabled=False`, a CPU device or a failed capture run the eager interpreter; `reasons` keeps why, per shape."""

    def __init__(self, fn, enabled: bool = True, limit: int = 4):
        self.fn, self.enabled, self.limit = fn, enabled, limit
        self.calls: dict = {}
        self.reasons: dict = {}

    def run(self, *inputs) -> tuple[tuple, str]:
        key = tuple((tuple(t.shape), t.dtype) for t in inputs)
        call = self.calls.get(key)
        if call is not None:
            return call(*inputs), "graph"
        if not self.enabled or inputs[0].device.type != "cuda" or key in self.reasons \
                or len(self.calls) + len(self.reasons) >= self.limit:
            return _as_tuple(self.fn(*inputs)), "eager"
        made = capture(self.fn, inputs)
        if made.call is None:
            self.reasons[key] = made.reason
            return made.outputs, "eager"
        self.calls[key] = made.call
        return made.outputs, "graph"

    def release(self) -> None:
        self.calls.clear()
