"""The batch that fills the GPU: the default evaluation batch on CUDA follows the GPU's free memory (issue 38 item 3).

A GPU evaluating a classifier 32 images at a time waits on the host between batches; at 256 the GPU is the limit
(issue 38's H200 measurements: eager and graph replay equal there). So batch_size='auto' takes, on a CUDA GPU, the
largest power of two up to MAX_BATCH whose activations fit a share of the free memory, and 32 elsewhere (ONNX
Runtime on the CPU gains nothing from larger batches). A power of two keeps the choice the same across small
changes of free memory: the evaluation batch is part of a GPU result's identity (evaluation.evaluate.with_backend),
so a batch that moved with every megabyte would never find its stored results again.

Activations per image come from the graph, not from a trial run: ONNX shape inference with the batch set to 1, then
the torch backend's own schedule (a tensor lives from the node that makes it to its last reader, graph_module's
release rule); the peak of the live bytes, times HEADROOM for what the kernels allocate beside (a QuantizeLinear's
division, cuDNN workspaces) and the CUDA graph's pool, is what one image needs. Tensors shape inference cannot size
count as the largest one it can.
"""
from __future__ import annotations

import numpy as np

MAX_BATCH = 256
CPU_BATCH = 32
MEMORY_SHARE = 0.6  # of the free GPU memory, for one evaluation's activations
HEADROOM = 2.0
_ELEMENT_BYTES = {1: 4, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 8, 9: 1, 10: 2, 11: 8, 12: 4, 13: 8, 16: 2}


def activation_bytes_per_image(model) -> int | None:
    """Peak bytes of live activations for one image under the torch backend's schedule (module docstring); None when
    shape inference sizes no activation at all."""
    import onnx

    model = _batch_of_one(model)
    try:
        model = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - an unsized graph: the caller keeps the plain default
        return None
    from trtlab.backends.gpu.registry import FOLDABLE

    graph = model.graph
    constants = {i.name for i in graph.initializer}
    for node in graph.node:  # what conversion computes once (graph_module folds these): weights, not activations
        if node.op_type in FOLDABLE and all(not name or name in constants for name in node.input):
            constants.update(o for o in node.output if o)
    sizes = {}
    for info in list(graph.value_info) + list(graph.output) + list(graph.input):
        tensor = info.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim]
        if tensor.HasField("shape") and None not in dims and tensor.elem_type in _ELEMENT_BYTES:
            sizes[info.name] = _ELEMENT_BYTES[tensor.elem_type] * int(np.prod(dims, dtype=np.int64))
    if not sizes:
        return None
    unknown = max(sizes.values())
    last_reader = {}
    for index, node in enumerate(graph.node):
        for name in node.input:
            if name and name not in constants:
                last_reader[name] = index
    outputs = {o.name for o in graph.output}
    live = {i.name: sizes.get(i.name, unknown) for i in graph.input if i.name not in constants}
    peak = sum(live.values())
    for index, node in enumerate(graph.node):
        made = {o: sizes.get(o, unknown) for o in node.output if o and o not in constants}
        peak = max(peak, sum(live.values()) + sum(made.values()))
        live.update(made)
        for name in list(live):
            if name not in outputs and last_reader.get(name, -1) <= index:
                del live[name]
    return int(peak)


def _batch_of_one(model):
    """A copy of `model` whose inputs have a batch of one (their first dimension)."""
    import copy

    model = copy.deepcopy(model)
    constants = {i.name for i in model.graph.initializer}
    for value in model.graph.input:
        dims = value.type.tensor_type.shape.dim
        if value.name not in constants and len(dims):
            dims[0].Clear()
            dims[0].dim_value = 1
    return model


def batch_for_memory(per_image: int | None, free_bytes: int, limit: int = MAX_BATCH) -> int:
    """The largest power of two ≤ `limit` whose activations (× HEADROOM) fit MEMORY_SHARE of `free_bytes` (at least
    1); `limit` when the activations are unknown."""
    if not per_image:
        return limit
    fit = int(MEMORY_SHARE * free_bytes // (HEADROOM * per_image))
    batch = 1
    while batch * 2 <= min(fit, limit):
        batch *= 2
    return batch


def cuda_batch(model_path, device=None) -> tuple[int, str]:
    """(batch, why) for evaluating `model_path` on the CUDA GPU `device` (default: the current one)."""
    import onnx
    import torch

    per_image = activation_bytes_per_image(onnx.load(str(model_path), load_external_data=False))
    free, total = torch.cuda.mem_get_info(device)
    batch = batch_for_memory(per_image, free)
    size = f"{per_image / 2**20:.1f} MB of activations per image" if per_image else "activations of unknown size"
    return batch, (f"{free / 2**30:.1f} of {total / 2**30:.0f} GiB free on the GPU, {size}: batches of {batch} "
                   f"(at most {MAX_BATCH})")
