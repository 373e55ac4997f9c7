"""Installs that match the machine: the driver and GPU, read through NVML (nvidia-ml-py), nvidia-smi or
cuda-python, decide the one pip command the report, every hint, requirements-tensorrt.txt and notebook 00 name.
Fake nvidia-smi executables and a fake pynvml module answer as r535 / r570 / r580 drivers on P100 / V100 / T4 / L4.
"""
from __future__ import annotations

import html
import json
import re
import types
from pathlib import Path

import pytest

from trtlab.env import install, machine
from trtlab.env import report as report_mod
from trtlab.env.install import CUDA12_COMMAND, CUDA13_COMMAND, VOLTA_COMMAND

REPO = Path(__file__).resolve().parents[1]
GPUS = {"P100": ("Tesla P100-PCIE-16GB", (6, 0)), "V100": ("Tesla V100-SXM2-16GB", (7, 0)),
        "T4": ("Tesla T4", (7, 5)), "L4": ("NVIDIA L4", (8, 9))}
DRIVERS = {"r535": ("535.104.05", "12.2"), "r570": ("570.86.15", "12.8"), "r580": ("580.65.06", "13.0")}
EXPECTED = {  # (gpu, driver) -> command (None: no TensorRT 10/11 wheel works there)
    **{("P100", d): None for d in DRIVERS},
    **{("V100", d): VOLTA_COMMAND for d in DRIVERS},
    **{(g, d): CUDA12_COMMAND for g in ("T4", "L4") for d in ("r535", "r570")},
    **{(g, "r580"): CUDA13_COMMAND for g in ("T4", "L4")},
}
CASES = sorted(EXPECTED)


@pytest.fixture(autouse=True)
def fresh_facts():
    machine.forget_gpu_facts()
    yield
    machine.forget_gpu_facts()


def fake_nvidia_smi(folder: Path, name: str, cc: tuple[int, int] | None, driver: str, cuda: str) -> Path:
    """An nvidia-smi answering the queries machine.py makes; cc None = an old driver without compute_cap."""
    folder.mkdir(parents=True, exist_ok=True)
    with_cc = (f'  *compute_cap*) echo "{name}, {cc[0]}.{cc[1]}, {driver}" ;;' if cc else
               '  *compute_cap*) echo "Field \\"compute_cap\\" is not a valid field to query." >&2; exit 2 ;;')
    script = "\n".join([
        "#!/bin/sh",
        'case "$*" in',
        with_cc,
        f'  *name,driver_version*) echo "{name}, {driver}" ;;',
        f'  "") echo "| NVIDIA-SMI {driver}    Driver Version: {driver}    CUDA Version: {cuda}     |" ;;',
        '  *) exit 9 ;;',
        "esac",
    ])
    path = folder / "nvidia-smi"
    path.write_text(script + "\n")
    path.chmod(0o755)
    return path


def fake_pynvml(name: str, cc: tuple[int, int], driver: str, cuda: str, *, as_bytes: bool = False,
                init_error: Exception | None = None) -> types.ModuleType:
    """What nvidia-ml-py's pynvml answers (names and driver as str, or bytes as older releases return them)."""
    mod = types.ModuleType("pynvml")
    calls = mod.calls = []
    encode = (lambda s: s.encode()) if as_bytes else (lambda s: s)
    major, minor = (int(x) for x in cuda.split("."))

    def init():
        calls.append("init")
        if init_error:
            raise init_error

    mod.nvmlInit = init
    mod.nvmlShutdown = lambda: calls.append("shutdown")
    mod.nvmlSystemGetDriverVersion = lambda: encode(driver)
    mod.nvmlSystemGetCudaDriverVersion = lambda: major * 1000 + minor * 10
    mod.nvmlDeviceGetCount = lambda: 2
    mod.nvmlDeviceGetHandleByIndex = lambda i: ("handle", i)
    mod.nvmlDeviceGetName = lambda handle: encode(name)
    mod.nvmlDeviceGetCudaComputeCapability = lambda handle: cc
    return mod


def only_nvidia_smi(monkeypatch, tmp_path, gpu: str, driver: str, *, with_cc: bool = True) -> None:
    name, cc = GPUS[gpu]
    version, cuda = DRIVERS[driver] if driver in DRIVERS else (driver, "12.0")
    fake_nvidia_smi(tmp_path / "bin", name, cc if with_cc else None, version, cuda)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    monkeypatch.setitem(__import__("sys").modules, "pynvml", None)   # no NVML: nvidia-smi answers
    monkeypatch.setattr(machine, "cuda_python_runtime", lambda: None)


# ------------------------------------------------------------------------------------------- the decision itself

@pytest.mark.parametrize("gpu,driver", CASES, ids=[f"{g}-{d}" for g, d in CASES])
def test_the_one_command_for_each_driver_and_gpu(gpu, driver):
    name, cc = GPUS[gpu]
    advice = install.install_advice(DRIVERS[driver][0], cc, name)
    assert advice.command == EXPECTED[gpu, driver]
    if gpu == "P100":
        assert "continue on ONNX Runtime" in advice.hint() and "sm_60 (Pascal)" in advice.reason
        assert "8.6" in advice.reason and "sm_70+" in advice.reason
    if gpu == "V100":
        assert "10.4" in advice.reason and "CUDA 13 dropped Volta" in advice.reason
    if advice.command == CUDA12_COMMAND:
        assert "r535-r579 runs the CUDA 12 wheels" in advice.reason and DRIVERS[driver][0] in advice.reason


def test_a_driver_older_than_r535_gets_no_tensorrt_command():
    advice = install.install_advice("525.147.05", (7, 5), "Tesla T4")
    assert advice.command is None
    assert "needs driver r535 or newer" in advice.reason and "update the driver to r535+" in advice.todo
    assert "continue on ONNX Runtime" in advice.todo  # Kaggle's driver is fixed


def test_the_install_advice_is_said_in_full_once_by_whichever_site_runs_first(monkeypatch):
    old_driver = install.install_advice("525.147.05", (7, 5), "Tesla T4")  # no command: the long advice
    monkeypatch.setattr(install, "machine_install_advice", lambda: old_driver)
    assert report_mod._install_row(old_driver, False).detail == old_driver.hint()  # the report's row first
    assert install.install_hint() == "follow the TensorRT install advice above"
    install.forget_said()
    assert install.install_hint() == old_driver.hint()  # an "install TensorRT" message first
    assert report_mod._install_row(old_driver, False).detail == "said above"
    install.forget_said()
    t4 = install.install_advice("570.86.15", (7, 5), "Tesla T4")  # a command: its reason is the long part
    assert report_mod._install_row(t4, True).detail == t4.reason
    assert report_mod._install_row(t4, True).detail == "(why: said above)"
    assert install.say_install_advice_once(t4.line(), "above") == "above"  # one key, whatever text a site shows
    assert install.say_once("other advice", "") == "other advice"  # other texts keep their own key


def test_no_gpu_and_unknown_driver():
    none = install.install_advice(None, None, None)
    assert none.command is None and "no NVIDIA GPU is visible" in none.reason and "T4 or L4" in none.todo
    unknown = install.install_advice(None, (7, 5), "Tesla T4")
    assert unknown.command is None and "tensorrt-cu12 (driver r535-r579) or tensorrt-cu13 (r580+)" in unknown.todo
    # Only the CUDA version known (cuda-python without NVML or nvidia-smi): 13.x means r580+.
    assert install.install_advice(None, (8, 9), "NVIDIA L4", cuda_driver="13.0").command == CUDA13_COMMAND
    cu12 = install.install_advice(None, (8, 9), "NVIDIA L4", cuda_driver="12.8")
    assert cu12.command is None and "r525+" in cu12.reason  # r525-r534 would not run the TensorRT wheels


# ------------------------------------------------------------------------------------ facts from each source

@pytest.mark.parametrize("gpu,driver", CASES, ids=[f"{g}-{d}" for g, d in CASES])
def test_nvidia_smi_answers_decide_the_command(gpu, driver, monkeypatch, tmp_path):
    only_nvidia_smi(monkeypatch, tmp_path, gpu, driver)
    facts = machine.gpu_facts()
    assert facts.source == "nvidia-smi" and facts.gpu.name == GPUS[gpu][0]
    assert facts.gpu.compute_capability == GPUS[gpu][1] and facts.cuda_driver == DRIVERS[driver][1]
    assert any("pynvml" in t for t in facts.tried)
    assert install.machine_install_advice().command == EXPECTED[gpu, driver]


def test_old_nvidia_smi_without_compute_cap_uses_the_name_table(monkeypatch, tmp_path):
    only_nvidia_smi(monkeypatch, tmp_path, "P100", "r535", with_cc=False)
    facts = machine.gpu_facts()
    assert facts.gpu.compute_capability == (6, 0) and facts.gpu.source == "nvidia-smi + name table"
    assert install.machine_install_advice().command is None


@pytest.mark.parametrize("gpu,driver", CASES, ids=[f"{g}-{d}" for g, d in CASES])
def test_nvml_answers_first(gpu, driver, monkeypatch, tmp_path):
    name, cc = GPUS[gpu]
    version, cuda = DRIVERS[driver]
    nvml = fake_pynvml(name, cc, version, cuda, as_bytes=(gpu == "T4"))
    monkeypatch.setitem(__import__("sys").modules, "pynvml", nvml)
    # An nvidia-smi that would say something else: NVML is asked first and wins.
    fake_nvidia_smi(tmp_path / "bin", "Tesla P100-PCIE-16GB", (6, 0), "470.57.02", "11.4")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    facts = machine.gpu_facts()
    assert facts.source == "NVML" and len(facts.gpus) == 2 and facts.gpu.name == name
    assert facts.gpu.compute_capability == cc and facts.driver == version and facts.cuda_driver == cuda
    assert nvml.calls == ["init", "shutdown"]
    assert install.machine_install_advice().command == EXPECTED[gpu, driver]


def test_nvml_that_cannot_start_falls_back_to_nvidia_smi(monkeypatch, tmp_path):
    nvml = fake_pynvml("NVIDIA L4", (8, 9), "580.65.06", "13.0", init_error=RuntimeError("Driver Not Loaded"))
    only_nvidia_smi(monkeypatch, tmp_path, "T4", "r570")
    monkeypatch.setitem(__import__("sys").modules, "pynvml", nvml)
    facts = machine.gpu_facts()
    assert facts.source == "nvidia-smi" and facts.gpu.name == "Tesla T4"
    assert any("NVML did not start (RuntimeError: Driver Not Loaded)" in t for t in facts.tried)


# ------------------------------------------------------------------------------------------------- the report

def _no_gpu(monkeypatch):
    for source in ("from_nvml", "from_nvidia_smi", "from_cuda_python"):
        monkeypatch.setattr(machine, source, lambda s=source: f"{s}: nothing here")


def test_report_names_the_command_in_its_table_summary_and_json(monkeypatch, tmp_path):
    only_nvidia_smi(monkeypatch, tmp_path, "T4", "r570")
    report = report_mod.collect_report(candidates=[], roots=[], probe_import=False)
    row = report.row("TensorRT install")
    assert row.value == CUDA12_COMMAND and "driver 570.86.15" in row.detail
    assert f"install: {CUDA12_COMMAND}" in report.summary(color=False)
    assert CUDA12_COMMAND in report.trt_line  # "no real libnvinfer … or <the command>"
    assert report.to_dict()["install"]["command"] == CUDA12_COMMAND
    assert json.loads(json.dumps(report.to_dict()))["install"]["command"] == CUDA12_COMMAND


def test_cuda_runtime_without_a_gpu_is_not_ok(monkeypatch):
    _no_gpu(monkeypatch)
    monkeypatch.setattr(machine, "cuda_runtime_version", lambda: ("13.0", "pip nvidia-cuda-runtime"))
    report = report_mod.collect_report(candidates=[], roots=[], probe_import=False)
    row = report.row("CUDA runtime")
    assert row.value == "13.0" and row.status == "info" and "no NVIDIA GPU is visible" in row.detail
    assert report.row("GPU").value == "no GPU" and "from_nvml: nothing here" in report.row("GPU").detail
    assert report.row("TensorRT install").value == "none for this machine"


def test_cuda_runtime_newer_than_the_driver_fails_and_names_the_fix(monkeypatch, tmp_path):
    only_nvidia_smi(monkeypatch, tmp_path, "T4", "r570")
    monkeypatch.setattr(machine, "cuda_runtime_version", lambda: ("13.0", "pip nvidia-cuda-runtime"))
    row = report_mod.collect_report(candidates=[], roots=[], probe_import=False).row("CUDA runtime")
    assert row.status == "fail" and "supports CUDA up to 12.8" in row.detail and CUDA12_COMMAND in row.detail


def test_the_table_wraps_long_advice_instead_of_cutting_it(monkeypatch):
    _no_gpu(monkeypatch)
    report = report_mod.collect_report(candidates=[], roots=["/kaggle/input/a-very-long-dataset-name/" + "x" * 60],
                                       probe_import=False)
    report.rows.append(report_mod.ReportRow("TensorRT install", CUDA13_COMMAND, "warn", "driver 580.65.06: " * 12))
    table = report.format_table(width=100)
    flat = " ".join(table.split())
    for row in report.all_rows():
        assert " ".join(row.detail.split()) in flat, row.item   # every word, in order, nothing cut
        assert row.value in table, row.item                     # values whole (commands stay copy-pastable)
    assert f"TensorRT install                    warn  {CUDA13_COMMAND}" in table  # no longer cut at 40 characters
    # Lines stay within the width unless one word is wider than the detail column (a path cannot be split).
    assert all(len(line) <= 100 or len(line.split()[-1]) > 24 for line in table.splitlines())
    page = report._repr_html_()
    for row in report.all_rows():
        assert html.escape(row.detail) in page and "white-space:pre-wrap" in page


# ------------------------------------------------------------------------------- everything says the same thing

def test_requirements_file_is_the_cuda12_command_and_names_the_others():
    text = (REPO / "requirements-tensorrt.txt").read_text()
    requirements = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
    assert requirements == ["tensorrt-cu12", "cuda-python>=12,<13"]
    assert CUDA12_COMMAND == 'pip install tensorrt-cu12 "cuda-python>=12,<13"'
    for command in (CUDA13_COMMAND, CUDA12_COMMAND, VOLTA_COMMAND):
        assert command in text
    assert not re.search(r"^tensorrt\s*(>=|$)", text, re.M)  # bare tensorrt = CUDA 13 wheels: never listed


def test_notebook_00_names_the_same_commands():
    nb = json.loads((REPO / "notebooks" / "00_env_setup.ipynb").read_text())
    text = "\n".join("".join(c["source"]) for c in nb["cells"])
    for command in (CUDA13_COMMAND, CUDA12_COMMAND, VOLTA_COMMAND):
        assert command in text


def test_every_env_hint_goes_through_install_py():
    """No module of trtlab.env spells a TensorRT pip command of its own (they would drift apart again)."""
    spelled = re.compile(r"pip install [^\n]*tensorrt")
    offenders = [f"{p.name}:{i}" for p in sorted((REPO / "trtlab" / "env").glob("*.py")) if p.name != "install.py"
                 for i, line in enumerate(p.read_text().splitlines(), 1) if spelled.search(line)]
    assert offenders == []
