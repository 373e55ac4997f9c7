"""Layer-wise debugging of an INT8 variant and automatic guard search: from "INT8 lost 1% agreement" to "guard
these layers". Everything runs on ONNX Runtime with graph optimizations disabled (the literal Q/DQ reference
semantics that TensorRT implements; see evaluation.literal_check).

- `debugger`: `LayerDebugger` — the sanitized FP32 graph, calibrated scales, the images, in-memory INT8 variants;
  `layer_debugger()` makes one from a model and a dataset as `trtlab.compare` does.
- `tensor_errors`: every original tensor of the variant against FP32, in graph order, and where the error jumps.
- `sensitivity`: each weighted layer's share of the output noise (only it INT8 / all but it INT8), resumable.
- `guard_search`: guard the most sensitive layers until the target is met on the search images, prune, verify on
  the other evaluation images; the found recipe as a `python -m trtlab calibrate` line.
- `targets`: what the search must reach — top-1 agreement and/or output fidelity (logit cosine, SQNR, softmax KL;
  default mean logit cosine ≥ 0.99).
- block names (`_blocks.3._project_conv`, from the weights' names) come from `trtlab.graph.block_names`.
- `errors` (running error sums), `graphs` (compared tensors, graph suffixes, the literal session), `plots`,
  `tables` (the tables formatted for people).
"""
