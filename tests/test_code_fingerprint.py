"""Issue 36 item 8: reuse that cannot go stale by hand. What made an artefact's graph or statistics — the code of the
modules listed in GRAPH_SOURCES / STATISTICS_SOURCES / SANITIZE_SOURCES — is part of its identity (core.fingerprint),
so an edit to that code is a new key with no revision to bump; results carry the sha256 of the graph that computed
them; the other cache keys are Identities, and what earlier trtlabs stored under their old names is still found."""
from __future__ import annotations

import ast
import compileall
import importlib
import json
import logging
import sys
from pathlib import Path

import pytest

from test_import_cycles import PACKAGE, import_graph
from trtlab.core import fingerprint
from trtlab.core.fingerprint import canonical_source, code_fingerprint
from trtlab.graph.sanitize import SANITIZE_SOURCES
from trtlab.quantization.statistics import STATISTICS_SOURCES
from trtlab.quantization.variants import GRAPH_SOURCES, Recipe

SOURCE = '''"""A module."""
import math


def area(radius: float) -> float:
    """The area."""
    # pi r squared
    return math.pi * radius ** 2 + len("a" "b")
'''
REFORMATTED = '''"""A module, documented anew."""
import math

def area(radius:float)->float:
    return (math.pi*radius**2  # a comment moved here
            + len('ab'))
'''
CHANGED = SOURCE.replace("radius ** 2", "radius ** 3")


def test_comments_docstrings_and_formatting_keep_the_fingerprint_code_changes_it():
    assert canonical_source(SOURCE) == canonical_source(REFORMATTED)
    assert canonical_source(SOURCE) != canonical_source(CHANGED)
    assert canonical_source(SOURCE) != canonical_source(SOURCE.replace("radius", "r"))  # meaning is not guessed
    # empty fields (3.12's type_params=[]) are not written: the text is the same on every Python
    assert "type_params" not in canonical_source(SOURCE) and "lineno" not in canonical_source(SOURCE)


def _package(root: Path, name: str, source: str) -> None:
    (root / name).mkdir(parents=True)
    (root / name / "__init__.py").write_text("")
    (root / name / "shapes.py").write_text(source)


def _fresh(monkeypatch, root: Path, name: str) -> str:
    monkeypatch.syspath_prepend(str(root))
    for module in [m for m in sys.modules if m == name or m.startswith(f"{name}.")]:
        monkeypatch.delitem(sys.modules, module)
    importlib.invalidate_caches()
    fingerprint.module_digest.cache_clear()
    return code_fingerprint([f"{name}.shapes"])


def test_an_installed_module_is_read_as_its_loader_gives_it_and_a_pyc_only_install_by_its_bytecode(tmp_path,
                                                                                                monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    _package(tmp_path / "a", "fp_probe_a", SOURCE)
    _package(tmp_path / "b", "fp_probe_b", REFORMATTED)
    _fresh(monkeypatch, tmp_path / "a", "fp_probe_a")
    _fresh(monkeypatch, tmp_path / "b", "fp_probe_b")
    source_digest = fingerprint.module_digest("fp_probe_a.shapes")
    assert source_digest.startswith("source:") and source_digest == fingerprint.module_digest("fp_probe_b.shapes")
    # an install without sources (compileall -b, the .py removed): its code object, tagged apart from any source
    for name, text in (("fp_probe_c", SOURCE), ("fp_probe_d", CHANGED)):
        _package(tmp_path / name, name, text)
        assert compileall.compile_dir(str(tmp_path / name), legacy=True, quiet=1)
        for py in (tmp_path / name / name).glob("*.py"):
            py.unlink()
    _fresh(monkeypatch, tmp_path / "fp_probe_c", "fp_probe_c")
    _fresh(monkeypatch, tmp_path / "fp_probe_d", "fp_probe_d")
    bytecode = fingerprint.module_digest("fp_probe_c.shapes")
    assert bytecode.startswith("bytecode:") and bytecode != fingerprint.module_digest("fp_probe_d.shapes")
    with pytest.raises(ModuleNotFoundError, match="fp_probe_none"):
        fingerprint.read_module("fp_probe_none.shapes")
    fingerprint.module_digest.cache_clear()


# What the modules of a source list may import without listing it: each is named with why it cannot change the
# graph, the statistics or the sanitized copy. A new import from a listed module fails the test below until the
# module is listed (its code then counts) or named here with its reason.
NOT_DECIDING = {
    "trtlab.core.errors": "error types and their messages",
    "trtlab.core.fingerprint": "computes the fingerprint itself",
    "trtlab.core.identity": "the identity and its key",
    "trtlab.core.workspace": "workspace paths, atomic writes, hashes",
    "trtlab.core.provenance": "refuses a stored artefact made for something else",
    "trtlab.core.progress": "progress bars",
    "trtlab.core.log": "log lines: what is said and how often (report_fp16_range says each count once)",
    "trtlab.graph.classifier": "a model's sha256 and input/output facts (the sha256 is in the identity)",
    "trtlab.backends": "what the machine has (a GPU, TensorRT's version for the cache header): statistics are "
                       "identical on every device (tests/test_counters.py)",
    "trtlab.backends.runner": "the Runner lifecycle template (the torch backend's numerics are its own modules)",
    "trtlab.data.split": "the default calibration size and its error (the images used are in the identity)",
    "trtlab.data.decode_cache": "a thread count; the crops are keyed by the decode cache's own key, in the identity",
    "trtlab.data.photo_types": "which files are photos (decoding: the decode cache's key)",
    "trtlab.data.decode_files": "reads the decode cache's rows, verified against their checksums (the crops are "
                                "keyed by the decode cache's own key, in the identity)",
    "trtlab.quantization.statistics": "the statistics: their own identity, STATISTICS_SOURCES' fingerprint, which "
                                      "an INT8 variant's identity holds too",
}


@pytest.mark.parametrize("name, sources", [("SANITIZE_SOURCES", SANITIZE_SOURCES), ("GRAPH_SOURCES", GRAPH_SOURCES),
                                           ("STATISTICS_SOURCES", STATISTICS_SOURCES)])
def test_every_trtlab_module_a_listed_module_imports_is_listed_or_named_as_not_deciding(name, sources):
    graph = import_graph()
    assert set(sources) <= set(graph), f"{name} lists modules that do not exist"
    unlisted = {f"{module} imports {target}" for module in sources for target in graph[module]
                if target not in sources and target not in NOT_DECIDING}
    assert not unlisted, (f"{sorted(unlisted)}: add the imported module to {name} (its code makes the artefact) or "
                          f"to NOT_DECIDING here, with the reason it cannot change it")
    assert set(SANITIZE_SOURCES) <= set(GRAPH_SOURCES)  # the graph is made from the sanitized copy


def _edited(monkeypatch, module: str, addition: str, reworded: bool = False) -> None:
    """Make the fingerprint see `module` with `addition` appended to its real source (as a developer's edit) and,
    `reworded`, its docstring rewritten."""
    real = fingerprint.read_module

    def read(name):
        if name != module:
            return real(name)
        source = importlib.util.find_spec(name).loader.get_source(name)
        if reworded:
            source = source.replace('"""', '"""Reworded and\n    rewrapped. ', 1)
        return "source", canonical_source(source + addition).encode()

    monkeypatch.setattr(fingerprint, "read_module", read)
    fingerprint.module_digest.cache_clear()


@pytest.fixture
def restored_fingerprints():
    fingerprint.module_digest.cache_clear()
    yield
    fingerprint.module_digest.cache_clear()


def test_an_edit_to_what_makes_a_graph_is_a_new_variant_a_comment_is_not(demo_model, tmp_path, monkeypatch,
                                                                         restored_fingerprints, caplog):
    from trtlab.graph.sanitize import sanitize_model
    from trtlab.quantization.variants import build_variant

    recipe = Recipe(precision="fp16")
    first = build_variant(demo_model, recipe, workspace=tmp_path)
    assert json.loads((first.folder / "variant.json").read_text())["identity"]["code"] == \
        {"graph": code_fingerprint(GRAPH_SOURCES)}
    _edited(monkeypatch, "trtlab.graph.precision_rewrite", "\n\n# a comment\n", reworded=True)
    again = build_variant(demo_model, recipe, workspace=tmp_path)
    assert again.folder == first.folder and again.reused  # no code changed
    _edited(monkeypatch, "trtlab.graph.precision_rewrite", "\nFP16_MARGIN = 2\n")
    edited = build_variant(demo_model, recipe, workspace=tmp_path)
    assert edited.folder != first.folder and not edited.reused  # built anew, the old folder left as it was
    assert (first.folder / "model.onnx").exists()
    # the same code made the same graph: its results (keyed by the graph's sha256) stay valid
    assert edited.identity == first.identity
    # an edit to sanitizing is a new sanitized copy too (not the stale one, whatever its revision says)
    before = sanitize_model(demo_model, tmp_path)
    _edited(monkeypatch, "trtlab.graph.sanitize", "\nMIN_OPSET_NOTE = 1\n")
    assert sanitize_model(demo_model, tmp_path) != before


def test_an_edit_to_what_counts_statistics_is_new_statistics_and_new_int8_variants(demo_model, demo_cache, tmp_path,
                                                                                 monkeypatch, restored_fingerprints):
    from trtlab.graph.sanitize import sanitize_model
    from trtlab.quantization.variants import build_variant, statistics_path

    calibration = demo_cache.valid_indices[:2]
    source = sanitize_model(demo_model, tmp_path)
    recipe = Recipe(algorithm="minmax", calibration_batch=2)
    first = build_variant(demo_model, recipe, demo_cache, calibration, tmp_path, progress=False)
    stats = statistics_path(source, demo_cache, calibration, 2, tmp_path)
    assert stats.exists()
    _edited(monkeypatch, "trtlab.quantization.histogram", "\n# only a comment\n", reworded=True)
    assert statistics_path(source, demo_cache, calibration, 2, tmp_path) == stats
    _edited(monkeypatch, "trtlab.quantization.histogram", "\nGROWTH = 2\n")
    assert statistics_path(source, demo_cache, calibration, 2, tmp_path) != stats
    rebuilt = build_variant(demo_model, recipe, demo_cache, calibration, tmp_path, progress=False)
    assert rebuilt.folder != first.folder and not rebuilt.reused
    assert statistics_path(source, demo_cache, calibration, 2, tmp_path).exists()  # collected again, under the new key


def _rewrite_record(store, label, change) -> None:
    path = store.folder / f"{label}.json"
    record = json.loads(path.read_text())
    change(record)
    path.write_text(json.dumps(record))


def test_results_carry_the_graph_a_stale_graphs_result_is_replaced_an_earlier_stores_is_reused(
        demo_model, demo_cache, tmp_path, caplog):
    from trtlab.core.identity import Identity
    from trtlab.core.workspace import sha256_file
    from trtlab.evaluation.evaluate import evaluate_variant
    from trtlab.evaluation.results import ResultsStore
    from trtlab.quantization.variants import build_variant

    built = build_variant(demo_model, Recipe(precision="fp16"), workspace=tmp_path)
    images = demo_cache.valid_indices[:3]
    first = evaluate_variant(built, demo_cache, images, backend="ort", progress=False, workspace=tmp_path)
    identity = Identity.of(first.record["identity"])
    assert identity.model_sha256 == sha256_file(built.model_path)
    (folder,) = (tmp_path / "results").iterdir()
    store = ResultsStore(folder)
    label = first.variant

    # a store written before the graph's sha256 joined the identity: found under its old key and reused (its record
    # names this very graph), not evaluated again and not stored a second time
    def earlier(record):
        old = Identity.of(record["identity"]).replace(model_sha256=None)
        record["identity"], record["variant_key"] = old.to_dict(), old.key

    _rewrite_record(store, label, earlier)
    caplog.set_level(logging.INFO, logger="trtlab")
    again = evaluate_variant(built, demo_cache, images, backend="ort", progress=True, workspace=tmp_path)
    assert again.variant == label and "reusing stored results" in caplog.text and store.variants() == [label]

    # a result computed from a graph the code no longer makes (another sha256): evaluated again and replaced
    def stale(record):
        old = Identity.of(record["identity"]).replace(model_sha256="0" * 64)
        record["identity"], record["variant_key"], record["model_sha256"] = old.to_dict(), old.key, "0" * 64

    _rewrite_record(store, label, stale)
    caplog.clear()
    fresh = evaluate_variant(built, demo_cache, images, backend="ort", progress=True, workspace=tmp_path)
    assert "reusing stored results" not in caplog.text
    assert fresh.variant == label and store.variants() == [label]
    assert store.record(label)["identity"]["model_sha256"] == sha256_file(built.model_path)


def test_stores_caches_and_splits_named_by_an_earlier_trtlab_are_still_found(demo_data, tmp_path):
    from trtlab.core.identity import Identity
    from trtlab.core.workspace import hash_json
    from trtlab.data.decode_cache import CACHE_FORMAT, cache_folder
    from trtlab.data.preprocess import get_preprocess
    from trtlab.data.split import default_split_path, saved_split
    from trtlab.evaluation.identity import Experiment
    from trtlab.evaluation.results import ResultsStore

    fingerprint_ = demo_data.fingerprint()
    spec = get_preprocess("tf-lite")
    # decode cache: named by its Identity; a folder of the earlier name is used as it is
    new = cache_folder(demo_data, spec, tmp_path)
    assert new.name.endswith(Identity(data={"dataset": fingerprint_}, preprocess=spec.cache_key_fields(),
                                      revision=CACHE_FORMAT).key)
    old = new.with_name(f"{new.name.rsplit('-', 1)[0]}-"
                        f"{hash_json({'format': CACHE_FORMAT, 'dataset': fingerprint_, 'pre': spec.cache_key_fields()})}")
    old.mkdir(parents=True)
    assert cache_folder(demo_data, spec, tmp_path) == old
    # results store: the experiment's Identity names it; a store of the earlier name keeps being used
    experiment = Experiment("a" * 64, "m", demo_data.name, fingerprint_, "b" * 16, 3, spec.to_dict())
    assert ResultsStore.for_experiment(experiment, tmp_path).folder.name.endswith(experiment.key)
    assert experiment.key != experiment.earlier_key
    shutil_move(ResultsStore.for_experiment(experiment, tmp_path).folder, experiment.earlier_key)
    assert ResultsStore.for_experiment(experiment, tmp_path).folder.name.endswith(experiment.earlier_key)
    # split: saved under its Identity's name; one saved under the earlier name is read from there
    path = default_split_path(demo_data, 4, 0, None, tmp_path)
    made = saved_split(demo_data, 4, 0, tmp_path)
    assert path.exists() and path.name.endswith(Identity(data={"dataset": fingerprint_}, options={
        "calibration_images": 4, "seed": 0, "calibration_per_class": None}).digest(12) + ".json")
    earlier = path.with_name(f"{demo_data.name}-{hash_json({'fp': fingerprint_, 'n': 4, 'seed': 0}, 12)}.json")
    path.rename(earlier)
    assert default_split_path(demo_data, 4, 0, None, tmp_path) == earlier
    assert saved_split(demo_data, 4, 0, tmp_path).calibration.tolist() == made.calibration.tolist()
    assert not path.exists()  # read where it was, not made again


def shutil_move(folder: Path, key: str) -> None:
    folder.rename(folder.with_name(f"{folder.name.rsplit('-', 1)[0]}-{key}"))


def test_no_cache_key_is_a_hashed_dict_literal_outside_the_earlier_names():
    """Cache keys are Identities (core.identity): a `hash_json({...})` is left only where an earlier trtlab's name
    is recomputed to find what it stored, and in a dataset's content fingerprint — data, not a key: every stored
    experiment, split and decode cache records it, so it keeps its value."""
    allowed = {("evaluation/identity.py", "earlier_key"), ("data/decode_cache.py", "cache_folder"),
               ("data/dataset.py", "fingerprint")}
    found = []
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for function in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
            for call in [n for n in ast.walk(function) if isinstance(n, ast.Call)]:
                name = getattr(call.func, "id", getattr(call.func, "attr", ""))
                if name == "hash_json" and call.args and isinstance(call.args[0], ast.Dict):
                    where = (path.relative_to(PACKAGE).as_posix(), function.name)
                    if where not in allowed:
                        found.append(where)
    assert not found, f"cache keys hashed from a dict literal (use core.identity.Identity): {found}"
