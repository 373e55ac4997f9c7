"""The environment report: GPU, driver, CUDA, cuDNN, TensorRT library and bindings, ONNX Runtime, the one install
command for this machine, and a verdict per feature. Shown as a text table (``python -m trtlab doctor``), an HTML
table (the notebook) or JSON; every cell is shown in full (long advice wraps, it is never cut).
"""
from __future__ import annotations

import dataclasses
import html
import sys
import textwrap
from dataclasses import dataclass, field

from trtlab.env import machine
from trtlab.env.candidates import Candidate
from trtlab.env.discovery import best_candidate, discover, no_tensorrt_message
from trtlab.env.install import InstallAdvice, advice_for, say_install_advice_once
from trtlab.env.layout import MANIFEST, default_lib_dir, version_str, version_tuple
from trtlab.env.support import FeatureVerdict, feature_verdicts
from trtlab.core.tables import full_text_frame
from trtlab.env.wheels import installed_bindings_version


@dataclass
class ReportRow:
    item: str
    value: str
    status: str       # ok | warn | fail | info
    detail: str = ""


_STATUS_OF_VERDICT = {"yes": "ok", "no": "fail"}
_STATUS_COLOUR = {"ok": "#1a7f37", "warn": "#9a6700", "fail": "#cf222e", "info": "#57606a"}


@dataclass
class EnvReport:
    rows: list[ReportRow]
    features: list[FeatureVerdict]
    trt_line: str
    trt_ready: bool
    ort_ready: bool
    candidates: list[Candidate] = field(default_factory=list)
    install: InstallAdvice | None = None

    def all_rows(self) -> list[ReportRow]:
        """Environment rows, then one row per feature (reason and what runs it without TensorRT)."""
        return self.rows + [ReportRow(f"feature: {f.feature}", f.tensorrt, _STATUS_OF_VERDICT.get(f.tensorrt, "warn"),
                                      f"{f.reason} | without TensorRT: {f.onnxruntime}") for f in self.features]

    def to_frame(self):
        """The report as a pandas DataFrame: environment rows, then one row per feature (cells shown whole)."""
        return full_text_frame([dataclasses.asdict(r) for r in self.all_rows()], ["item", "value", "status", "detail"])

    def to_dict(self) -> dict:
        return {"rows": [dataclasses.asdict(r) for r in self.rows],
                "features": [dataclasses.asdict(f) for f in self.features],
                "tensorrt": self.trt_line, "tensorrt_ready": self.trt_ready, "onnxruntime_ready": self.ort_ready,
                "install": dataclasses.asdict(self.install) if self.install else None,
                "summary": self.summary(color=False)}

    def format_table(self, width: int = 118) -> str:
        """A text table (item, status, value, detail) whose long details wrap inside their column; a value too
        long for its column (an install command) is printed whole, its detail on the lines below. Nothing is cut."""
        rows = [(r.item, r.value, r.status, r.detail) for r in self.all_rows()]
        w0 = max(len(r[0]) for r in rows)
        w1 = min(max(len(r[1]) for r in rows), 30)
        indent = w0 + 2 + 4 + 2
        lines = []
        for item, value, status, detail in rows:
            head = f"{item:<{w0}}  {status:<4}  "
            if len(value) <= w1:
                details = _wrap(detail, max(width - indent - w1 - 2, 24))
                lines.append(f"{head}{value:<{w1}}  {details[0]}".rstrip())
                lines += [" " * (indent + w1 + 2) + d for d in details[1:]]
            else:
                lines.append(f"{head}{value}")
                lines += [" " * indent + d for d in _wrap(detail, max(width - indent, 24)) if d]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        """The notebook's view: every cell in full, long text wrapped, status coloured, then the summary."""
        cells = []
        for r in self.all_rows():
            colour = _STATUS_COLOUR.get(r.status, "#57606a")
            cells.append(f"<tr><td>{html.escape(r.item)}</td><td>{html.escape(r.value)}</td>"
                         f"<td style='color:{colour};font-weight:bold'>{html.escape(r.status)}</td>"
                         f"<td style='text-align:left;white-space:pre-wrap;word-break:break-word'>"
                         f"{html.escape(r.detail)}</td></tr>")
        head = "".join(f"<th>{h}</th>" for h in ("item", "value", "status", "detail"))
        summary = html.escape(self.summary(color=False)).replace("\n", "<br>")
        return (f"<table style='text-align:left'><thead><tr>{head}</tr></thead><tbody>{''.join(cells)}</tbody>"
                f"</table><p>{summary}</p>")

    def summary(self, color: bool = True) -> str:
        """Green/red summary: TensorRT line, what the workbench runs on, and what to install."""
        green, red, reset = ("\033[32m", "\033[31m", "\033[0m") if color else ("", "", "")
        lines = []
        if self.trt_ready:
            ok = [f.feature for f in self.features if f.tensorrt == "yes"]
            lines.append(f"{green}🟢 GREEN  TensorRT ready: {self.trt_line}; features: {', '.join(ok)}{reset}")
            return "\n".join(lines)
        lines.append(f"{red}🔴 RED    TensorRT not usable here: {self.trt_line}{reset}")
        # A command always; the long "what to do instead" once per process (the table or notebook 00's earlier
        # steps may have said it).
        if self.install is not None and (self.install.command or say_install_advice_once(self.install.hint(), "")):
            lines.append(f"         install: {self.install.line()}")
        if self.ort_ready:
            lines.append(f"{green}🟢 GREEN  the workbench runs on ONNX Runtime ({self.row('onnxruntime').value}){reset}")
        else:
            lines.append(f"{red}🔴 RED    no ONNX Runtime either: pip install onnxruntime{reset}")
        return "\n".join(lines)

    def row(self, item: str) -> ReportRow:
        return next(r for r in self.rows if r.item == item)


def _wrap(text: str, width: int) -> list[str]:
    return textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False) or [""]


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


def _cuda_runtime_row(facts: machine.GpuFacts, advice: InstallAdvice) -> ReportRow:
    """The CUDA runtime Python would use; 'ok' only where a GPU can run it (its driver supports that CUDA)."""
    version, source = machine.cuda_runtime_version()
    if version is None:
        return ReportRow("CUDA runtime", "not found", "fail" if facts.gpu else "info",
                         "no cuda-python, pip nvidia-cuda-runtime or libcudart found" +
                         (f": {advice.hint()}" if facts.gpu else " (nothing needs it without a GPU)"))
    if facts.gpu is None:
        return ReportRow("CUDA runtime", version, "info", f"{source}; installed, but no NVIDIA GPU is visible, so "
                                                          f"nothing runs on CUDA here")
    have, can = version_tuple(version)[:1], version_tuple(facts.cuda_driver)[:1]
    if have and can and have > can:
        return ReportRow("CUDA runtime", version, "fail", f"{source}; CUDA {have[0]} needs a newer driver (this one "
                                                          f"supports CUDA up to {facts.cuda_driver}): {advice.hint()}")
    return ReportRow("CUDA runtime", version, "ok", source)


def _library_rows(candidates: list[Candidate], cand: Candidate | None, roots) -> tuple[list[ReportRow], str]:
    if cand is None:
        line = no_tensorrt_message(candidates, roots)
        return [ReportRow("TensorRT library", "not found", "fail", line)], line
    status, detail = ("ok" if cand.healthy else "warn"), f"{cand.source}: {cand.lib_dir}"
    if cand.version_mix:
        status, detail = "fail", f"{detail}; repair refuses this set: {cand.version_mix}"
    elif cand.problems:
        detail += f"; {len(cand.problems)} problem(s), repair() fixes them: {cand.problems[0]}"
    missing = cand.missing_components()
    if missing:
        status, detail = ("fail" if status == "fail" else "warn"), detail + f"; missing {', '.join(missing)}"
    rows = [ReportRow("TensorRT library", cand.version or "unknown version", status, detail)]
    if cand.version_note:
        rows.append(ReportRow("TensorRT version check", "disagreement", "warn", cand.version_note))
    others = [f"{c.version or '?'} ({c.source}: {c.lib_dir})" for c in candidates if c is not cand]
    if others:
        rows.append(ReportRow("other TensorRT candidates", str(len(others)), "info", "; ".join(others)))
    return rows, f"TensorRT {cand.version} ({cand.source}: {cand.lib_dir})"


def _bindings_row(cand: Candidate | None, probe_import: bool, advice: InstallAdvice) -> tuple[ReportRow, bool]:
    in_kernel = sys.modules.get("tensorrt")
    if in_kernel is not None:
        return ReportRow("TensorRT bindings", getattr(in_kernel, "__version__", "?"), "ok",
                         "already imported in this process"), True
    version = installed_bindings_version()
    if not version:
        return ReportRow("TensorRT bindings", "not installed", "fail" if cand else "info",
                         "repair() installs the wheel from the TensorRT tar" if cand else
                         "they come with TensorRT: see TensorRT install"), False
    repaired = default_lib_dir()
    lib_dir = str(repaired) if (repaired / MANIFEST).exists() else cand.lib_dir if cand else None
    imported, err = machine.probe_tensorrt_import(lib_dir) if probe_import else (version, None)
    ok = imported is not None
    mismatch = cand and cand.version and version_tuple(version)[:2] != version_tuple(cand.version)[:2]
    detail = "import works in a fresh Python" if ok else f"import tensorrt fails: {err}"
    if mismatch:
        detail += f"; bindings {version} do not match library {cand.version}: run repair()"
    return ReportRow("TensorRT bindings", version, "ok" if ok and not mismatch else "warn", detail), ok


def _install_row(advice: InstallAdvice, trt_found: bool) -> ReportRow:
    # The command (or "none") always stands in its column; its long reason once per process
    # (install.say_install_advice_once).
    if advice.command:
        return ReportRow("TensorRT install", advice.command, "info" if trt_found else "warn",
                         say_install_advice_once(advice.reason, "(why: said above)"))
    return ReportRow("TensorRT install", "none for this machine", "info",
                     say_install_advice_once(advice.hint(), "said above"))


def collect_report(candidates: list[Candidate] | None = None, roots: list | None = None, *,
                   probe_import: bool = True) -> EnvReport:
    """Everything the workbench needs to know about this machine, with a verdict per feature."""
    if candidates is None:
        candidates = discover(roots)
    machine.forget_gpu_facts()  # the report reads the machine afresh
    facts = machine.gpu_facts()
    advice = advice_for(facts)
    rows = _gpu_rows(facts) + [_cuda_runtime_row(facts, advice)]
    cudnn, cudnn_src = machine.cudnn_version()
    rows.append(ReportRow("cuDNN", cudnn or "not found", "ok" if cudnn else "info",
                          (cudnn_src + "; " if cudnn_src else "") + "optional for TensorRT 10+ (a few deprecated layers)"))
    cand = best_candidate(candidates)
    library_rows, trt_line = _library_rows(candidates, cand, roots)
    rows += library_rows
    bindings_row, bindings_ok = _bindings_row(cand, probe_import, advice)
    rows += [bindings_row, _install_row(advice, cand is not None)]
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
    return EnvReport(rows, features, trt_line, trt_ready, ort_version is not None, candidates, advice)
