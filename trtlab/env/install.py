"""The one pip command that installs a working TensorRT on this machine, chosen from the driver and the GPU.

Facts (looked up for this package; the package names and versions were checked on PyPI with pip):

* Bare ``pip install tensorrt`` installs the CUDA 13 build: the ``tensorrt`` metapackage requires
  ``tensorrt_cu13==<same version>`` from 10.13.2.6 on (10.13.0.35 still required ``tensorrt_cu12``); PyPI has
  ``tensorrt-cu12`` 10.0.1 … 11.4.0.106 and ``tensorrt-cu13`` 10.13.2.6 … 11.4.0.106, and ``cuda-python`` 12.x
  and 13.x (an unbounded ``cuda-python>=12`` resolves to 13.x).
* Drivers: TensorRT 11.4.0 prerequisites — "r580+ on Linux and Windows for the CUDA 13.x packages … The lower
  r535+ on Linux … minimum applies only to CUDA 12.x pip wheels"; 10.16.0 / 11.0.0 / 11.1.0 prerequisites:
  "Linux: NVIDIA driver r535 or later", "CUDA 13.x: NVIDIA driver r580 or later". CUDA Compatibility, minor
  version compatibility table: CUDA 13.x needs >= 580, CUDA 12.x >= 525 (< 580 for minor-version compatibility).
* GPUs: TensorRT 10.5 removed Volta (SM 7.0), so 10.4 is Volta's last (10.5.0 release notes); CUDA 13.0 dropped
  Volta (and Pascal, Maxwell) from its toolkit and libraries (CUDA 12.8/12.9 deprecation notes: "offline
  compilation and library support will be removed in the next major CUDA Toolkit version"), so Volta stays on the
  CUDA 12 wheels; Pascal's last TensorRT is 8.6 and trtlab needs 10+ (see trtlab.env.support); Turing (T4) and
  Ada (L4) run every TensorRT 10.5+/11.x wheel (Turing or later).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from trtlab.env.machine import GpuFacts, arch_name, cc_from_name, gpu_facts
from trtlab.env.support import LAST_TRT_FOR_PASCAL, LAST_TRT_FOR_VOLTA

#: The commands, one per kind of machine (quoted so they paste into a shell or a notebook ``!pip`` line).
CUDA13_COMMAND = 'pip install tensorrt-cu13 "cuda-python>=13,<14"'
CUDA12_COMMAND = 'pip install tensorrt-cu12 "cuda-python>=12,<13"'
VOLTA_COMMAND = 'pip install "tensorrt-cu12<10.5" "cuda-python>=12,<13"'   # 10.4 = LAST_TRT_FOR_VOLTA
CUDA13_MIN_DRIVER = 580
CUDA12_MIN_DRIVER = 535   # TensorRT 10/11 CUDA 12 wheels (the CUDA 12 toolkit alone would accept r525)
ON_ORT = "continue on ONNX Runtime"


@dataclass(frozen=True)
class InstallAdvice:
    """What to install here: ``command`` (None when no TensorRT 10/11 wheel works) and why."""

    command: str | None
    reason: str
    todo: str = ""        # what to do when there is no command

    def hint(self) -> str:
        """One clause for messages: the command, or what to do instead."""
        return self.command if self.command else f"{self.todo} ({self.reason})"

    def line(self) -> str:
        """One sentence for the report and the notebook."""
        return f"{self.command}  — {self.reason}" if self.command else f"{self.todo}: {self.reason}"


def driver_branch(driver: str | None) -> int | None:
    """``"570.86.15"`` → 570."""
    m = re.match(r"^\s*(\d+)", driver or "")
    return int(m.group(1)) if m else None


def _driver_rule(driver: str | None, cuda_driver: str | None) -> tuple[int | None, str]:
    """(lowest driver branch this driver is known to reach, how it was read)."""
    branch = driver_branch(driver)
    if branch is not None:
        return branch, f"driver {driver}"
    cuda = tuple(int(x) for x in re.findall(r"\d+", cuda_driver or ""))[:2]
    if cuda and cuda[0] >= 13:
        return CUDA13_MIN_DRIVER, f"a driver for CUDA {cuda_driver} (r580+)"
    if cuda and cuda[0] == 12:
        return 525, f"a driver for CUDA {cuda_driver} (r525+; its exact version is unknown)"
    return None, "driver version unknown"


def install_advice(driver: str | None, cc: tuple[int, int] | None, gpu_name: str | None = None, *,
                   cuda_driver: str | None = None) -> InstallAdvice:
    """The one install command for a GPU (compute capability or name) under a driver."""
    if gpu_name is None and cc is None:
        return InstallAdvice(None, "no NVIDIA GPU is visible; TensorRT needs one",
                             f"{ON_ORT}, or turn on a GPU accelerator (on Kaggle: T4 or L4) and run this again")
    cc = cc or cc_from_name(gpu_name or "")
    gpu = f"{gpu_name or 'this GPU'}, {arch_name(cc)}"
    if cc is not None and cc < (7, 0):
        return InstallAdvice(None, f"{gpu}: no TensorRT 10 or 11 runs on it (10.0-10.4 need sm_70+, 10.5+ and 11.x "
                                   f"sm_75+; its last TensorRT is {LAST_TRT_FOR_PASCAL}, older than the 10.x that "
                                   f"trtlab needs)", ON_ORT)
    branch, how = _driver_rule(driver, cuda_driver)
    if branch is None:
        return InstallAdvice(None, f"{gpu}: {how}, so the CUDA 12/13 choice cannot be made",
                             "run nvidia-smi, then pip install tensorrt-cu12 (driver r535-r579) or tensorrt-cu13 "
                             "(r580+)")
    if branch < CUDA12_MIN_DRIVER:
        return InstallAdvice(None, f"{gpu}, {how}: every TensorRT 10/11 wheel needs driver r{CUDA12_MIN_DRIVER} or "
                                   f"newer (r{CUDA13_MIN_DRIVER}+ for CUDA 13)",
                             f"update the driver to r{CUDA12_MIN_DRIVER}+ (on Kaggle the driver is fixed: {ON_ORT})")
    caveat = " (assumed Turing or newer: compute capability unknown)" if cc is None else ""
    if cc == (7, 0):
        return InstallAdvice(VOLTA_COMMAND, f"{gpu}, {how}: Volta's last TensorRT is {LAST_TRT_FOR_VOLTA} and CUDA 13 "
                                            f"dropped Volta, so the CUDA 12 wheels up to {LAST_TRT_FOR_VOLTA}")
    if branch >= CUDA13_MIN_DRIVER:
        return InstallAdvice(CUDA13_COMMAND, f"{gpu}, {how}: r{CUDA13_MIN_DRIVER}+ runs the CUDA 13 wheels{caveat}")
    return InstallAdvice(CUDA12_COMMAND, f"{gpu}, {how}: r{CUDA12_MIN_DRIVER}-r{CUDA13_MIN_DRIVER - 1} runs the CUDA 12 "
                                         f"wheels (CUDA 13 needs r{CUDA13_MIN_DRIVER}+){caveat}")


def advice_for(facts: GpuFacts) -> InstallAdvice:
    gpu = facts.gpu
    if gpu is None:
        return install_advice(facts.driver, None, None, cuda_driver=facts.cuda_driver)
    return install_advice(gpu.driver or facts.driver, gpu.compute_capability, gpu.name, cuda_driver=facts.cuda_driver)


def machine_install_advice() -> InstallAdvice:
    """The install command for this machine (driver and GPU read once per process)."""
    return advice_for(gpu_facts())


# Advice already given in full in this process (a notebook kernel, one CLI command): notebook 00's steps each meet
# "no TensorRT", and the same long advice printed five times buries the report. Later mentions point back to it.
_said: set[str] = set()

#: The one key of the TensorRT install advice (its command's reason, or what to do instead): whichever of the
#: report's row, its summary or an "install TensorRT" message runs first says it in full, the others point back.
INSTALL_ADVICE_KEY = "tensorrt install advice"


def say_once(full: str, short: str, key: str | None = None) -> str:
    """`full` the first time this process says `key` (default: `full` itself), `short` (a pointer back to it; may
    be '') after."""
    key = full if key is None else key
    if key in _said:
        return short
    _said.add(key)
    return full


def say_install_advice_once(full: str, short: str) -> str:
    """The TensorRT install advice `full` once per process, from whichever site says it first; `short` after."""
    return say_once(full, short, key=INSTALL_ADVICE_KEY)


def forget_said() -> None:
    """Say every advice in full again (tests; a notebook that wants the advice repeated)."""
    _said.clear()


def install_hint() -> str:
    """The clause every "install TensorRT" message ends with: this machine's command, or what to do instead (long:
    in full once per process, then "follow the TensorRT install advice above")."""
    advice = machine_install_advice()
    return advice.command or say_install_advice_once(advice.hint(), "follow the TensorRT install advice above")


def cuda_wheel_suffix() -> str:
    """``cu13`` when this machine takes the CUDA 13 wheels, else ``cu12``."""
    return "cu13" if machine_install_advice().command == CUDA13_COMMAND else "cu12"


def bindings_command(version: str | None, tree: str = "") -> str:
    """The online fallback for a TensorRT tree without a bindings wheel: the PyPI package of its release, for the
    CUDA major its folder name says (``TensorRT-10.x…cuda-12.x``), else this machine's."""
    cuda = re.search(r"cuda-?(\d+)", tree, re.IGNORECASE)
    suffix = f"cu{cuda.group(1)}" if cuda and cuda.group(1) in ("12", "13") else cuda_wheel_suffix()
    release = ".".join(re.findall(r"\d+", version or "")[:2])
    return f'pip install "tensorrt-{suffix}=={release}.*"' if release else f"pip install tensorrt-{suffix}"
