"""The GPU backend on torch: an ONNX graph (FP32, FP16 with boundary Casts, INT8 Q/DQ with guards, the FP16 float
path) run op by op with torch, each op computing what the ONNX spec says in the type the graph gives it, Q/DQ
literally (no fused INT8 kernels). It runs on the CPU too, which is how CI checks the conversion.

- `registry`: the op table (op type → builder) and what a builder sees of its node;
- `ops_nn`, `ops_tensor`, `ops_quant`: the ops;
- `graph_module`: ONNX → `OnnxModule` (a torch.nn.Module), unsupported ops refused at conversion;
- `runner`: `TorchRunner`, the backends.Runner on CUDA (or CPU).

Nothing here imports torch until a graph is converted or a runner activated.
"""
# The op modules fill the registry's table with their @op builders when imported. The package imports them, not
# the registry (which would make the table and its entries import each other): importing any module of this
# package — graph_module, runner, the registry itself — runs this first. They import numpy and the registry only
# (torch inside the builders).
from trtlab.backends.gpu import ops_nn, ops_quant, ops_tensor  # noqa: F401
