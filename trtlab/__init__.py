"""trtlab: a notebook-first workbench for TensorRT INT8 work.

Data flows one way: dataset → preprocess + decode cache → calibrate → quantize / build → run → metrics → plots.
Names below are imported lazily so `import trtlab` is fast and works without TensorRT, torch or a GPU.
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "workspace_dir": "workspace",
    "Preprocess": "preprocess", "get_preprocess": "preprocess", "PRESETS": "preprocess",
    "Dataset": "dataset",
    "build_decode_cache": "decode_cache", "DecodeCache": "decode_cache",
    "make_split": "split", "Split": "split",
    "inspect_classifier": "model",
    "make_runner": "backends", "available_backends": "backends",
    "ResultsStore": "results", "VariantResult": "results",
    "accuracy": "metrics", "agreement": "metrics", "per_class_accuracy": "metrics", "variant_table": "metrics",
    "evaluate": "pipeline",
    "write_report": "report", "plot_summary": "report",
    "run_demo": "job", "run_job": "job", "print_summary": "job",
    "demo_dataset": "demo", "export_demo_model": "demo", "demo_split": "demo",
    "saved_split": "ab",
    "class_names": "classes",
    "Recipe": "variants", "build_variant": "variants", "compare": "ab", "ab_widgets": "ab",
    "resolve_guards": "guards",
    "build_engines": "backends.trt", "convert_to_fp16": "fp16",
    "sanitize_model": "sanitize",
    "prepare_imagenet": "imagenet", "load_imagenet": "imagenet", "prepared_data": "prepared",
    "Experiment": "identity",
    "layer_debugger": "layer_debug", "LayerDebugger": "layer_debug",
    "UserError": "errors",
}


# In a notebook, trtlab's INFO messages show without any setup (outside IPython, logging is left alone).
from .log import setup_for_notebook as _setup_for_notebook  # noqa: E402

_setup_for_notebook()


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module 'trtlab' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_EXPORTS))
