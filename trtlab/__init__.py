"""trtlab: a notebook-first workbench for TensorRT INT8 work.

Data flows one way: dataset → preprocess + decode cache → calibrate → quantize / build → run → metrics → plots.
Names below are imported lazily so `import trtlab` is fast and works without TensorRT, torch or a GPU.
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "workspace_dir": "core.workspace",
    "Preprocess": "data.preprocess", "get_preprocess": "data.preprocess", "PRESETS": "data.preprocess",
    "Dataset": "data.dataset",
    "build_decode_cache": "data.decode_cache", "DecodeCache": "data.decode_cache",
    "make_split": "data.split", "Split": "data.split", "saved_split": "data.split",
    "inspect_classifier": "graph.classifier",
    "classifier_view": "graph.classifier_view", "preprocess_for": "graph.classifier_view",
    "make_runner": "backends", "available_backends": "backends",
    "ResultsStore": "evaluation.results", "VariantResult": "evaluation.results",
    "accuracy": "evaluation.metrics", "agreement": "evaluation.metrics", "variant_table": "evaluation.metrics",
    # tables and answers for people (views): formatted, each keeping its numbers in `.raw`
    "per_class_accuracy": "views.tables", "head_to_head": "views.verdict",
    "mcnemar": "evaluation.significance", "compare_accuracy": "evaluation.significance",
    "pairwise_significance": "evaluation.significance",
    "evaluate": "evaluation.evaluate",
    # the options objects of evaluate() / compare() (their fields are also taken as keywords)
    "RunOptions": "evaluation.options", "EvalTarget": "evaluation.options",
    "CalibrationOptions": "workflows.compare", "InputOptions": "workflows.compare",
    "write_report": "views.report", "plot_summary": "views.report",
    "run_demo": "workflows.job", "run_job": "workflows.job", "print_summary": "workflows.job",
    "demo_dataset": "data.demo", "export_demo_model": "data.demo", "demo_split": "data.demo",
    "class_names": "data.classes",
    "Recipe": "quantization.recipe", "build_variant": "quantization.variants", "compare": "workflows.compare", "ab_widgets": "workflows.compare",
    "Guard": "graph.guards", "parse_guard": "graph.guards", "resolve_guards": "graph.guards",
    "build_engines": "workflows.engines",
    "convert_to_fp16": "graph.precision", "plan_precisions": "graph.precision", "convert_precisions": "graph.precision",
    "sanitize_model": "graph.sanitize",
    # issue 17: where TensorRT will compute each node (fusion-aware, no GPU), and the placement rules
    "precision_report": "graph.fusion", "precision_overview": "graph.fusion",
    "speedup_estimate": "graph.roofline",  # per-GPU INT8-vs-FP16 speed estimate (with its band) of a precision report
    "speed_clause": "graph.speed",  # issue 37: is INT8 worth shipping for speed — measured on TensorRT, else estimated
    "placement_rules": "quantization.placement:RULES",
    "recovery_methods": "quantization.recovery:METHODS",  # issue 39: Recipe(recovery=(...)) names these
    "prepare_imagenet": "data.imagenet", "load_imagenet": "data.imagenet", "prepared_data": "data.prepared",
    "Experiment": "evaluation.identity",
    "layer_debugger": "debug.debugger", "LayerDebugger": "debug.debugger",
    # issue 26: how many calibration images are enough (threshold and fidelity stability against size)
    "calibration_size_study": "workflows.calibration_size",
    "UserError": "core.errors",
    # notebook 00: the install cell's second step, TensorRT discovery, repair, loading and the machine report
    "complete_install": "env.notebook_install",
    "discover_tensorrt": "env.discovery:discover", "tensorrt_candidates_frame": "env.discovery:candidates_frame",
    "repair_tensorrt": "env.repairing:repair", "load_tensorrt": "env.loading:load",
    "environment_report": "env.report:collect_report",
    # notebook 01 and 04
    "organize_imagenet": "data.imagenet:organize",
    "build_dashboard": "views.dashboard", "dashboard_controls": "views.dashboard:controls",
}


# In a notebook, trtlab's INFO messages show without any setup (outside IPython, logging is left alone).
from trtlab.core.log import setup_for_notebook as _setup_for_notebook  # noqa: E402

_setup_for_notebook()


def __getattr__(name: str):
    if name in _EXPORTS:
        module, _, attribute = _EXPORTS[name].partition(":")
        return getattr(importlib.import_module(f".{module}", __name__), attribute or name)
    raise AttributeError(f"module 'trtlab' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_EXPORTS))
