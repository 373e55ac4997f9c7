"""The GPU backend on torch: an ONNX graph (FP32, FP16 with boundary Casts, INT8 Q/DQ with guards, the FP16 float
path) run op by op with torch, each op computing what the ONNX spec says in the type the graph gives it, Q/DQ
literally (no fused INT8 kernels). It runs on the CPU too, which is how CI checks the conversion.

- `registry`: the op table (op type → builder) and what a builder sees of its node;
- `ops_nn`, `ops_tensor`, `ops_quant`: the ops;
- `graph_module`: ONNX → `OnnxModule` (a torch.nn.Module), unsupported ops refused at conversion;
- `runner`: `TorchRunner`, the backends.Runner on CUDA (or CPU).

Nothing here imports torch until a graph is converted or a runner activated.
"""
