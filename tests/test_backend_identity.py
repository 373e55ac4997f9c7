"""The backend in a result's identity (issue 19): results of two literal implementations (ONNX Runtime on the CPU,
the torch backend — on the GPU where torch sees one, else on the CPU: the `torch_label` fixture) are stored side by
side, each reused only by its own backend, never overwritten by the other; tables, significance and dashboards
refuse to compare them unless asked, and then say so; evaluation on the torch backend feeds uint8 crops and skips
ONNX Runtime's self-check; evaluation processes share one store safely, and variants spread over two worker
processes store what one process stores."""
from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from trtlab.core.errors import UserError, UserValueError
from trtlab.data.demo import DEMO_PREPROCESS, demo_split
from trtlab.evaluation.evaluate import _save, evaluate, evaluate_variant
from trtlab.evaluation.identity import MixedBackendError, backend_label, backend_of
from trtlab.evaluation.metrics import consistency_table, variant_table
from trtlab.evaluation.results import ResultsStore, VariantResult, top5_from_logits
from trtlab.evaluation.significance import pairwise_significance

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def two_backends(demo_model, demo_data, demo_cache, tmp_path_factory, torch_label):
    workspace = tmp_path_factory.mktemp("two-backends")
    split = demo_split(demo_data)
    common = dict(indices=split.evaluation, workspace=workspace, progress=False)
    on_ort = evaluate(demo_model, demo_cache, "fp32", backend="ort", **common)
    on_torch = evaluate(demo_model, demo_cache, "fp32", backend="gpu", **common)  # 'gpu': the torch backend
    store = ResultsStore(Path(on_ort.record["experiment"] and next((workspace / "results").iterdir())))
    return workspace, split, store, on_ort, on_torch


def _on_the_device_of(description: dict, torch_label: str) -> bool:
    """Whether a torch run record's device is the one `torch_label` names ('cpu', or 'NVIDIA … (cuda:0, sm_90)')."""
    device = description["device"]
    return device == "cpu" if torch_label == "torch-cpu" else "(cuda:" in device


def test_two_backends_are_stored_side_by_side_and_each_reuses_only_its_own(two_backends, demo_model, demo_cache,
                                                                          torch_label):
    from trtlab.backends import resolve_backend

    workspace, split, store, on_ort, on_torch = two_backends
    # 'auto' follows the machine the same way: never the CPU while torch sees a GPU
    assert resolve_backend(demo_model)[0] == ("torch" if torch_label == "torch-cuda" else "ort")
    assert (on_ort.variant, on_torch.variant) == ("fp32", f"fp32@{torch_label}")
    assert on_ort.record["identity"]["backend"] == "ort-cpu" and on_torch.record["identity"]["backend"] == torch_label
    assert on_ort.record["variant_key"] != on_torch.record["variant_key"]
    assert backend_of(on_torch.record) == torch_label and _on_the_device_of(on_torch.record["backend"], torch_label)
    assert on_torch.record["backend_choice"] == {"requested": "gpu", "resolved": "torch",
                                                 "why": "backend='torch' requested"}
    assert set(store.variants()) == {"fp32", f"fp32@{torch_label}"}
    common = dict(indices=split.evaluation, workspace=workspace, progress=False)
    stamp = (store.folder / "fp32.npz").stat().st_mtime_ns
    again = {name: evaluate(demo_model, demo_cache, "fp32", backend=name, **common) for name in ("ort", "torch")}
    assert again["ort"].variant == "fp32" and again["torch"].variant == f"fp32@{torch_label}"
    assert again["ort"].record["date"] == on_ort.record["date"]  # reused, not re-run
    assert (store.folder / "fp32.npz").stat().st_mtime_ns == stamp
    np.testing.assert_array_equal(again["torch"].logits, on_torch.logits)
    # forcing one backend rewrites its own result only
    forced = evaluate(demo_model, demo_cache, "fp32", backend="torch", force=True, **common)
    assert forced.variant == f"fp32@{torch_label}" and set(store.variants()) == {"fp32", f"fp32@{torch_label}"}
    np.testing.assert_array_equal(store.load("fp32").logits, on_ort.logits)
    # the two implementations agree closely on FP32, yet they are different numbers
    agree = (on_ort.top1 == on_torch.top1).mean()
    assert agree >= 0.95


def test_tables_refuse_mixed_backends_unless_asked_and_then_say_so(two_backends, torch_label):
    _, _, store, _, _ = two_backends
    results = store.load_all()
    for refuse in (lambda: variant_table(results), lambda: consistency_table(results),
                   lambda: pairwise_significance(results, reference="fp32")):
        with pytest.raises(MixedBackendError) as err:
            refuse()
        line = err.value.line()
        assert "\n" not in line and line.startswith("error: refusing to compare 'fp32' (evaluated on ort-cpu) with "
                                                    f"'fp32@{torch_label}' (on {torch_label})")
        assert "allow_mixed_backends=True" in line and "--allow-mixed-backends" in line
    table = variant_table(results, allow_mixed_backends=True)
    assert list(table["backend"]) == ["ort-cpu", torch_label]
    assert table.attrs["backends"] == {"fp32": "ort-cpu", f"fp32@{torch_label}": torch_label}
    assert "Mixed backends" in table.attrs["notes"][0] and f"ort-cpu: fp32; {torch_label}: fp32@{torch_label}" in \
        table.attrs["notes"][0]
    assert len(pairwise_significance(results, reference="fp32", allow_mixed_backends=True)) == 1
    # one backend: no refusal, no note
    single = variant_table({"fp32": results["fp32"]})
    assert "notes" not in single.attrs


def test_dashboard_refuses_mixed_backends_and_notes_them_when_allowed(two_backends, torch_label):
    from trtlab.views.dashboard import build_dashboard

    _, _, store, _, _ = two_backends
    with pytest.raises(MixedBackendError):
        build_dashboard(store)
    dash = build_dashboard(store, allow_mixed_backends=True)
    assert any(note.startswith("Mixed backends") for note in dash.notes)
    only_torch = build_dashboard(store, variants=[f"fp32@{torch_label}"])  # one backend chosen: no refusal
    assert only_torch.reference == f"fp32@{torch_label}"


def test_results_stored_before_the_backend_was_in_the_identity_stay_with_their_backend(demo_model, demo_data,
                                                                                       demo_cache, tmp_path,
                                                                                       torch_label):
    from trtlab.evaluation.identity import variant_key, without_backend

    split = demo_split(demo_data)
    common = dict(indices=split.evaluation, workspace=tmp_path, progress=False)
    first = evaluate(demo_model, demo_cache, "fp32", backend="ort", **common)
    store = ResultsStore(next((tmp_path / "results").iterdir()))
    stamp = (store.folder / "fp32.npz").stat().st_mtime_ns
    record_path = store.folder / "fp32.json"
    record = json.loads(record_path.read_text())  # as trtlab wrote it before issue 19
    record["identity"] = without_backend(record["identity"]).to_dict()
    record["variant_key"] = variant_key(record["identity"])
    record["backend"].pop("identity")
    record_path.write_text(json.dumps(record))
    assert backend_of(record) == "ort-cpu" == backend_label({"backend": "ort", "providers": ["CPUExecutionProvider"]})
    reused = evaluate(demo_model, demo_cache, "fp32", backend="ort", **common)
    assert reused.variant == "fp32" and reused.record["date"] == first.record["date"]
    assert (store.folder / "fp32.npz").stat().st_mtime_ns == stamp  # reused, not re-run
    on_torch = evaluate(demo_model, demo_cache, "fp32", backend="torch", **common)
    assert on_torch.variant == f"fp32@{torch_label}"  # never the ORT result
    forced = evaluate(demo_model, demo_cache, "fp32", backend="ort", force=True, **common)
    assert forced.variant == "fp32" and forced.record["identity"]["backend"] == "ort-cpu"  # replaced, not duplicated
    assert set(store.variants()) == {"fp32", f"fp32@{torch_label}"}


def test_torch_evaluation_feeds_crops_records_numerics_and_skips_the_ort_self_check(demo_model, demo_data,
                                                                                    demo_cache, session_workspace,
                                                                                    tmp_path, monkeypatch,
                                                                                    torch_label):
    from trtlab.backends.gpu.runner import TorchRunner
    from trtlab.quantization.variants import Recipe, build_variant

    split = demo_split(demo_data)
    built = build_variant(demo_model, Recipe(algorithm="entropy"), demo_cache, split.calibration, session_workspace,
                          progress=False)

    def no_float_batches(self, batch):
        raise AssertionError("the torch backend is fed uint8 crops, not float32 batches")

    monkeypatch.setattr(TorchRunner, "infer_impl", no_float_batches)
    self_check = []
    monkeypatch.setattr("trtlab.evaluation.literal_check.ort_qdq_self_check",
                        lambda *a, **k: self_check.append(a) or {})
    result = evaluate_variant(built, demo_cache, split.evaluation, backend="torch", progress=False,
                              workspace=tmp_path)
    assert not self_check and "ort_qdq_check" not in result.record
    backend = result.record["backend"]
    assert backend["backend"] == "torch" and backend["identity"] == torch_label
    assert _on_the_device_of(backend, torch_label)
    assert "scale's type" in backend["quantize_division"] and backend["tf32"] is False
    assert result.record["identity"]["backend"] == torch_label and result.record["calibration"]
    # FP16 range in the run record: the demo's dead weight channels raised, nothing lowered (counted apart)
    assert result.record["fp16_range"]["raised"]["weights"] > 0 and result.record["fp16_range"]["lowered"] == {
        "weights": 0, "activations": 0}


def _result(name: str, key: str) -> VariantResult:
    logits = np.random.default_rng(len(key)).normal(size=(3, 10)).astype(np.float32)
    indices, probs = top5_from_logits(logits)
    return VariantResult(name, ["a", "b", "c"], np.zeros(3, np.int64), indices, probs, logits.astype(np.float16),
                         {"variant_key": key, "identity": {"recipe": {"k": key}}, "backend": {"backend": "hand"}})


def test_concurrent_writers_never_share_a_label(tmp_path):
    store = ResultsStore(tmp_path / "store")
    results = [_result("int8", f"key{k:013d}") for k in range(8)]
    threads = [threading.Thread(target=_save, args=(store, r, r.record["identity"], r.record["variant_key"], "hand",
                                                    None, None)) for r in results]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    labels = store.variants()
    assert len(labels) == 8 and "int8" in labels
    assert {store.record(label)["variant_key"] for label in labels} == {r.record["variant_key"] for r in results}
    # and across processes (flock): two writers, four results each, one label asked for
    script = (
        "import sys, numpy as np\n"
        "sys.path.insert(0, sys.argv[3])\n"
        "from test_backend_identity import _result\n"
        "from trtlab.evaluation.evaluate import _save\n"
        "from trtlab.evaluation.results import ResultsStore\n"
        "store = ResultsStore(sys.argv[1])\n"
        "for k in range(4):\n"
        "    r = _result('fp16', f'{sys.argv[2]}{k:012d}')\n"
        "    _save(store, r, r.record['identity'], r.record['variant_key'], 'hand', None, None)\n")
    tests = str(Path(__file__).parent)
    writers = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "store2"), prefix, tests])
               for prefix in ("p", "q")]
    assert all(w.wait(timeout=300) == 0 for w in writers)
    second = ResultsStore(tmp_path / "store2")
    assert len(second.variants()) == 8 and len({second.record(v)["variant_key"] for v in second.variants()}) == 8


def test_parallel_devices_choice(monkeypatch):
    from trtlab.workflows import parallel

    monkeypatch.setattr(parallel, "visible_gpus", lambda: ["0", "1"])
    assert parallel.parallel_devices("auto", "torch") == ["cuda:0", "cuda:1"]
    assert parallel.parallel_devices("auto", "ort") is None  # ONNX Runtime on the CPU: nothing to spread
    assert parallel.parallel_devices(False, "torch") is None
    monkeypatch.setattr(parallel, "visible_gpus", lambda: ["3"])
    assert parallel.parallel_devices("auto", "torch") is None  # one GPU: in this process
    monkeypatch.setattr(parallel, "visible_gpus", lambda: [])
    assert parallel.parallel_devices(2, "torch") == ["cpu", "cpu"]
    with pytest.raises(UserValueError, match="parallel='many'"):
        parallel.parallel_devices("many", "torch")


def test_two_worker_processes_store_what_one_process_stores(demo_model, demo_data, tmp_path, torch_label):
    from trtlab.quantization.variants import Recipe
    from trtlab.workflows.compare import compare

    split = demo_split(demo_data)
    recipes = [Recipe(algorithm="entropy")]
    runs = {}
    for parallel in (False, 2):
        workspace = tmp_path / f"parallel-{parallel}"
        runs[parallel] = compare(demo_model, demo_data, recipes, DEMO_PREPROCESS, split=split, workspace=workspace,
                                 backend="torch", progress=False, parallel=parallel)
    single, spread = runs[False], runs[2]
    assert list(single.table.index) == list(spread.table.index)
    assert single.table.index[0] == "fp32" and single.table.index[1].startswith("int8-entropy")
    for label in single.table.index:
        a, b = single.store.load(label), spread.store.load(label)
        assert a.record["variant_key"] == b.record["variant_key"] and backend_of(b.record) == torch_label
        np.testing.assert_array_equal(a.logits, b.logits)
        np.testing.assert_array_equal(a.top5_indices, b.top5_indices)
    assert spread.table.raw.equals(single.table.raw)


def test_cli_backend_choices():
    from trtlab.cli.commands import eval as eval_command
    from trtlab.cli.commands.dashboard import COMMAND as dashboard

    parse = eval_command.COMMAND.parse
    assert parse(["--model", "m", "--data", "d", "--backend", "gpu"]).backend == "torch"
    assert parse(["--model", "m", "--data", "d", "--backend", "torch"]).backend == "torch"
    with pytest.raises(UserError, match="'cuda' is not a backend"):
        parse(["--model", "m", "--data", "d", "--backend", "cuda"])
    assert dashboard.parse(["--allow-mixed-backends"]).allow_mixed_backends is True


def test_calibrate_cli_takes_backend_batch_and_parallel():
    from trtlab.cli.commands.calibrate import COMMAND as calibrate

    args = calibrate.parse(["--model", "m", "--data", "d", "--backend", "gpu", "--parallel", "2",
                            "--batch-size", "256"])
    assert (args.backend, args.parallel, args.batch_size) == ("torch", 2, 256)
    default = calibrate.parse(["--model", "m", "--data", "d"])
    assert (default.backend, default.parallel) == ("auto", "auto")
    with pytest.raises(UserError, match="--parallel 'x' is not auto, off or a number of processes"):
        calibrate.parse(["--model", "m", "--data", "d", "--parallel", "x"])
