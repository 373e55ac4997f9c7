"""Fingerprints of trtlab's own code: an artefact made by code (a variant's graph, calibration statistics, a
sanitized model) names in its identity the code that made it, so a change to that code is a new identity and the
artefact is rebuilt — with no revision to remember to bump.

`code_fingerprint(modules)` hashes the modules' syntax trees with docstrings left out: comments, docstrings, blank
lines, line breaks, spacing and quote style change nothing (a reformatted or re-documented module keeps its
fingerprint); every other edit — a renamed variable included, since meaning cannot be told from text — is a new
fingerprint, and the cheap artefacts keyed by it are rebuilt once. The tree is written out by `canonical_tree`
(node type, then its set fields; empty lists and None left out), not `ast.dump`, whose text changes between Python
versions (3.12 added `type_params`, 3.13 leaves empty fields out).

Each module's source is what its import loader gives (`get_source`): the .py files of an editable install, of an
installed wheel or of a zip. Where none is installed (a .pyc-only install), its compiled code object is hashed
instead (marshal), tagged so that a source fingerprint never equals a bytecode one: such an install rebuilds its
artefacts once, and again whenever its Python changes.

A fingerprint is computed once per process, when first asked, from the files as they are then — the code the
process runs, unless a module was edited on disk after it was imported (restart the kernel after editing trtlab).
"""
from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import marshal

FINGERPRINT_LENGTH = 16
_DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def code_fingerprint(modules) -> str:
    """sha256 (first FINGERPRINT_LENGTH hex digits) of the modules' code, named by their dotted names, in the
    order given (sorted by callers that mean a set)."""
    digest = hashlib.sha256()
    for name in modules:
        digest.update(f"{name}\0{module_digest(name)}\0".encode())
    return digest.hexdigest()[:FINGERPRINT_LENGTH]


@functools.lru_cache(maxsize=None)
def module_digest(name: str) -> str:
    """'source:<sha256>' of the module's canonical syntax tree, or 'bytecode:<sha256>' of its compiled code where
    its source is not installed. Memoized for the process (see the module's docstring)."""
    kind, text = read_module(name)
    return f"{kind}:{hashlib.sha256(text).hexdigest()}"


def read_module(name: str) -> tuple[str, bytes]:
    """('source', canonical tree as UTF-8) or ('bytecode', marshalled code object) of the module `name`, found
    the way `import` finds it (its package is imported; the module itself is not)."""
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(f"{name} is not an importable module (code_fingerprint lists it)")
    try:
        source = spec.loader.get_source(name)
    except (ImportError, OSError):
        source = None
    if source is not None:
        return "source", canonical_source(source, spec.origin or name).encode("utf-8")
    code = spec.loader.get_code(name)
    if code is None:
        raise ModuleNotFoundError(f"{name} has neither source nor compiled code (code_fingerprint lists it)")
    return "bytecode", marshal.dumps(code)


def canonical_source(source: str, filename: str = "<source>") -> str:
    """The text a fingerprint hashes: the module's syntax tree without docstrings, written by canonical_tree."""
    tree = ast.parse(source, filename)
    for node in ast.walk(tree):
        if isinstance(node, _DOCUMENTED) and node.body and _is_docstring(node.body[0]):
            node.body = node.body[1:]
    return canonical_tree(tree)


def _is_docstring(statement) -> bool:
    return isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant) and \
        isinstance(statement.value.value, str)


def canonical_tree(node) -> str:
    """A syntax tree as text: each node its type name and the fields that are set (None and empty lists left out,
    so fields a newer Python adds empty — `type_params` — change nothing); positions are attributes, not fields,
    and never written."""
    if isinstance(node, ast.AST):
        fields = []
        for field in node._fields:
            value = getattr(node, field, None)
            if value is None or (isinstance(value, list) and not value):
                continue
            fields.append(f"{field}={canonical_tree(value)}")
        return f"{type(node).__name__}({','.join(fields)})"
    if isinstance(node, list):
        return f"[{','.join(canonical_tree(item) for item in node)}]"
    return repr(node)


__all__ = ["FINGERPRINT_LENGTH", "canonical_source", "canonical_tree", "code_fingerprint", "module_digest",
           "read_module"]
