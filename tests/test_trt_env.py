"""trtlab.env on real tiny shared libraries built with the C compiler, inside deliberately broken trees
(tests/env_trees.py builds them). Nothing here needs a GPU or TensorRT.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from env_trees import PY_TAG, REPO, VERSION, built, broken_input, fingerprint, needs_cc, python_env  # noqa: F401
from trtlab.env import candidates, cli, discovery, elf, loading, machine, support
from trtlab.env import report as report_mod
from trtlab.env import wheels as wheels_mod
from trtlab.env import repairing as repair_mod
from trtlab.env.layout import MANIFEST

REAL_FROM_NVML = machine.from_nvml


@pytest.fixture(autouse=True)
def t4_on_r570(monkeypatch):
    """Every hint names this machine's install command: pretend a T4 under driver 570 (CUDA 12 wheels)."""
    facts = machine.GpuFacts([machine.GpuInfo("Tesla T4", (7, 5), "570.86.15", "test")], "570.86.15", "12.8", "test")
    monkeypatch.setattr(machine, "from_nvml", lambda: facts)
    machine.forget_gpu_facts()
    yield
    machine.forget_gpu_facts()


def _tar_candidate(cands, name="TensorRT-10.3.0.26"):
    return next(c for c in cands if name in c.lib_dir)


# ---------------------------------------------------------------------------------------------------- discovery

@needs_cc
def test_read_elf_finds_soname_needed_and_version_symbol(built):
    core = elf.read_elf(built / f"libnvinfer.so.{VERSION}")
    assert core.soname == "libnvinfer.so.10"
    assert core.version_symbols == ["tensorrt_version_10_3_0_26"]
    parser = elf.read_elf(built / f"libnvonnxparser.so.{VERSION}")
    assert parser.soname == "libnvonnxparser.so.10" and "libnvinfer.so.10" in parser.needed
    assert parser.version_symbols == []
    assert elf.version_from_symbol("tensorrt_version_10_3_0_26") == "10.3.0.26"


@needs_cc
def test_discover_names_every_broken_file(broken_input):
    cands = discovery.discover([broken_input], pip=False, system=False)
    tar = _tar_candidate(cands)
    assert tar.source == "tar" and tar.usable and not tar.healthy
    assert tar.version == "10.3.0.26"  # from the exported symbol, more precise than the file name
    problems = "\n".join(tar.problems)
    assert "libnvinfer.so.10 in" in problems and "is 0 bytes (a broken dataset upload); repair copies libnvinfer.so.10.3.0 instead" in problems
    assert "libnvinfer.so in" in problems and "dangling link to libnvinfer.so.10.3.0.orig" in problems
    assert "libnvinfer_plugin.so.10 in" in problems and "symlink loop" in problems
    assert "libnvonnxparser.so.10 is missing" in problems and "libnvonnxparser.so is missing" in problems
    kinds = {f.name: f.kind for c in tar.components.values() for f in c.files}
    assert kinds["libnvinfer.so.10"] == "zero" and kinds["libnvinfer.so"] == "dangling"
    assert kinds["libnvinfer_plugin.so"] == "loop" and kinds[f"libnvinfer.so.{VERSION}"] == "ok"
    assert set(tar.components) >= {"libnvinfer", "libnvonnxparser", "libnvinfer_plugin", "libnvinfer_builder_resource"}
    assert tar.missing_components() == []
    assert [Path(w).name for w in tar.wheels] == sorted(Path(w).name for w in tar.wheels) and len(tar.wheels) == 2

    bad = next(c for c in cands if "trt-from-git" in c.lib_dir)
    assert not bad.usable
    text = "\n".join(bad.problems)
    assert "Git LFS pointer" in text and "is truncated" in text and "no real libnvinfer found" in text
    assert discovery.best_candidate(cands) is tar


@needs_cc
def test_version_disagreement_between_name_and_symbol_is_reported(built, tmp_path):
    shutil.copy2(built / f"libnvinfer.so.{VERSION}", tmp_path / "libnvinfer.so.10.4.0")
    (tmp_path / "libnvinfer.so.10").symlink_to("libnvinfer.so.10.4.0")
    (tmp_path / "libnvinfer.so").symlink_to("libnvinfer.so.10")
    cand = discovery.discover([tmp_path], pip=False, system=False)[0]
    assert cand.version == "10.3.0.26"
    assert "named 10.4.0 but exports tensorrt_version_10_3_0_26" in cand.version_note


def test_discovery_without_tensorrt_says_so_in_one_line(tmp_path):
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "a.JPEG").write_bytes(b"\xff\xd8")
    cands = discovery.discover([tmp_path], pip=False, system=False)
    assert cands == []
    msg = discovery.no_tensorrt_message(cands, [tmp_path])
    assert "\n" not in msg and "no real libnvinfer found in" in msg and "pip install tensorrt-cu12" in msg


def test_search_budget_is_reported(tmp_path):
    for i in range(30):
        (tmp_path / f"d{i}").mkdir()
    discovery.discover([tmp_path], pip=False, system=False, budget=10)
    assert any("stopped searching" in n and "--root" in n for n in discovery.LAST_SEARCH_NOTES)


@needs_cc
def test_pip_layout_with_trimmed_names_is_healthy_and_left_alone(built, tmp_path, monkeypatch):
    site = tmp_path / "site-packages"
    libs = site / "tensorrt_libs"   # what the tensorrt-cu12_libs wheel installs (libraries --trim-version'd)
    libs.mkdir(parents=True)
    (libs / "__init__.py").write_text("")
    shutil.copy2(built / f"libnvinfer.so.{VERSION}", libs / "libnvinfer.so.10")
    shutil.copy2(built / f"libnvonnxparser.so.{VERSION}", libs / "libnvonnxparser.so.10")
    shutil.copy2(built / f"libnvinfer_builder_resource.so.{VERSION}", libs / f"libnvinfer_builder_resource.so.{VERSION}")
    monkeypatch.setattr(discovery, "site_package_dirs", lambda: [str(site)])
    cands = discovery.discover([], pip=True, system=False)
    assert len(cands) == 1 and cands[0].source == "pip" and cands[0].healthy, cands[0].problems
    assert cands[0].version == "10.3.0.26" and any("libnvinfer.so is missing" in n for n in cands[0].notes)
    result = repair_mod.repair(cands, tmp_path / "ws" / "lib")
    assert result.ok and result.lib_dir == str(libs) and "healthy; nothing copied" in result.summary()
    # Nothing copied; env.sh (pointing at the pip folder) goes inside the folder given, not beside it.
    assert os.listdir(tmp_path / "ws") == ["lib"] and os.listdir(tmp_path / "ws" / "lib") == ["env.sh"]
    assert result.env_sh == str(tmp_path / "ws" / "lib" / "env.sh") and str(libs) in Path(result.env_sh).read_text()


# ------------------------------------------------------------------------------------------------------- repair

@needs_cc
def test_repair_copies_real_files_and_never_writes_the_input(broken_input, tmp_path):
    before = fingerprint(broken_input)
    cands = discovery.discover([broken_input], pip=False, system=False)
    dest = tmp_path / "working" / "trtlab" / "lib"
    result = repair_mod.repair(cands, dest, bindings_target=str(tmp_path / "pylib"))
    assert result.ok, result.error
    assert fingerprint(broken_input) == before  # byte for byte, links, modes, mtimes, listings

    expected = {f"libnvinfer.so.{VERSION}", "libnvinfer.so.10", "libnvinfer.so",
                f"libnvonnxparser.so.{VERSION}", "libnvonnxparser.so.10", "libnvonnxparser.so",
                f"libnvinfer_plugin.so.{VERSION}", "libnvinfer_plugin.so.10", "libnvinfer_plugin.so",
                f"libnvinfer_builder_resource.so.{VERSION}"}
    names = set(os.listdir(dest))
    assert names == expected | {MANIFEST, "env.sh"}  # no temp files left behind
    for name in expected:
        p = dest / name
        assert not p.is_symlink() and p.stat().st_size > 0, name
    core = (broken_input / "tensorrt-tar" / "TensorRT-10.3.0.26" / "lib" / f"libnvinfer.so.{VERSION}").read_bytes()
    assert (dest / "libnvinfer.so.10").read_bytes() == core
    assert any("0 bytes" in p for p in result.fixed)

    env_sh = Path(result.env_sh)
    assert env_sh == dest / "env.sh"  # inside the folder given, never beside it
    assert f'export LD_LIBRARY_PATH="{dest}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"' in env_sh.read_text()
    assert f"installed tensorrt-{VERSION}-{PY_TAG}" in result.bindings
    assert (tmp_path / "pylib" / "tensorrt" / "__init__.py").exists()
    assert str(tmp_path / "pylib") in env_sh.read_text()  # PYTHONPATH for a --target install


@needs_cc
def test_repair_is_idempotent_and_removes_only_its_own_stale_files(broken_input, tmp_path):
    cands = discovery.discover([broken_input], pip=False, system=False)
    dest = tmp_path / "lib"
    first = repair_mod.repair(cands, dest, bindings=False)
    stamps = {n: (os.stat(dest / n).st_ino, os.stat(dest / n).st_mtime_ns) for n in os.listdir(dest) if n != MANIFEST}
    second = repair_mod.repair(cands, dest, bindings=False)
    assert first.ok and second.ok
    assert {a for _, a in second.actions} == {"unchanged"}
    assert {n: (os.stat(dest / n).st_ino, os.stat(dest / n).st_mtime_ns) for n in stamps} == stamps

    # A file the user put there survives; a file an earlier repair wrote for another version goes.
    (dest / "notes.txt").write_text("mine")
    manifest = json.loads((dest / MANIFEST).read_text())
    manifest["files"].append("libnvinfer.so.10.2.0")
    (dest / "libnvinfer.so.10.2.0").write_bytes(b"old")
    (dest / MANIFEST).write_text(json.dumps(manifest))
    third = repair_mod.repair(cands, dest, bindings=False)
    assert ("libnvinfer.so.10.2.0", "removed") in third.actions
    assert (dest / "notes.txt").exists() and not (dest / "libnvinfer.so.10.2.0").exists()


@needs_cc
def test_repair_refuses_a_destination_inside_the_input(broken_input):
    cands = discovery.discover([broken_input], pip=False, system=False)
    tar = _tar_candidate(cands)
    result = repair_mod.repair(tar, Path(tar.lib_dir) / "fixed", bindings=False)
    assert not result.ok and "must stay untouched" in result.error and "/kaggle/working" in result.error


def test_repair_without_tensorrt_explains_what_to_do():
    result = repair_mod.repair([], "/nonexistent/should-not-be-created")
    assert not result.ok and "pip install tensorrt-cu12" in result.error
    assert not os.path.exists("/nonexistent/should-not-be-created")


# --------------------------------------------------------------------------------------------------------- load

_LOAD_SCRIPT = r"""
import ctypes, json, sys
from trtlab.env import loading
lib_dir, mode = sys.argv[1], sys.argv[2]
out = {}
if mode == "control":   # without the preload the dependent library cannot find libnvinfer.so.10
    try:
        ctypes.CDLL(lib_dir + "/libnvonnxparser.so.10"); out["control"] = "loaded"
    except OSError as exc:
        out["control"] = str(exc)
else:
    res = loading.preload(lib_dir)
    out["order"] = [name for name, _ in res.loaded]
    out["failed"] = res.failed
    # Bare names: resolved to the preloaded copies by SONAME / file name, not by any search path.
    out["parser"] = ctypes.CDLL("libnvonnxparser.so.10").parser_answer()
    out["plugin"] = ctypes.CDLL("libnvinfer_plugin.so.10").plugin_answer()
    out["builder"] = ctypes.c_int.in_dll(ctypes.CDLL("libnvinfer_builder_resource.so.10.3.0"), "builder_resource_marker").value
print(json.dumps(out))
"""


def _run_load_script(lib_dir: Path, mode: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", _LOAD_SCRIPT, str(lib_dir), mode],
                          capture_output=True, text=True, env=python_env(), timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@needs_cc
def test_repaired_libraries_dlopen_in_dependency_order_in_a_fresh_process(broken_input, tmp_path):
    dest = tmp_path / "lib"
    assert repair_mod.repair(discovery.discover([broken_input], pip=False, system=False), dest, bindings=False).ok
    control = _run_load_script(dest, "control")
    assert "libnvinfer.so.10" in control["control"]  # the loader cannot find it on its own: the preload matters
    out = _run_load_script(dest, "preload")
    assert out["failed"] == []
    order = out["order"]
    assert order.index("libnvinfer.so.10") < order.index("libnvonnxparser.so.10")
    assert order.index("libnvinfer.so.10") < order.index("libnvinfer_plugin.so.10")
    assert out["parser"] == 43 and out["plugin"] == 44 and out["builder"] == 7


@needs_cc
def test_env_sh_lets_a_new_process_find_the_libraries(broken_input, tmp_path):
    dest = tmp_path / "lib"
    result = repair_mod.repair(discovery.discover([broken_input], pip=False, system=False), dest, bindings=False)
    code = "import ctypes; print(ctypes.CDLL('libnvonnxparser.so.10').parser_answer())"
    proc = subprocess.run(["bash", "-c", f'unset LD_LIBRARY_PATH; source "{result.env_sh}" && "{sys.executable}" -c "{code}"'],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "43", proc.stderr


def test_dependency_order_follows_dt_needed_over_the_default_order():
    def lib(name, soname, needed):
        return candidates.LibFile(path=f"/x/{name}", name=name, stem=name.split(".so")[0], file_version="10",
                               kind="ok", soname=soname, needed=needed)

    core = lib("libnvinfer.so.10", "libnvinfer.so.10", ["libnvinfer_lean.so.10"])  # artificial: core needs lean
    lean = lib("libnvinfer_lean.so.10", "libnvinfer_lean.so.10", [])
    parser = lib("libnvonnxparser.so.10", "libnvonnxparser.so.10", ["libnvinfer.so.10"])
    assert [f.name for f in loading.dependency_order([parser, core, lean])] == [
        "libnvinfer_lean.so.10", "libnvinfer.so.10", "libnvonnxparser.so.10"]


def test_load_explains_a_missing_cuda_dependency():
    lib = candidates.LibFile(path="/x/libnvinfer.so.10", name="libnvinfer.so.10", stem="libnvinfer",
                          file_version="10", kind="ok")
    msg = loading.explain_load_error(lib, "libcudart.so.12: cannot open shared object file: No such file or directory")
    assert "libnvinfer.so.10 needs libcudart.so.12" in msg and "pip install nvidia-cuda-runtime-cu12" in msg


# ------------------------------------------------------------------------------------------------------- wheels

def test_versions_with_pip_tails_read_as_their_release():
    from trtlab.env.layout import version_tuple

    assert version_tuple("10.14.1.48.post1") == (10, 14, 1, 48) and version_tuple("13.0.48rc1") == (13, 0, 48)
    assert version_tuple("10") == (10,) and version_tuple(None) == () and version_tuple("") == ()


def test_pick_wheel_matches_python_and_version():
    wheels = ["/t/python/tensorrt-10.3.0-cp36-none-linux_x86_64.whl",
              f"/t/python/tensorrt_lean-10.3.0-{PY_TAG}-none-linux_x86_64.whl",
              f"/t/python/tensorrt-10.2.0-{PY_TAG}-none-linux_x86_64.whl",
              f"/t/python/tensorrt-10.3.0-{PY_TAG}-none-linux_x86_64.whl"]
    assert wheels_mod.pick_wheel(wheels, "10.3.0.26") == wheels[3]
    assert wheels_mod.pick_wheel(wheels, "10.4.0") is None
    assert wheels_mod.pick_wheel(wheels[:2], "10.3.0") is None


# ------------------------------------------------------------------------------------------------------- report

def test_feature_verdicts_follow_the_support_matrix():
    t4 = support.feature_verdicts("10.3.0", (7, 5))
    assert [f.tensorrt for f in t4] == ["yes", "yes", "yes"]
    p100 = support.feature_verdicts("10.3.0", (6, 0), ort_providers=["CPUExecutionProvider"])
    assert all(f.tensorrt == "no" for f in p100)
    assert "compute capability 7.0" in p100[0].reason and "sm_60 (Pascal)" in p100[0].reason
    assert "ONNX Runtime CPU" in p100[1].onnxruntime
    assert support.feature_verdicts("10.4.0", (7, 0))[0].tensorrt == "yes"
    v100 = support.feature_verdicts("10.5.0", (7, 0))
    assert v100[0].tensorrt == "no" and "Volta" in v100[0].reason
    trt11 = {f.feature: f for f in support.feature_verdicts("11.0.0", (7, 5))}
    assert trt11["INT8 implicit calibrators"].tensorrt == "no" and "removed" in trt11["INT8 implicit calibrators"].reason
    assert trt11["INT8 explicit (Q/DQ)"].tensorrt == "yes" and "no BuilderFlag.FP16" in trt11["FP16"].reason
    assert support.feature_verdicts("10.7.0", (12, 0))[0].tensorrt == "no"
    assert "assumed" in support.feature_verdicts("12.0.0", (8, 0))[0].reason
    assert "only the major version" in support.feature_verdicts("10", (7, 5))[0].reason
    none = support.feature_verdicts(None, None)
    assert {f.reason for f in none} == {"no TensorRT found"}
    assert support.feature_verdicts("10.3.0", None, gpu=False)[0].reason.startswith("no NVIDIA GPU")


def test_parse_nvidia_smi_query():
    gpus = machine.parse_nvidia_smi_query("Tesla T4, 7.5, 535.104.05\nTesla T4, 7.5, 535.104.05\n")
    assert len(gpus) == 2 and gpus[0].name == "Tesla T4" and gpus[0].compute_capability == (7, 5)
    assert gpus[0].driver == "535.104.05"
    assert machine.cc_from_name("Tesla P100-PCIE-16GB") == (6, 0)
    assert machine.arch_name((6, 0)) == "sm_60 (Pascal)" and machine.arch_name((7, 5)) == "sm_75 (Turing)"


def _fake_pynvml(calls: list, *, fail_init: bool = False):
    """What nvidia-ml-py's pynvml answers on a 2×T4 machine (older releases return bytes for names)."""
    import types

    def init():
        calls.append("init")
        if fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    return types.SimpleNamespace(
        nvmlInit=init, nvmlShutdown=lambda: calls.append("shutdown"),
        nvmlSystemGetDriverVersion=lambda: b"570.86.15", nvmlSystemGetCudaDriverVersion=lambda: 12080,
        nvmlDeviceGetCount=lambda: 2, nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetName=lambda h: b"Tesla T4", nvmlDeviceGetCudaComputeCapability=lambda h: (7, 5))


def test_gpu_facts_come_from_nvml_first_then_nvidia_smi(monkeypatch):
    calls: list = []
    monkeypatch.setattr(machine, "from_nvml", REAL_FROM_NVML)  # the real reader, over the fake module
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(calls))
    monkeypatch.setattr(machine, "from_nvidia_smi", lambda: pytest.fail("nvidia-smi asked although NVML answered"))
    machine.forget_gpu_facts()
    try:
        facts = machine.gpu_facts()
        assert facts.source == "NVML" and [g.name for g in facts.gpus] == ["Tesla T4", "Tesla T4"]
        assert facts.gpu.compute_capability == (7, 5) and facts.driver == "570.86.15" and facts.cuda_driver == "12.8"
        assert calls == ["init", "shutdown"] and machine.gpu_facts() is facts  # read once per process
        # NVML present but unable to start (no driver library): the next source answers, and the report says why.
        calls.clear()
        monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(calls, fail_init=True))
        smi = machine.GpuFacts([machine.GpuInfo("Tesla T4", (7, 5), "570.86.15", "nvidia-smi")], "570.86.15",
                               "12.8", "nvidia-smi")
        monkeypatch.setattr(machine, "from_nvidia_smi", lambda: smi)
        machine.forget_gpu_facts()
        facts = machine.gpu_facts()
        assert facts.source == "nvidia-smi" and calls == ["init"]  # nothing to shut down
        assert facts.tried == ["NVML did not start (RuntimeError: NVML Shared Library Not Found)"]
        # Not installed at all: the usual case, named as such.
        monkeypatch.setitem(sys.modules, "pynvml", None)
        assert machine.from_nvml() == "nvidia-ml-py (pynvml) not installed"
    finally:
        machine.forget_gpu_facts()


def test_report_without_tensorrt_says_so_in_one_line_and_falls_back_to_onnxruntime():
    report = report_mod.collect_report(candidates=[], roots=[])
    assert not report.trt_ready and report.ort_ready
    assert "\n" not in report.trt_line and "no real libnvinfer found" in report.trt_line
    summary = report.summary(color=False)
    assert "🔴 RED" in summary and "🟢 GREEN  the workbench runs on ONNX Runtime" in summary
    frame = report.to_frame()
    assert list(frame.columns) == ["item", "value", "status", "detail"]
    assert "CPUExecutionProvider" in frame.set_index("item").loc["onnxruntime", "detail"]
    assert "feature: INT8 implicit calibrators" in set(frame["item"])


def test_doctor_main_prints_json(capsys):
    assert cli.doctor_main(["--json", "--root", "/nonexistent-root"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert isinstance(data["tensorrt_ready"], bool) and data["onnxruntime_ready"] is True
    assert "\n" not in data["tensorrt"]
    assert {r["item"] for r in data["rows"]} >= {"GPU", "CUDA runtime", "cuDNN", "TensorRT library",
                                                 "TensorRT bindings", "onnxruntime"}


# ------------------------------------------------------------------------------------------ shell + notebook

@needs_cc
def test_setup_script_repairs_from_a_shell(broken_input, tmp_path):
    before = fingerprint(broken_input)
    dest = tmp_path / "lib"
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    proc = subprocess.run(["bash", str(REPO / "setup_kaggle_env.sh"), "--root", str(broken_input), "--dest", str(dest),
                           "--no-bindings"], capture_output=True, text=True, timeout=120, env=env,
                          cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"source {dest / 'env.sh'}" in proc.stdout and not (tmp_path / "env.sh").exists()
    assert "check in a fresh Python (no LD_LIBRARY_PATH): loaded libnvinfer.so.10" in proc.stdout
    assert (dest / "libnvonnxparser.so.10").is_file() and fingerprint(broken_input) == before


def test_environment_notebook_runs_headless(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    path = REPO / "notebooks" / "00_env_setup.ipynb"
    nb = nbformat.read(path, as_version=4)
    assert all(c.get("execution_count") is None and not c.get("outputs") for c in nb.cells if c.cell_type == "code")
    monkeypatch.setenv("TRTLAB_WORKSPACE", str(tmp_path / "ws"))
    nbclient.NotebookClient(nb, timeout=60, kernel_name="python3",  # cwd = repo root, as tests/test_notebooks.py
                            resources={"metadata": {"path": str(REPO)}}).execute()
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert not [o for c in code for o in c.outputs if o.output_type == "error"]
    last = "".join(o.get("text", "") for o in code[-1].outputs)
    assert "🔴 RED" in last or "🟢 GREEN" in last
    # The report shows as a table whose cells are whole (the install row included), not a cut-off DataFrame.
    shown = next(o for c in code for o in c.outputs if "report = trtlab.environment_report" in c.source
                 and o.output_type == "execute_result")
    page = shown["data"]["text/html"]
    assert "TensorRT install" in page and "white-space:pre-wrap" in page and "..." not in page
    # It ends by saying what to open next.
    assert nb.cells[-1].cell_type == "markdown" and "00_quickstart" in nb.cells[-1].source
    assert nb.cells[-1].source.index("00_quickstart") < nb.cells[-1].source.index("01_imagenet_prep")


def test_environment_notebook_calls_only_top_level_names():
    import trtlab

    nb = json.loads((REPO / "notebooks" / "00_env_setup.ipynb").read_text())
    code = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    assert "import trtlab" in code and not re.search(r"from trtlab|import trtlab\.|trtlab\.\w+\.", code)
    names = set(re.findall(r"trtlab\.(\w+)", code))
    assert names and names <= set(trtlab._EXPORTS), names - set(trtlab._EXPORTS)
