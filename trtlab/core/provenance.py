"""One provenance check: a stored identity (a JSON sidecar, a saved split, a variant record) against the identity
this run expects, refused with the field that differs, both values and the fix.

    check_provenance(stored, expected, what="calibration cache c.cache", fix="delete it or pass reuse_cache=False")
    → error: calibration cache c.cache was made for another algorithm: it has minmax, this run needs entropy — …

Both sides are compared as JSON (tuples are lists, as stored); nested dicts are compared field by field and a
difference is named by its dotted path (`preprocess.crop`). Fields in `lenient` are compared only when both sides
know them (e.g. the TensorRT version of a cache made where TensorRT was absent). Fields the stored side has and
the expected side does not are not part of the expectation and are ignored (older records may carry more).
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from trtlab.core.errors import UserError, UserValueError


class ProvenanceMismatch(UserValueError):
    """A stored artefact was made for something other than what this run needs."""


@dataclass(frozen=True)
class Difference:
    field: str  # dotted path, e.g. 'preprocess.crop'
    stored: object
    expected: object

    def describe(self) -> str:
        return f"{self.field}: it has {short(self.stored)}, this run needs {short(self.expected)}"


def as_json(value):
    """`value` as it reads back from JSON (tuples → lists, keys → str), so stored and expected compare alike."""
    return json.loads(json.dumps(value, default=str))


def differences(stored: dict | None, expected: dict, lenient=()) -> list[Difference]:
    """Every field of `expected` whose stored value differs (nested dicts field by field), in `expected`'s order."""
    found: list[Difference] = []
    _compare(as_json(stored or {}), as_json(expected), "", set(lenient), found)
    return found


def _compare(stored: dict, expected: dict, prefix: str, lenient: set, found: list) -> None:
    for key, want in expected.items():
        path = f"{prefix}{key}"
        have = stored.get(key) if isinstance(stored, dict) else None
        if (key in lenient or path in lenient) and (want is None or have is None):
            continue
        if isinstance(want, dict) and isinstance(have, dict):
            _compare(have, want, f"{path}.", lenient, found)
        elif have != want:
            found.append(Difference(path, have, want))


def check_provenance(stored: dict | None, expected: dict, what: str, fix: str, lenient=(),
                     error: type[UserError] = ProvenanceMismatch) -> None:
    """Raise `error` (a UserError class) naming every differing field with both values, and `fix`, unless the
    stored identity matches `expected`. `what` names the artefact ('calibration cache calib/x.cache')."""
    found = differences(stored, expected, lenient)
    if not found:
        return
    if len(found) == 1:
        only = found[0]
        raise error(f"{what} was made for another {only.field}: it has {short(only.stored)}, this run needs "
                    f"{short(only.expected)}", fix)
    raise error(f"{what} was made for something else: " + "; ".join(d.describe() for d in found), fix)


def short(value) -> str:
    """Hashes cut to 12 characters (readable in one line); other values as they are."""
    text = str(value)
    if len(text) > 16 and all(c in "0123456789abcdef" for c in text):
        return text[:12] + "…"
    return text if len(text) <= 80 else text[:77] + "…"
