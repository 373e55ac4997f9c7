"""No import cycles between trtlab's modules (issue 28 item 5): the module graph, read from the source with ast, counts
every import — at module level and inside functions (a lazy import is still a dependency, and two modules that
import each other lazily are one module in two files) — except those under `if TYPE_CHECKING:`."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "trtlab"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, lazy: bool = True):
    """Every Import/ImportFrom node, skipping `if TYPE_CHECKING:` bodies (`lazy=False`: and function bodies)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _type_checking_only(node):
            stack.extend(node.orelse)
            continue
        if not lazy and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def import_graph(lazy: bool = True) -> dict[str, set[str]]:
    """module → the trtlab modules it imports (`from pkg import name` counts pkg.name where that is a module;
    `lazy=False`: only what runs at import time, not imports inside functions)."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in _imports(ast.parse(path.read_text(), str(path)), lazy):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                if node.level:  # relative: resolved against this module's package
                    package = name.split(".") if is_package else name.split(".")[:-1]
                    base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                           for alias in node.names]
            for target in targets:
                while target and target not in modules:  # `import trtlab.a.b.c` where c is a name
                    target = target.rpartition(".")[0]
                if target and target != name and target.startswith("trtlab"):
                    graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index, low, on_stack, stack, found, counter = {}, {}, set(), [], [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def test_the_finder_sees_module_level_function_level_and_relative_imports(tmp_path, monkeypatch):
    package = tmp_path / "trtlab"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "a.py").write_text("from trtlab.sub import b\n")
    (package / "sub" / "b.py").write_text("def f():\n    from . import c\n")
    (package / "sub" / "c.py").write_text("import trtlab.sub.a\nfrom typing import TYPE_CHECKING\n"
                                          "if TYPE_CHECKING:\n    from trtlab.sub import d\n")
    (package / "sub" / "d.py").write_text("from trtlab.sub.c import x\n")
    monkeypatch.setattr(__import__(__name__), "PACKAGE", package)
    graph = import_graph()
    assert graph["trtlab.sub.b"] == {"trtlab.sub.c"} and graph["trtlab.sub.c"] == {"trtlab.sub.a"}
    assert cycles(graph) == [{"trtlab.sub.a", "trtlab.sub.b", "trtlab.sub.c"}]  # d's edge back is TYPE_CHECKING
    assert cycles(import_graph(lazy=False)) == []  # b → c is inside a function


def test_no_module_level_import_cycles():
    assert cycles(import_graph(lazy=False)) == []


def test_no_import_cycles_between_trtlab_modules():
    """None at all, lazy imports included (issue 36 item 9 removed the last two: the GPU op registry and its op
    modules; the argument groups and the dispatcher)."""
    graph = import_graph()
    assert len(graph) > 50 and graph["trtlab.quantization.statistics"]  # it really read the package
    found = [sorted(c) for c in cycles(graph)]
    assert found == [], f"modules that import each other (directly or through others): {found}"


def test_the_gpu_op_table_does_not_import_its_ops_the_package_does():
    graph = import_graph()
    ops = {"trtlab.backends.gpu.ops_nn", "trtlab.backends.gpu.ops_quant", "trtlab.backends.gpu.ops_tensor"}
    assert not graph["trtlab.backends.gpu.registry"] & ops
    assert ops <= graph["trtlab.backends.gpu"]
    for name in ops:  # QuantizeLinear's one-kernel path (qdq_kernel) is a leaf: it imports no trtlab module
        assert graph[name] == {"trtlab.backends.gpu.registry"} | ({"trtlab.backends.gpu.qdq_kernel"}
                                                                  if name.endswith("ops_quant") else set())
    assert graph["trtlab.backends.gpu.qdq_kernel"] == {"trtlab.backends.gpu.qdq_triton"}
    assert graph["trtlab.backends.gpu.qdq_triton"] == set()
    # and the table is full whichever module of the package is imported first (a fresh interpreter each time)
    import subprocess
    import sys

    for first in ("trtlab.backends.gpu.registry", "trtlab.backends.gpu.graph_module"):
        code = (f"import {first}, sys\n"
                "from trtlab.backends.gpu.registry import OPS, builder_for\n"
                "assert builder_for('Conv') and builder_for('QuantizeLinear') and builder_for('Reshape'), len(OPS)\n"
                "assert 'torch' not in sys.modules  # the op modules import torch inside their builders\n")
        subprocess.run([sys.executable, "-c", code], check=True, cwd=PACKAGE.parent)


def test_the_argument_groups_do_not_import_the_dispatcher():
    graph = import_graph()
    assert "trtlab.cli.main" not in graph["trtlab.cli.args"]
    from trtlab.cli.commands import calibrate, eval as eval_command

    assert calibrate.main.__name__ == eval_command.main.__name__ == "main"  # each command's Python entry is kept


def test_the_histogram_sits_below_its_dispatcher():
    graph = import_graph()
    below = ("trtlab.quantization.histogram", "trtlab.quantization.histogram_numba",
             "trtlab.quantization.statistics_ort", "trtlab.quantization.statistics_torch")
    for name in below:
        assert "trtlab.quantization.statistics" not in graph[name], f"{name} imports the dispatcher"
    assert {"trtlab.quantization.statistics_ort", "trtlab.quantization.statistics_torch",
            "trtlab.quantization.histogram"} <= graph["trtlab.quantization.statistics"]


def test_no_import_cycle_between_precision_and_its_rewrite():
    assert not any(c & {"trtlab.graph.precision", "trtlab.graph.precision_rewrite"} for c in cycles(import_graph()))
