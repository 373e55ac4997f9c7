"""TensorRT environment: find, repair and load TensorRT libraries; report what this machine can do.

Standard library only (pandas only inside the two table builders for notebooks), importing only trtlab.core, so
it runs from ``setup_kaggle_env.sh`` on a half-installed machine: ``python -m trtlab.env setup``.

* ``layout``     library names, component roles, where things live (workspace, site-packages, system folders)
* ``elf``        a hand-written ELF reader (SONAME, DT_NEEDED, ``tensorrt_version_*`` symbols)
* ``candidates`` what one library folder holds, its problems, and whether its libraries belong to one release
* ``discovery``  every candidate folder on the machine, best first; the notebook's table
* ``repairing``  copies into a writable folder, ``.so.MAJOR``/``.so`` names, env.sh, manifest
* ``wheels``     the bindings wheel: pick, detect, install offline
* ``loading``    dlopen into the running process in dependency order; ``import tensorrt`` check
* ``machine``    GPU / driver (NVML, nvidia-smi, cuda-python), CUDA, cuDNN, ONNX Runtime facts
* ``support``    which TensorRT runs on which GPU; a verdict per feature
* ``install``    the one pip command for this machine's driver and GPU
* ``report``     EnvReport (text, HTML, JSON, DataFrame) and ``collect_report``
* ``cli``        ``python -m trtlab.env ...`` and ``python -m trtlab doctor``
"""
from trtlab.env.candidates import Candidate
from trtlab.env.discovery import best_candidate, candidates_frame, discover
from trtlab.env.install import InstallAdvice, install_advice, machine_install_advice
from trtlab.env.loading import LoadResult, load, preload
from trtlab.env.repairing import RepairResult, repair
from trtlab.env.report import EnvReport, collect_report

__all__ = ["Candidate", "discover", "best_candidate", "candidates_frame", "repair", "RepairResult", "load",
           "preload", "LoadResult", "collect_report", "EnvReport", "InstallAdvice", "install_advice",
           "machine_install_advice"]
