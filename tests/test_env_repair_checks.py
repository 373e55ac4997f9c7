"""Environment repair refuses what cannot work and writes only where it was told: a library set mixing TensorRT
releases is refused with the mix named (nothing copied, the input intact), and env.sh goes inside ``--dest``,
never over a file trtlab did not write."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from env_trees import (VERSION, build_release, built, broken_input, compile_lib, fingerprint,  # noqa: F401
                       make_read_only, needs_cc, python_env)
from trtlab.env import discovery, machine
from trtlab.env import repairing as repair_mod
from trtlab.env.install import CUDA12_COMMAND


@pytest.fixture(autouse=True)
def t4_on_r570(monkeypatch):
    facts = machine.GpuFacts([machine.GpuInfo("Tesla T4", (7, 5), "570.86.15", "test")], "570.86.15", "12.8", "test")
    monkeypatch.setattr(machine, "from_nvml", lambda: facts)
    machine.forget_gpu_facts()
    yield
    machine.forget_gpu_facts()


@pytest.fixture(scope="module")
def mixed_input(built, tmp_path_factory) -> Path:
    """A read-only tree whose libnvinfer is 11.0.0 (TensorRT 11) but whose parser and plugin are 10.3.0."""
    root = tmp_path_factory.mktemp("mixed-input")
    eleven = build_release(tmp_path_factory.mktemp("trt11"), "11.0.0", "114")
    lib = root / "TensorRT-11.0.0.114" / "lib"
    lib.mkdir(parents=True)
    shutil.copy2(eleven / "libnvinfer.so.11.0.0", lib / "libnvinfer.so.11.0.0")
    shutil.copy2(eleven / "libnvinfer_builder_resource.so.11.0.0", lib / "libnvinfer_builder_resource.so.11.0.0")
    for name in (f"libnvonnxparser.so.{VERSION}", f"libnvinfer_plugin.so.{VERSION}"):
        shutil.copy2(built / name, lib / name)
    make_read_only(root)
    return root


@pytest.fixture(scope="module")
def parser_built_for_another_release(tmp_path_factory) -> Path:
    """Named like 11.0.0 throughout, but the parser requires TensorRT 10.3's version symbol (its DT_NEEDED and
    undefined ``tensorrt_version_10_3_0_26`` reference say which core it was built against)."""
    if shutil.which("gcc") is None and shutil.which("cc") is None:
        pytest.skip("no C compiler")
    root = tmp_path_factory.mktemp("renamed-input")
    lib = build_release(root / "TensorRT-11.0.0.114" / "lib", "11.0.0", "114")
    (lib / "libnvonnxparser.so.11.0.0").unlink()
    compile_lib(lib / "libnvonnxparser.so.11.0.0",
                "extern int tensorrt_version_10_3_0_26;\nint parser_answer(void) { return tensorrt_version_10_3_0_26; }\n",
                "libnvonnxparser.so.11")
    make_read_only(root)
    return root


@needs_cc
def test_repair_refuses_a_mixed_release_set_and_names_the_mix(mixed_input, tmp_path):
    before = fingerprint(mixed_input)
    cands = discovery.discover([mixed_input], pip=False, system=False)
    cand = cands[0]
    assert cand.version == "11.0.0.114" and cand.version_mix and not cand.healthy
    dest = tmp_path / "working" / "lib"
    result = repair_mod.repair(cands, dest)
    assert not result.ok and result.lib_dir is None and result.env_sh is None
    error = result.error
    assert error.startswith("refusing to repair: ") and "\n" not in error
    assert "mixes TensorRT releases: libnvinfer 11.0.0.114 (libnvinfer.so.11.0.0) but" in error
    assert f"libnvonnxparser {VERSION} (libnvonnxparser.so.{VERSION})" in error
    assert f"libnvinfer_plugin {VERSION} (libnvinfer_plugin.so.{VERSION})" in error
    assert "libnvinfer_builder_resource" not in error  # it belongs to the core's release
    assert "from one TensorRT tree (nothing was copied)" in error and CUDA12_COMMAND in error
    assert not dest.exists() and not (tmp_path / "working").exists()   # nothing written anywhere
    assert fingerprint(mixed_input) == before                          # the input is intact
    # The notebook's table and the report say it too.
    frame = discovery.candidates_frame(cands)
    assert "mixed" in set(frame["status"])


@needs_cc
def test_repair_refuses_a_parser_built_against_another_core(parser_built_for_another_release, tmp_path):
    before = fingerprint(parser_built_for_another_release)
    cands = discovery.discover([parser_built_for_another_release], pip=False, system=False)
    result = repair_mod.repair(cands, tmp_path / "lib", bindings=False)
    assert not result.ok
    assert ("libnvonnxparser built against TensorRT 10.3.0.26 (libnvonnxparser.so.11.0.0)" in result.error)
    assert not (tmp_path / "lib").exists() and fingerprint(parser_built_for_another_release) == before


@needs_cc
def test_repair_command_refuses_the_mix_with_one_error_line(mixed_input, tmp_path):
    dest = tmp_path / "lib"
    proc = subprocess.run([sys.executable, "-m", "trtlab.env", "repair", "--root", str(mixed_input), "--dest", str(dest)],
                          capture_output=True, text=True, timeout=120, env=python_env())
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: repair: refusing to repair: ")
    assert "libnvonnxparser 10.3.0" in lines[0] and not dest.exists()


@needs_cc
def test_env_sh_goes_inside_dest_and_leaves_the_parent_alone(broken_input, tmp_path):
    parent = tmp_path / "DIR"
    parent.mkdir()
    users = parent / "env.sh"
    users.write_text("export MY_PROJECT=1\n")
    stamp = os.stat(users).st_mtime_ns
    result = repair_mod.repair(discovery.discover([broken_input], pip=False, system=False), parent / "lib",
                               bindings=False)
    assert result.ok and result.env_sh == str(parent / "lib" / "env.sh") and result.env_note is None
    assert users.read_text() == "export MY_PROJECT=1\n" and os.stat(users).st_mtime_ns == stamp
    assert sorted(os.listdir(parent)) == ["env.sh", "lib"]
    assert f'LD_LIBRARY_PATH="{parent / "lib"}' in Path(result.env_sh).read_text()


@needs_cc
def test_env_sh_never_replaces_a_users_file_inside_dest(broken_input, tmp_path):
    dest = tmp_path / "lib"
    dest.mkdir()
    (dest / "env.sh").write_text("# my own settings\nexport A=1\n")
    (dest / "trtlab-env.sh").symlink_to("env.sh")   # a link is never ours either
    cands = discovery.discover([broken_input], pip=False, system=False)
    first = repair_mod.repair(cands, dest, bindings=False)
    assert first.ok and first.env_sh == str(dest / "trtlab-env-2.sh")
    assert first.env_note == (f"{dest / 'env.sh'} is not trtlab's, so it was left as it is; wrote trtlab-env-2.sh "
                              f"instead")
    assert f"note: {first.env_note}" in first.summary() and f"source {dest / 'trtlab-env-2.sh'}" in first.summary()
    assert (dest / "env.sh").read_text() == "# my own settings\nexport A=1\n"
    assert os.readlink(dest / "trtlab-env.sh") == "env.sh"
    # A re-run finds its own file again: no trtlab-env-3.sh, nothing rewritten.
    stamp = os.stat(dest / "trtlab-env-2.sh").st_mtime_ns
    second = repair_mod.repair(cands, dest, bindings=False)
    assert second.env_sh == first.env_sh and os.stat(second.env_sh).st_mtime_ns == stamp
    assert not (dest / "trtlab-env-3.sh").exists()


@needs_cc
def test_default_repair_writes_env_sh_beside_the_workspace_lib(broken_input, tmp_path, monkeypatch):
    monkeypatch.setenv("TRTLAB_WORKSPACE", str(tmp_path / "ws"))
    result = repair_mod.repair(discovery.discover([broken_input], pip=False, system=False), bindings=False)
    assert result.ok and result.lib_dir == str(tmp_path / "ws" / "lib")
    assert result.env_sh == str(tmp_path / "ws" / "env.sh")  # the documented `source <workspace>/env.sh`
