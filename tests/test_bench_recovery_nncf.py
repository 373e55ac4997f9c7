"""bench/bench_recovery_nncf.py's helpers that need no nncf (nncf is no trtlab dependency and not in CI): the
one-line error and exit 2 of `bench_recovery.py --nncf` without it, the Q/DQ type count that says how far NNCF's
graph is from TensorRT-legal, and the names its graphs are stored under."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


@pytest.fixture()
def nncf_bench(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    import bench_recovery_nncf

    return bench_recovery_nncf


def test_without_nncf_the_bench_says_so_in_one_line_and_exits_2(nncf_bench, monkeypatch, capsys):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "nncf" else real(name, *a))
    import bench_recovery

    assert bench_recovery.main(["--nncf"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("error: ") and " — " in err
    assert "pip install nncf==3.4.0" in err and "venv" in err


def test_qdq_types_counts_uint8_and_per_channel_activation_quantizes(nncf_bench):
    from onnx import TensorProto, helper, numpy_helper

    def init(name, array):
        return numpy_helper.from_array(np.asarray(array), name)

    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s_act", "z_u8"], ["xq"], name="q_act_u8"),
        helper.make_node("DequantizeLinear", ["xq", "s_act", "z_u8"], ["xd"], name="dq_act_u8"),
        helper.make_node("QuantizeLinear", ["xd", "s_chan", "z_i8c"], ["yq"], name="q_act_chan", axis=1),
        helper.make_node("DequantizeLinear", ["yq", "s_chan", "z_i8c"], ["yd"], name="dq_act_chan", axis=1),
        helper.make_node("DequantizeLinear", ["w", "s_chan", "z_i8c"], ["wd"], name="dq_w", axis=0),
        helper.make_node("Conv", ["yd", "wd"], ["out"], name="conv"),
    ]
    initializers = [init("s_act", np.float32(0.1)), init("z_u8", np.uint8(0)),
                    init("s_chan", np.full(2, 0.1, np.float32)), init("z_i8c", np.zeros(2, np.int8)),
                    init("w", np.ones((2, 2, 1, 1), np.int8))]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], initializers)
    counts = nncf_bench.qdq_types(helper.make_model(graph))
    assert counts == {"Quantize UINT8": 1, "Dequantize UINT8": 1, "Quantize INT8": 1, "Dequantize INT8": 2,
                      "Quantize per-channel activation": 1}


def test_slug_names_a_setting_for_files_and_the_results_store(nncf_bench):
    assert nncf_bench.slug("NNCF defaults (fast bias correction)") == "nncf-defaults-fast-bias-correction"
    assert nncf_bench.slug("NNCF, bias correction off") == "nncf-bias-correction-off"


def test_nncf_stays_out_of_trtlab_dependencies():
    root = BENCH.parent
    for text in ((root / "requirements.txt").read_text(), (root / "pyproject.toml").read_text()):
        assert "nncf" not in text.lower()
