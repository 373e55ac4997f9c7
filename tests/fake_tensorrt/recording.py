"""Recording what trtlab's TensorRT code really uses, for the real-bindings checks (tests/real_trt_checks.py).

* ``RecordingModule(module, uses)``: stands in for the `tensorrt` module in ``sys.modules``. Every attribute chain
  trtlab reads from it (``trt.BuilderFlag.TF32``, ``trt.ILogger.Severity.ERROR``, ``trt.nptype``) and every call
  it makes through it (``trt.Builder(logger)``, ``trt.ILogger.__init__(self)``) is appended to ``uses`` with the
  path, the arguments and the context (which build path was running). Values are the module's own: classes come
  back as proxies that subclass as the real class (``__mro_entries__``), enum members and functions as they are.
* ``FunctionCoverage(paths)``: which functions of the given source files ran (a ``sys.settrace`` call hook), so a
  check can fail when some TensorRT-facing function was never exercised — a split or a new module cannot silently
  escape the checks, because the list of functions comes from the files themselves.
"""
from __future__ import annotations

import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Use:
    context: str  # the path being driven when the use happened, e.g. "build fp16" or "legacy int8-implicit"
    path: str  # "trt.BuilderFlag.TF32"
    kind: str  # "load" or "call"
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)


class Uses(list):
    """The recorded uses, with the context new ones are filed under."""

    context = "?"


def _wrap(value, path: str, uses: Uses):
    if isinstance(value, type):
        return _ClassProxy(value, path, uses)
    if callable(value) and not hasattr(value, "__members__"):
        return _CallableProxy(value, path, uses)
    return value


class RecordingModule:
    """Attribute reads and calls on the `tensorrt` module, recorded into `uses`; values from `module`."""

    def __init__(self, module, uses: Uses, prefix: str = "trt"):
        object.__setattr__(self, "_target", module)
        object.__setattr__(self, "_uses", uses)
        object.__setattr__(self, "_prefix", prefix)

    def __getattr__(self, name):
        path = f"{self._prefix}.{name}"
        self._uses.append(Use(self._uses.context, path, "load"))
        return _wrap(getattr(self._target, name), path, self._uses)


class _CallableProxy:
    def __init__(self, target, path, uses):
        self._target, self._path, self._uses = target, path, uses

    def __call__(self, *args, **kwargs):
        self._uses.append(Use(self._uses.context, self._path, "call", args, kwargs))
        return self._target(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._target, name)


class _ClassProxy:
    """A class of the module: reads of its attributes and calls (construction, Base.__init__(self)) are recorded;
    `class X(trt.ILogger)` subclasses the class itself."""

    _OWN = frozenset({"_target", "_path", "_uses", "_read", "__mro_entries__", "__instancecheck__", "__call__",
                      "__class__", "__dict__", "__repr__"})

    def __init__(self, target, path, uses):
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_path", path)
        object.__setattr__(self, "_uses", uses)

    def __getattribute__(self, name):
        if name in _ClassProxy._OWN:
            return object.__getattribute__(self, name)
        return object.__getattribute__(self, "_read")(name)  # also dunders: `Base.__init__(self)` is recorded

    def __mro_entries__(self, bases):
        return (self._target,)

    def __instancecheck__(self, obj):
        return isinstance(obj, self._target)

    def __call__(self, *args, **kwargs):
        self._uses.append(Use(self._uses.context, self._path, "call", args, kwargs))
        return self._target(*args, **kwargs)

    def __repr__(self):
        return f"<recording {self._path}>"

    def _read(self, name):
        path = f"{self._path}.{name}"
        self._uses.append(Use(self._uses.context, path, "load"))
        value = getattr(self._target, name)
        if isinstance(value, type):
            return _ClassProxy(value, path, self._uses)
        if callable(value) and name.startswith("__"):  # Base.__init__(self): a call worth checking
            return _CallableProxy(value, path, self._uses)
        return value


# ----------------------------------------------------------------------------------------------------------------
# function coverage
# ----------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Function:
    file: str  # path relative to the repository
    qualname: str
    first_line: int  # first decorator line (what the code object reports)
    def_line: int


def functions_in(path: Path, repo: Path) -> list[Function]:
    """Every function and method defined in `path` (nested ones too), with the lines its code object may report."""
    tree = ast.parse(path.read_text())
    found = []

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([d.lineno for d in child.decorator_list] + [child.lineno])
                found.append(Function(str(path.relative_to(repo)), prefix + child.name, first, child.lineno))
                visit(child, prefix + child.name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return found


class FunctionCoverage:
    """Which functions of `files` were called while it was active (start() … stop())."""

    def __init__(self, files, repo: Path):
        self.repo = Path(repo)
        self.files = {str(Path(f).resolve()): Path(f) for f in files}
        self.called: set = set()  # (resolved filename, co_name, co_firstlineno)
        self._previous = None

    def _trace(self, frame, event, arg):
        if event == "call":
            code = frame.f_code
            if code.co_filename in self.files:
                self.called.add((code.co_filename, code.co_name, code.co_firstlineno))
        return None  # no line events: calls only

    def start(self) -> None:
        self._previous = sys.gettrace()
        sys.settrace(self._trace)

    def stop(self) -> None:
        sys.settrace(self._previous)

    def missed(self) -> list[Function]:
        """Functions of the files that never ran."""
        missing = []
        for resolved, path in self.files.items():
            for function in functions_in(path, self.repo):
                name = function.qualname.rsplit(".", 1)[-1]
                if not any(f == resolved and n == name and function.first_line <= line <= function.def_line
                           for f, n, line in self.called):
                    missing.append(function)
        return missing
