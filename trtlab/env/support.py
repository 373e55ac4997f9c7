"""Which TensorRT runs on which GPU, and a verdict per workbench feature (FP16, INT8 Q/DQ, INT8 calibrators).

Facts used below, with sources (looked up for this package; nothing here ran against a real TensorRT):

=====================================  ==================================================================
fact                                   source
=====================================  ==================================================================
TRT 10.0/10.1 runs on SM 7.0+          TensorRT 10.1.0 Support Matrix: "compiled to support all NVIDIA
                                       hardware with capability SM 7.0 or higher"; 10.0.1 release notes:
                                       Volta (7.0) deprecated starting with 10.0.
TRT 10.5+ drops Volta (SM 7.0)         TensorRT 10.5.0 release notes: "NVIDIA Volta support (GPUs with
                                       compute capability 7.0) has been removed starting with TensorRT 10.5"
                                       (10.4.0 notes: "will be removed in TensorRT 10.5").
TRT 10.16, 11.0-11.4 need Turing+      Prerequisites pages of 10.16.0, 11.0.0, 11.1.0, 11.2.1, 11.4.0:
                                       "NVIDIA GPU (Turing architecture or later)".
Pascal (SM 6.x): last TRT is 8.6       8.5.2 release notes: 8.5 last for Kepler, Maxwell dropped in 9.0
                                       (so 8.6 still runs SM 6.x); 10.0/10.1 need SM 7.0+; PyPI's
                                       ``tensorrt`` goes from 8.6.1 straight to 10.0.1 (no 9.x wheels).
Blackwell needs TRT >= 10.8            TensorRT 10.8.0 release notes: "This release supports NVIDIA
                                       Blackwell GPUs".
cuDNN optional in TRT 10               10.0.1 support matrix lists "NVIDIA cuDNN (Optional)"; 10.13
                                       prerequisites: only speeds up a few deprecated layers, not used by
                                       the lean/dispatch runtimes, not supported on Blackwell.
TRT 11 removed implicit INT8 + FP16    TensorRT 10.x->11.x Python API migration guide: BuilderFlag.FP16,
flag                                   BuilderFlag.INT8, IBuilderConfig.int8_calibrator removed ("strong
                                       typing with ModelOpt AutoCast" / "explicit quantization with Q/DQ");
                                       Support Policies page: IInt8Calibrator removed in 11.0.0.
=====================================  ==================================================================
"""
from __future__ import annotations

from dataclasses import dataclass

from trtlab.env.layout import version_str, version_tuple
from trtlab.env.machine import arch_name

#: Minimum compute capability per TensorRT release range: (first, last_verified, min_cc, source). Versions past
#: ``last_verified`` of a major are assumed to follow the last row of that major and the verdict says so.
GPU_SUPPORT = (
    ((10, 0), (10, 4), (7, 0), "TensorRT 10.0-10.4 support SM 7.0+ (10.1 support matrix; Volta deprecated in 10.0)"),
    ((10, 5), (10, 16), (7, 5), "TensorRT 10.5 removed Volta (SM 7.0); 10.16 prerequisites: Turing or later"),
    ((11, 0), (11, 4), (7, 5), "TensorRT 11.0-11.4 prerequisites: Turing (SM 7.5) or later"),
)
BLACKWELL_MIN_TRT = (10, 8)  # 10.8.0 release notes: first release supporting Blackwell GPUs.
#: Last TensorRT for Volta (10.5 removed it) and for Pascal (8.6; trtlab needs 10+).
LAST_TRT_FOR_VOLTA = "10.4"
LAST_TRT_FOR_PASCAL = "8.6"


def _support_row(v: tuple[int, ...], trt_version: str):
    """(row, caveat) of GPU_SUPPORT for a TensorRT version."""
    rows = [r for r in GPU_SUPPORT if r[0][0] == v[0]]
    if not rows:
        return GPU_SUPPORT[-1], (f" (the support matrix of TensorRT {v[0]}.x is not in trtlab's table; assumed as "
                                 f"for 11.4)")
    if len(v) < 2:
        return rows[-1], f" (only the major version {v[0]} is known; assumed the newest {v[0]}.x rule)"
    row = next((r for r in rows if r[0] <= v[:2] <= r[1]), None)
    if row is None:
        row = rows[-1]
        return row, (f" (TensorRT {trt_version} is newer than the last release trtlab checked, "
                     f"{version_str(row[1])}; assumed unchanged)")
    return row, ""


def gpu_support(trt_version: str | None, cc: tuple[int, int] | None) -> tuple[bool | None, str]:
    """Does this TensorRT version support this GPU? (verdict, reason). None = cannot tell."""
    v = version_tuple(trt_version)
    if not v:
        return None, "TensorRT version unknown"
    if cc is None:
        return None, "GPU compute capability unknown"
    if v[0] < 10:
        return False, f"TensorRT {trt_version} is older than 10, which trtlab needs (explicit Q/DQ + the TRT 10 API)"
    (first, last, min_cc, source), caveat = _support_row(v, trt_version)
    if cc < min_cc:
        return False, (f"TensorRT {trt_version} needs compute capability {version_str(min_cc)} or newer; this GPU is "
                       f"{arch_name(cc)} [{source}]{caveat}")
    if cc[0] >= 10 and v[:2] < BLACKWELL_MIN_TRT:
        return False, (f"{arch_name(cc)} needs TensorRT {version_str(BLACKWELL_MIN_TRT)} or newer; found "
                       f"{trt_version} [10.8.0 release notes]")
    return True, f"{arch_name(cc)} is supported by TensorRT {trt_version} [{source}]{caveat}"


@dataclass
class FeatureVerdict:
    feature: str
    tensorrt: str         # yes | no | unknown
    reason: str
    onnxruntime: str      # what the workbench falls back to


def _fallbacks(ort_providers: list[str] | None) -> list[tuple[str, str]]:
    """(feature, what runs it without TensorRT) for each feature."""
    providers = ort_providers or []
    ort_gpu = "CUDAExecutionProvider" in providers
    ort_cpu = "CPUExecutionProvider" in providers
    fallback_int8 = ("ONNX Runtime CUDA EP runs the Q/DQ model" if ort_gpu else
                     "ONNX Runtime CPU runs the Q/DQ model" if ort_cpu else "no ONNX Runtime either")
    # The CPU runs the FP16 graph for its accuracy (ONNX Runtime's FP16 kernels, Casts around ops without one), as
    # the demo's fp16 variant does; its timings there say nothing about FP16 speed on a GPU.
    fallback_fp16 = ("ONNX Runtime CUDA EP" if ort_gpu else "ONNX Runtime CPU runs the FP16 graph (accuracy; its CPU "
                     "timing is no FP16 speed)" if ort_cpu else "no ONNX Runtime either")
    fallback_impl = "trtlab's own calibrator (minmax/entropy/percentile) writes Q/DQ scales instead"
    return [("FP16", fallback_fp16), ("INT8 explicit (Q/DQ)", fallback_int8),
            ("INT8 implicit calibrators", fallback_impl)]


def feature_verdicts(trt_version: str | None, cc: tuple[int, int] | None, *, gpu: bool = True,
                     bindings: bool = True, ort_providers: list[str] | None = None) -> list[FeatureVerdict]:
    """A verdict per feature (FP16, INT8 explicit Q/DQ, INT8 implicit calibrators) with the reason when not."""
    features = _fallbacks(ort_providers)
    v = version_tuple(trt_version)
    blocker = None
    if not v:
        blocker = "no TensorRT found"
    elif not gpu:
        blocker = "no NVIDIA GPU visible (NVML / nvidia-smi / cuda-python found none)"
    elif not bindings:
        blocker = f"TensorRT {trt_version} libraries found but the Python bindings are missing: run repair()"
    if blocker:
        return [FeatureVerdict(f, "no", blocker, fb) for f, fb in features]
    supported, why = gpu_support(trt_version, cc)
    if supported is False:
        return [FeatureVerdict(f, "no", why, fb) for f, fb in features]
    state = "yes" if supported else "unknown"
    major = v[0]
    fp16 = ("BuilderFlag.FP16" if major < 11 else
            "no BuilderFlag.FP16 in TensorRT 11: build from an FP16/mixed ONNX (strong typing)")
    out = [FeatureVerdict("FP16", state, f"{fp16}; {why}", features[0][1]),
           FeatureVerdict("INT8 explicit (Q/DQ)", state, f"Q/DQ ONNX from trtlab's calibrator; {why}", features[1][1])]
    if major >= 11:
        out.append(FeatureVerdict("INT8 implicit calibrators", "no", "TensorRT 11 removed implicit INT8 "
                                  "(IInt8Calibrator, BuilderFlag.INT8): explicit Q/DQ only", features[2][1]))
    else:
        out.append(FeatureVerdict("INT8 implicit calibrators", state, "IInt8EntropyCalibrator2 / "
                                  f"IInt8MinMaxCalibrator (deprecated in TensorRT 10, removed in 11); {why}",
                                  features[2][1]))
    return out
