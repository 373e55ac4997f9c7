"""The real TensorRT bindings' API surface as trtlab's checks read it: pybind signatures from docstrings, which
values convert to a parameter type, deprecation notes, and the check of calls recorded on the fake builder objects.
Used by tests/real_trt_checks.py inside the real-bindings subprocess."""
from __future__ import annotations

import re

import numpy as np


# ----------------------------------------------------------------------------------------------------------------
# pybind signatures and docs
# ----------------------------------------------------------------------------------------------------------------
def signatures(func) -> list[list[tuple[str, str, bool]]]:
    """pybind11 overloads of `func` from its docstring: [[(param, annotation, has_default), ...], ...] without self."""
    doc = getattr(func, "__doc__", None) or ""
    name = getattr(func, "__name__", "")
    found = []
    for match in re.finditer(r"^(?:\d+\. )?%s\((.*)\) -> " % re.escape(name), doc, re.M):
        params = []
        for part in _split_params(match.group(1)):
            pname, _, rest = part.partition(":")
            annotation, _, default = rest.partition(" = ")
            params.append((pname.strip(), annotation.strip(), bool(default)))
        if params and params[0][0] == "self":
            params = params[1:]
        found.append(params)
    return found


def _split_params(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for ch in text:
        if ch in "[(<":
            depth += 1
        elif ch in "])>":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    if current.strip():
        parts.append(current.strip())
    return parts


def fits(params, npos: int, keywords=()) -> bool:
    names = [p[0] for p in params]
    if npos > len(params) or any(k not in names[npos:] for k in keywords):
        return False
    return all(p[2] or i < npos or p[0] in keywords for i, p in enumerate(params))


def deprecated(doc: str) -> bool:
    """A '[DEPRECATED]' note about the thing itself; one in parentheses is about something it mentions (e.g.
    MemoryPoolType.WORKSPACE's doc mentions the deprecated IAlgorithmSelector)."""
    return re.search(r"(?<!\()\[DEPRECATED\]", doc or "") is not None


def enum_member_doc(enum_type, member: str) -> str:
    doc = enum_type.__doc__ or ""
    match = re.search(r"^\s+%s : (.*?)(?=^\s+[A-Z][A-Z0-9_]* : |\Z)" % re.escape(member), doc, re.S | re.M)
    return " ".join(match.group(1).split()) if match else ""


def _resolve(trt, annotation: str):
    path = annotation.split(".")
    if "tensorrt" not in path:
        return None
    obj = trt
    for piece in path[path.index("tensorrt") + 1:]:
        obj = getattr(obj, piece, None)
        if obj is None:
            return None
    return obj


def converts(trt, value, annotation: str) -> bool:
    """Whether `value` (what trtlab passed) is accepted for a pybind parameter typed `annotation`."""
    a = annotation
    if a in ("int", "typing.SupportsInt"):
        return isinstance(value, (int, np.integer)) and not isinstance(value, bool)
    if a == "bool":
        return isinstance(value, bool)
    if a == "str":
        return isinstance(value, str)
    if a in ("tuple", "list"):
        return isinstance(value, {"tuple": tuple, "list": list}[a])
    if a in ("buffer", "typing_extensions.Buffer", "collections.abc.Buffer"):
        try:
            memoryview(value)
            return True
        except TypeError:
            return False
    target = _resolve(trt, a)
    if target is None:
        return True  # a type this check does not model (List[...], object): not judged here
    if target is getattr(trt, "Dims", None):
        return isinstance(value, trt.Dims) or tuple(trt.Dims(tuple(value))) == tuple(value)
    if isinstance(value, target):
        return True
    # a fake builder object stands for the real class of the same name (its surface is checked separately)
    return type(value).__module__ != type(trt).__module__ and type(value).__name__ == target.__name__ \
        and "fake_tensorrt" in type(value).__module__



def _verify_calls(trt, hybrid, problems, name, default_path: bool):
    """Every call trtlab made on the fake builder objects exists on the real class with a fitting signature, and
    its argument values convert to the real parameter types."""
    for entry in hybrid.calls:
        what, args = entry[0], list(entry[1:])
        if what.endswith("="):
            cls_name, attr = what[:-1].split(".")
            prop = getattr(getattr(trt, cls_name, None), attr, None)
            if not (isinstance(prop, property) and prop.fset is not None):
                problems.append(f"{name}: sets {cls_name}.{attr}, not settable in the real bindings")
            if attr == "int8_calibrator" and not isinstance(args[0], trt.IInt8Calibrator):
                problems.append(f"{name}: int8_calibrator is not a real IInt8Calibrator")
            real_enums = type(trt.DataType.FLOAT).__module__
            if attr in ("profiling_verbosity", "precision") and type(args[0]).__module__ != real_enums:
                problems.append(f"{name}: {what} got {args[0]!r}, not a real enum value")
            continue
        if what in ("ILogger.__init__", "IInt8Calibrator.__init__"):
            continue
        cls_name, _, method = what.partition(".")
        cls = getattr(trt, cls_name, None)
        func = getattr(cls, method, None) if method else getattr(cls, "__init__", None)
        if func is None:
            problems.append(f"{name}: {what} does not exist in the real bindings")
            continue
        if what == "ILayer.set_output_type":
            args = args[1:]  # the fake records the layer's name first
        sigs = signatures(func)
        ok = [s for s in sigs if fits(s, len(args))]
        if not ok:
            problems.append(f"{name}: {what} with {len(args)} args; real {[[p[0] for p in s] for s in sigs]}")
        elif not any(all(converts(trt, v, p[1]) for v, p in zip(args, s)) for s in ok):
            problems.append(f"{name}: {what}{tuple(args)!r} does not convert to the real "
                            f"{[[f'{p[0]}: {p[1]}' for p in s] for s in ok]}")
        if deprecated(func.__doc__) and default_path:
            problems.append(f"{name}: calls {what}, deprecated in tensorrt {trt.__version__}")
        for value in args:
            enum_type = type(value)
            if hasattr(enum_type, "__members__") and default_path:
                member = getattr(value, "name", "")
                if deprecated(enum_member_doc(enum_type, member)):
                    problems.append(f"{name}: uses {enum_type.__name__}.{member}, deprecated in "
                                    f"tensorrt {trt.__version__}")
