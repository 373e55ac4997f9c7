"""`tensorrt` is imported only under trtlab/backends/ and trtlab/env/ (issue 28 item 6): every other stage asks
them (e.g. trtlab.backends.installed_tensorrt_version) — an AST scan of every module, imports inside functions
and importlib calls included."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "trtlab"
ALLOWED = ("backends", "env")


def tensorrt_imports(path: Path) -> list[int]:
    """Line numbers where `path` imports tensorrt (import tensorrt[.x], from tensorrt import …,
    importlib.import_module('tensorrt…'), __import__('tensorrt…'))."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""] if node.level == 0 else []
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) and \
                isinstance(node.args[0].value, str) and (
                    getattr(node.func, "attr", None) == "import_module" or getattr(node.func, "id", None) in
                    ("import_module", "__import__")):
            names = [node.args[0].value]
        else:
            continue
        if any(name == "tensorrt" or name.startswith("tensorrt.") for name in names):
            lines.append(node.lineno)
    return sorted(lines)


def test_only_backends_and_env_import_tensorrt():
    found = {str(path.relative_to(PACKAGE.parent)): lines for path in sorted(PACKAGE.rglob("*.py"))
             if (lines := tensorrt_imports(path))}
    assert any(name.startswith("trtlab/backends/") for name in found), "the scan found no import at all"
    outside = {name: lines for name, lines in found.items()
               if name.split("/")[1] not in ALLOWED}
    assert outside == {}, f"tensorrt imported outside backends/ and env/: {outside}"


def test_the_scan_sees_every_spelling(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("import os\ndef f():\n    import tensorrt as trt\nfrom tensorrt import Builder\n"
                      "import importlib\nimportlib.import_module('tensorrt')\n__import__('tensorrt_libs')\n")
    assert tensorrt_imports(source) == [3, 4, 6]
