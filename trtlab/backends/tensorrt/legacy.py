"""TensorRT 10's legacy weakly typed path: precision builder flags, guards as layer precision, implicit INT8.

Reached only with `weakly_typed=True` or precision 'int8-implicit', and only on TensorRT 10: BuilderFlag.FP16/INT8,
ILayer.precision / set_output_type and OBEY_PRECISION_CONSTRAINTS are deprecated since 10.12, the implicit
calibrators since 10.1, and TensorRT 11 removed them all (10.x→11.x Python migration guide, "Removed Python APIs").
The calibrator object comes from the caller (trtlab.quantization.tensorrt_calibrator makes it, on the images
trtlab's own calibration uses, with the calibration-cache sidecar schema of trtlab.quantization.calibration_cache).
"""
from __future__ import annotations

from trtlab.backends.tensorrt.loader import log
from trtlab.core.errors import UserValueError


def configure_weakly_typed(trt, builder, config, network, onnx_model, opts, info, calibrator=None,
                           progress: bool = True) -> dict[str, str]:
    """Set the legacy precision flags, the implicit calibrator and the guards' layer precision on `config`.
    Returns {layer name: precision} of the layers pinned by guards."""
    flag = trt.BuilderFlag
    if opts.precision == "fp16":
        config.set_flag(flag.FP16)
    elif opts.precision in ("int8", "int8-implicit"):
        # Weakly typed INT8 (Q/DQ or calibrated): INT8 enables the INT8 kernels, FP16 the fallback of the rest.
        config.set_flag(flag.INT8)
        if opts.fp16_fallback:
            config.set_flag(flag.FP16)
    if opts.precision == "int8-implicit":
        attach_calibrator(trt, builder, config, info, calibrator)
    if not (opts.guards and opts.precision != "fp32"):
        return {}
    from trtlab.graph.guards import resolve_guards

    matched = apply_layer_guards(trt, network, onnx_model, resolve_guards(onnx_model, opts.guards))
    config.set_flag(flag.OBEY_PRECISION_CONSTRAINTS)
    if progress:
        log.info(f"guards: {len(matched)} TensorRT layer(s) pinned "
                 f"({', '.join(sorted(matched)[:6])}{'…' if len(matched) > 6 else ''})")
    return matched


def attach_calibrator(trt, builder, config, info, calibrator) -> None:
    """TensorRT's implicit INT8 calibrator, at one fixed shape: min = opt = max = the calibration batch."""
    if calibrator is None:
        raise UserValueError("precision='int8-implicit' needs a TensorRT calibrator",
                             "make one with trtlab.quantization.tensorrt_calibrator.tensorrt_calibrator(...) (what "
                             "trtlab.build_engines does) and pass calibrator=")
    config.int8_calibrator = calibrator
    chw = tuple(int(d) for d in info.input_shape[1:])
    shape = (int(calibrator.get_batch_size()), *chw)
    calib_profile = builder.create_optimization_profile()
    calib_profile.set_shape(info.input_name, shape, shape, shape)
    config.set_calibration_profile(calib_profile)


def apply_layer_guards(trt, network, onnx_model, guard_nodes) -> dict[str, str]:
    """Pin the layers that came from guarded ONNX nodes to the guard's precision (legacy weakly typed path only:
    on a strongly typed network TensorRT forbids layer precision and output types).

    The ONNX parser names a layer after its ONNX node and gives its output tensors the ONNX tensor names, so a
    layer belongs to a node when the names match or when it produces one of the node's outputs. Returns
    {layer name: precision}; raises UserValueError naming guards that matched no layer.
    """
    by_name = {n.name: n for n in onnx_model.graph.node}
    wanted = {}
    for guard in guard_nodes:
        node = by_name.get(guard.name)
        wanted[guard.name] = (set(node.output) if node is not None else set(), guard.precision)
    dtype = {"fp32": trt.float32, "fp16": trt.float16}
    matched: dict[str, str] = {}
    hit_guards = set()
    for i in range(network.num_layers):
        layer = network.get_layer(i)
        outputs = {layer.get_output(j).name for j in range(layer.num_outputs)}
        for guard_name, (node_outputs, precision) in wanted.items():
            if layer.name == guard_name or outputs & node_outputs:
                layer.precision = dtype[precision]
                for j in range(layer.num_outputs):
                    if layer.get_output(j).dtype in (trt.float32, trt.float16):
                        layer.set_output_type(j, dtype[precision])
                matched[layer.name] = precision
                hit_guards.add(guard_name)
    missing = sorted(set(wanted) - hit_guards)
    if missing:
        raise UserValueError(f"guarded ONNX node(s) {missing} match no TensorRT layer (by name or output tensor)",
                             "check the names with trtlab.inspect_classifier / Netron")
    return matched
