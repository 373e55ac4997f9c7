"""The environment report: GPU, driver, CUDA, cuDNN, TensorRT library and bindings, ONNX Runtime, and a verdict
per feature. Shown as a text table (``python -m trtlab doctor``), a DataFrame (the notebook) or JSON.
"""
from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass, field

from trtlab.env import machine
from trtlab.env.candidates import Candidate
from trtlab.env.discovery import best_candidate, discover, no_tensorrt_message
from trtlab.env.layout import MANIFEST, default_lib_dir, version_str, version_tuple
from trtlab.env.support import FeatureVerdict, feature_verdicts
from trtlab.env.wheels import installed_bindings_version


@dataclass
class ReportRow:
    item: str
    value: str
    status: str       # ok | warn | fail | info
    detail: str = ""


_STATUS_OF_VERDICT = {"yes": "ok", "no": "fail"}


@dataclass
class EnvReport:
    rows: list[ReportRow]
    features: list[FeatureVerdict]
    trt_line: str
    trt_ready: bool
    ort_ready: bool
    candidates: list[Candidate] = field(default_factory=list)

    def all_rows(self) -> list[ReportRow]:
        """Environment rows, then one row per feature (reason and what runs it without TensorRT)."""
        return self.rows + [ReportRow(f"feature: {f.feature}", f.tensorrt, _STATUS_OF_VERDICT.get(f.tensorrt, "warn"),
                                      f"{f.reason} | without TensorRT: {f.onnxruntime}") for f in self.features]

    def to_frame(self):
        """The report as a pandas DataFrame: environment rows, then one row per feature."""
        import pandas as pd

        return pd.DataFrame([dataclasses.asdict(r) for r in self.all_rows()],
                            columns=["item", "value", "status", "detail"])

    def to_dict(self) -> dict:
        return {"rows": [dataclasses.asdict(r) for r in self.rows],
                "features": [dataclasses.asdict(f) for f in self.features],
                "tensorrt": self.trt_line, "tensorrt_ready": self.trt_ready, "onnxruntime_ready": self.ort_ready,
                "summary": self.summary(color=False)}

    def format_table(self) -> str:
        rows = [(r.item, r.value, r.status, r.detail) for r in self.rows]
        rows += [(f"feature: {f.feature}", f.tensorrt, _STATUS_OF_VERDICT.get(f.tensorrt, "warn"), f.reason)
                 for f in self.features]
        w0 = max(len(r[0]) for r in rows)
        w1 = min(max(len(r[1]) for r in rows), 40)
        return "\n".join(f"{a:<{w0}}  {b[:w1]:<{w1}}  {c:<4}  {d}" for a, b, c, d in rows)

    def summary(self, color: bool = True) -> str:
        """Green/red summary: TensorRT line and what the workbench runs on."""
        green, red, reset = ("\033[32m", "\033[31m", "\033[0m") if color else ("", "", "")
        lines = []
        if self.trt_ready:
            ok = [f.feature for f in self.features if f.tensorrt == "yes"]
            lines.append(f"{green}🟢 GREEN  TensorRT ready: {self.trt_line}; features: {', '.join(ok)}{reset}")
            return "\n".join(lines)
        lines.append(f"{red}🔴 RED    TensorRT not usable here: {self.trt_line}{reset}")
        if self.ort_ready:
            lines.append(f"{green}🟢 GREEN  the workbench runs on ONNX Runtime ({self.row('onnxruntime').value}){reset}")
        else:
            lines.append(f"{red}🔴 RED    no ONNX Runtime either: pip install onnxruntime{reset}")
        return "\n".join(lines)

    def row(self, item: str) -> ReportRow:
        return next(r for r in self.rows if r.item == item)


def _gpu_rows(facts: machine.GpuFacts) -> list[ReportRow]:
    gpu = facts.gpu
    if gpu is None:
        tried = "; ".join(facts.tried) or "no source answered"
        return [ReportRow("GPU", "no GPU", "warn", f"no NVIDIA GPU visible ({tried})")]
    more = f" (+{len(facts.gpus) - 1} more)" if len(facts.gpus) > 1 else ""
    driver = gpu.driver or facts.driver
    return [ReportRow("GPU", f"{gpu.name}{more}", "ok", f"via {gpu.source}"),
            ReportRow("compute capability", version_str(gpu.compute_capability or ()) or "unknown",
                      "ok" if gpu.compute_capability else "warn", machine.arch_name(gpu.compute_capability)),
            ReportRow("driver", driver or "unknown", "ok" if driver else "warn",
                      f"supports CUDA up to {facts.cuda_driver}" if facts.cuda_driver else "")]


def _cuda_runtime_row(facts: machine.GpuFacts) -> ReportRow:
    version, source = machine.cuda_runtime_version()
    return ReportRow("CUDA runtime", version or "not found", "ok" if version else ("fail" if facts.gpu else "info"),
                     source or "no cuda-python, pip nvidia-cuda-runtime or libcudart found")


def _library_rows(candidates: list[Candidate], cand: Candidate | None, roots) -> tuple[list[ReportRow], str]:
    if cand is None:
        line = no_tensorrt_message(candidates, roots)
        return [ReportRow("TensorRT library", "not found", "fail", line)], line
    status, detail = ("ok" if cand.healthy else "warn"), f"{cand.source}: {cand.lib_dir}"
    if cand.problems:
        detail += f"; {len(cand.problems)} problem(s), repair() fixes them: {cand.problems[0]}"
    missing = cand.missing_components()
    if missing:
        status, detail = "warn", detail + f"; missing {', '.join(missing)}"
    rows = [ReportRow("TensorRT library", cand.version or "unknown version", status, detail)]
    if cand.version_note:
        rows.append(ReportRow("TensorRT version check", "disagreement", "warn", cand.version_note))
    others = [f"{c.version or '?'} ({c.source}: {c.lib_dir})" for c in candidates if c is not cand]
    if others:
        rows.append(ReportRow("other TensorRT candidates", str(len(others)), "info", "; ".join(others)))
    return rows, f"TensorRT {cand.version} ({cand.source}: {cand.lib_dir})"


def _bindings_row(cand: Candidate | None, probe_import: bool) -> tuple[ReportRow, bool]:
    in_kernel = sys.modules.get("tensorrt")
    if in_kernel is not None:
        return ReportRow("TensorRT bindings", getattr(in_kernel, "__version__", "?"), "ok",
                         "already imported in this process"), True
    version = installed_bindings_version()
    if not version:
        return ReportRow("TensorRT bindings", "not installed", "fail" if cand else "info",
                         "repair() installs the wheel from the TensorRT tar" if cand else
                         "pip install tensorrt-cu12 on a GPU machine"), False
    repaired = default_lib_dir()
    lib_dir = str(repaired) if (repaired / MANIFEST).exists() else cand.lib_dir if cand else None
    imported, err = machine.probe_tensorrt_import(lib_dir) if probe_import else (version, None)
    ok = imported is not None
    mismatch = cand and cand.version and version_tuple(version)[:2] != version_tuple(cand.version)[:2]
    detail = "import works in a fresh Python" if ok else f"import tensorrt fails: {err}"
    if mismatch:
        detail += f"; bindings {version} do not match library {cand.version}: run repair()"
    return ReportRow("TensorRT bindings", version, "ok" if ok and not mismatch else "warn", detail), ok


def collect_report(candidates: list[Candidate] | None = None, roots: list | None = None, *,
                   probe_import: bool = True) -> EnvReport:
    """Everything the workbench needs to know about this machine, with a verdict per feature."""
    if candidates is None:
        candidates = discover(roots)
    machine.forget_gpu_facts()  # the report reads the machine afresh
    facts = machine.gpu_facts()
    rows = _gpu_rows(facts) + [_cuda_runtime_row(facts)]
    cudnn, cudnn_src = machine.cudnn_version()
    rows.append(ReportRow("cuDNN", cudnn or "not found", "ok" if cudnn else "info",
                          (cudnn_src + "; " if cudnn_src else "") + "optional for TensorRT 10+ (a few deprecated layers)"))
    cand = best_candidate(candidates)
    library_rows, trt_line = _library_rows(candidates, cand, roots)
    rows += library_rows
    bindings_row, bindings_ok = _bindings_row(cand, probe_import)
    rows.append(bindings_row)
    ort_version, providers, ort_err = machine.ort_info()
    ort_value = f"{ort_version} ({', '.join(p.replace('ExecutionProvider', '') for p in providers)})"
    rows.append(ReportRow("onnxruntime", ort_value if ort_version else "not usable", "ok" if ort_version else "fail",
                          ", ".join(providers) if ort_version else ort_err))
    gpu = facts.gpu
    features = feature_verdicts(cand.version if cand else None, gpu.compute_capability if gpu else None,
                                gpu=gpu is not None, bindings=bindings_ok, ort_providers=providers)
    trt_ready = any(f.tensorrt == "yes" for f in features)
    if cand and not trt_ready:
        trt_line = f"{trt_line}: {features[0].reason}"
    return EnvReport(rows, features, trt_line, trt_ready, ort_version is not None, candidates)
