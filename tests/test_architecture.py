"""The shape of the package: stages import only the stages below them, and the contract has no exceptions left."""
from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _contracts() -> list[dict]:
    with open(REPO / "pyproject.toml", "rb") as fh:
        return tomllib.load(fh)["tool"]["importlinter"]["contracts"]


def test_import_contract_holds():
    code = ("import sys; from importlinter.cli import lint_imports; "
            "sys.exit(lint_imports(config_filename=sys.argv[1], no_cache=True))")
    done = subprocess.run([sys.executable, "-c", code, str(REPO / "pyproject.toml")], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert "Contracts:" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]  # it really ran
    assert done.returncode == 0 and "BROKEN" not in done.stdout, done.stdout[-4000:] + done.stderr[-2000:]


def test_every_stage_package_is_in_the_contract():
    layers = next(c for c in _contracts() if c["type"] == "layers")["layers"]
    named = {name.strip() for layer in layers for name in layer.split("|")}
    packages = {f"trtlab.{p.name}" for p in (REPO / "trtlab").iterdir() if (p / "__init__.py").is_file()}
    assert packages == named, f"packages outside the contract: {packages - named}; stale names: {named - packages}"


def test_the_contract_has_no_exceptions_left():
    exceptions = [rule for c in _contracts() for rule in c.get("ignore_imports", [])]
    assert exceptions == [], f"imports that break the stage order: {exceptions}"
