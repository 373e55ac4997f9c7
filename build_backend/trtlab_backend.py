"""setuptools' PEP 517 backend, able to build from a read-only source tree.

A Kaggle dataset is mounted read-only under /kaggle/input, and `pip install /kaggle/input/<dataset>` builds in
place (pip >= 21.3 no longer copies the tree), where setuptools writes `build/` and `trtlab.egg-info/` beside
pyproject.toml: "could not create 'build/lib/trtlab': Read-only file system". setuptools has no option for either
location that works from any machine (setup.cfg's build_base/egg_base are relative to the tree or fixed paths), so
when the tree is not writable every hook that writes there runs on a temporary copy of it. Writable trees build in
place, as always.

The hooks that write into the tree (setuptools' build_meta): build_wheel and build_sdist (build/, egg-info),
prepare_metadata_for_build_wheel / _editable, and the three get_requires_for_build_* hooks, which run `egg_info` in
the tree — pip calls get_requires_for_build_wheel whenever it builds in an isolated environment (the default, with
internet): "could not create 'trtlab.egg-info': Read-only file system". build_editable is not wrapped: an editable
install must point at the tree itself, and setuptools builds it in a temporary folder without writing into the tree.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F401,F403  (every hook this module does not wrap)

# Nothing a wheel or an sdist needs lives in these; a checkout used for work may hold gigabytes of them.
_NOT_COPIED = (".git", "build", "dist", "runs", "*.egg-info", ".whl", ".trt-bindings", "__pycache__", ".venv")


def _writable(folder: str) -> bool:
    """Whether files can be created in `folder` (os.access alone answers yes for root on a read-only mount)."""
    try:
        with tempfile.TemporaryFile(dir=folder):
            return True
    except OSError:
        return False


@contextlib.contextmanager
def _writable_tree():
    """The current directory when it is writable; else a temporary copy of it, entered for the duration."""
    source = os.getcwd()
    if _writable(source):
        yield
        return
    with tempfile.TemporaryDirectory(prefix="trtlab-build-") as scratch:
        copy = os.path.join(scratch, os.path.basename(source) or "src")
        shutil.copytree(source, copy, ignore=shutil.ignore_patterns(*_NOT_COPIED), symlinks=True)
        os.chdir(copy)
        try:
            yield
        finally:
            os.chdir(source)


def _absolute(path):
    return None if path is None else os.path.abspath(path)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    wheel_directory, metadata_directory = _absolute(wheel_directory), _absolute(metadata_directory)
    with _writable_tree():
        return _setuptools.build_wheel(wheel_directory, config_settings, metadata_directory)


def build_sdist(sdist_directory, config_settings=None):
    sdist_directory = _absolute(sdist_directory)
    with _writable_tree():
        return _setuptools.build_sdist(sdist_directory, config_settings)


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    metadata_directory = _absolute(metadata_directory)
    with _writable_tree():
        return _setuptools.prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def prepare_metadata_for_build_editable(metadata_directory, config_settings=None):
    metadata_directory = _absolute(metadata_directory)
    with _writable_tree():
        return _setuptools.prepare_metadata_for_build_editable(metadata_directory, config_settings)


def get_requires_for_build_wheel(config_settings=None):
    with _writable_tree():
        return _setuptools.get_requires_for_build_wheel(config_settings)


def get_requires_for_build_sdist(config_settings=None):
    with _writable_tree():
        return _setuptools.get_requires_for_build_sdist(config_settings)


def get_requires_for_build_editable(config_settings=None):
    with _writable_tree():
        return _setuptools.get_requires_for_build_editable(config_settings)
