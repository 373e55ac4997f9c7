"""The top-level facade (`trtlab/__init__.py`'s lazy names) is for users: a stage module that reached it
(`import trtlab; trtlab.evaluate(...)`, `from trtlab import compare`) would import whatever stage the name lives in,
above or below, and import-linter's layers contract cannot see it (the root package is no layer). Stage modules
import the stage module directly."""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "trtlab"
# What a stage module may take from the root package: its version and its subpackages, nothing lazy.
ALLOWED_FROM_ROOT = {"__version__"} | {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}


def facade_uses(source: str) -> list[tuple[int, str]]:
    """(line, what) for every way `source` reaches the facade: `import trtlab` (bare, or `as` a name) and
    `from trtlab import X` of anything but the version or a subpackage."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, f"import {a.name}") for a in node.names if a.name == "trtlab"]
        elif isinstance(node, ast.ImportFrom) and node.module == "trtlab" and node.level == 0:
            found += [(node.lineno, f"from trtlab import {a.name}") for a in node.names
                      if a.name not in ALLOWED_FROM_ROOT]
    return sorted(found)


def test_no_stage_module_imports_the_facade():
    offenders = [f"{path.relative_to(REPO)}:{line}: {what}"
                 for path in sorted(PACKAGE.rglob("*.py")) if path.parent != PACKAGE
                 for line, what in facade_uses(path.read_text(encoding="utf-8"))]
    assert offenders == [], "stage modules reaching the facade (import the stage module instead):\n" + \
        "\n".join(offenders)


def test_the_scan_sees_each_way_in():
    # The check above can fail: each spelling of a facade import is found, each allowed one is not.
    source = ("import trtlab\nimport trtlab as t\nfrom trtlab import evaluate, Recipe\n"
              "from trtlab import __version__, data\nfrom trtlab.evaluation.evaluate import evaluate\n"
              "def f():\n    import trtlab\n")
    assert facade_uses(source) == [(1, "import trtlab"), (2, "import trtlab"), (3, "from trtlab import Recipe"),
                                   (3, "from trtlab import evaluate"), (7, "import trtlab")]
    import trtlab

    assert {"evaluate", "Recipe", "compare"} <= set(trtlab._EXPORTS)  # the names the scan protects exist
