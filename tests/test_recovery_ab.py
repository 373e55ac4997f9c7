"""Recovery in the A/B and the guard search (issue 39 items 2 and 3): notebook 03's widget and `calibrate
--recovery` build each algorithm plain and recovered and the verdict compares the two; the guard search tries
recovery before guarding any layer, and its answer, recipe and command carry both."""
from __future__ import annotations

import pytest

from trtlab.quantization.recipe import Recipe


@pytest.fixture(scope="module")
def split(demo_data):
    from trtlab.data.demo import demo_split

    return demo_split(demo_data)


def test_the_widget_builds_plain_and_recovered_and_the_verdict_compares_them(demo_model, demo_data, split,
                                                                             session_workspace):
    from trtlab.workflows.compare import ab_widgets, recipes_from_selection

    recipes = recipes_from_selection(("minmax",), 6, 8, recovery=["bias_correction"])
    assert [r.name for r in recipes] == ["int8-minmax@6", "int8-minmax@6+biascorr"]
    panel = ab_widgets(demo_model, demo_data, workspace=session_workspace, split=split)
    panel.children[0].children[0].value = ("minmax",)
    panel.engines_toggle.value = False
    panel.recovery_toggles["bias_correction"].value = True
    panel.children[3].value = False  # no FP16 variant: the pair is the point here
    result = panel.run_callback()
    assert list(result.table.index) == ["fp32", "int8-minmax@6", "int8-minmax@6+biascorr"]
    verdict = result.verdict()
    assert (verdict.first, verdict.second) == ("int8-minmax@6", "int8-minmax@6+biascorr")
    assert "int8-minmax@6+biascorr" in verdict.sentence
    recovered = result.variants["int8-minmax@6+biascorr"]
    # the same nodes as the plain variant: the precision report and the speed estimate are the plain one's
    import onnx

    plain = onnx.load(str(result.variants["int8-minmax@6"].model_path))
    mine = onnx.load(str(recovered.model_path))
    assert [n.op_type for n in mine.graph.node] == [n.op_type for n in plain.graph.node]
    assert recovered.plan["recovery"]["bias_correction"]["channels_corrected"] > 0


def test_calibrate_recovery_on_the_command_line(demo_model, session_workspace, capsys):
    from trtlab.cli.main import main

    code = main(["calibrate", "--model", str(demo_model), "--algorithms", "minmax", "--recovery", "bias_correction",
                 "--calibration-images", "6", "--workspace", str(session_workspace), "--no-engines", "-q"])
    out = capsys.readouterr().out
    assert code == 0, out
    verdict = next(line for line in out.splitlines() if line.startswith("verdict: "))
    # the verdict between the two (the widget test checks the pair): bias correction's logits closer to FP32
    assert verdict.startswith("verdict: Ship int8-minmax@6+biascorr") and "closer to fp32" in verdict, verdict
    assert "int8-minmax@6 " in out  # the plain variant's row in the table
    assert main(["calibrate", "--model", str(demo_model), "--recovery", "rounding", "--workspace",
                 str(session_workspace)]) == 2
    err = capsys.readouterr().err
    assert err.strip().startswith("error: --recovery: recovery method(s) 'rounding' are not trtlab's — choose from")


@pytest.fixture(scope="module")
def debugger(demo_model, demo_cache, split, session_workspace):
    from trtlab.debug.debugger import LayerDebugger

    return LayerDebugger(demo_model, demo_cache, split.calibration, split.evaluation, Recipe(algorithm="minmax"),
                         images=4, batch_size=10, workspace=session_workspace, progress=False, search_images=10)


@pytest.mark.slow  # three guard searches (one with guards on top of recovery): over a minute on 2 cores
def test_the_guard_search_recovers_first_and_guards_only_what_recovery_leaves(debugger):
    """A target between the plain variant's SQNR and the recovered one's: recovery alone meets it (no guard, no
    speed lost); a target above the recovered one's: guards on top, the answer naming both with the MAC share."""
    plain = debugger.evaluate_guards([])["sqnr_db"]
    recovered = debugger.with_recovery(("bias_correction",))
    better = recovered.evaluate_guards([])["sqnr_db"]
    assert better > plain + 0.3, (plain, better)
    found = debugger.search_guards(target=f"sqnr={(plain + better) / 2:.3f}", recovery=("bias_correction",))
    assert found.reached and found.added == [] and found.recovery == ("bias_correction",)
    answer = str(found.answer())
    assert "recover with bias_correction — no layer needs to leave INT8, no speed lost" in answer
    assert "--recovery bias_correction" in found.calibrate_command()
    assert found.recipe().recovery == ("bias_correction",) and list(found.steps["phase"]) == ["add", "recover"]

    harder = debugger.search_guards(target=f"sqnr={better + 1.5:.3f}", recovery=("bias_correction",),
                                    max_guards=6)
    assert harder.recovery == ("bias_correction",)
    if harder.reached:
        assert harder.added
        text = str(harder.answer())
        assert "recover with bias_correction and keep" in text and "% of the MACs in FP16" in text
        command = harder.calibrate_command()
        assert "--recovery bias_correction" in command and "--guards" in command
    alone = debugger.search_guards(target=f"sqnr={(plain + better) / 2:.3f}", recovery=(), max_guards=1)
    assert alone.recovery == () and "recover" not in list(alone.steps["phase"])


def test_notebook_03s_recovery_cells_run(demo_model, session_workspace):
    """Notebook 03's first cell (one algorithm, to keep it short) and its recovery cells, executed in a kernel: the
    recovered recipe's variant is built, stored and compared head to head with the plain one."""
    import re
    from pathlib import Path

    import nbformat
    from nbclient import NotebookClient

    repo = Path(__file__).resolve().parents[1]
    source = nbformat.read(repo / "notebooks" / "03_calibration_ab.ipynb", as_version=4)
    code = [c for c in source.cells if c.cell_type == "code"]
    first = code[0]
    recovery = next(c for c in code if "recovery=" in c.source)
    first.source = first.source.replace("('minmax', 'entropy', 'percentile')", "('minmax',)")
    assert "('minmax',)" in first.source
    nb = nbformat.v4.new_notebook(cells=[first, recovery])
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(repo)}}).execute()
    outputs = [o for c in nb.cells for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    shown = "".join(o.get("data", {}).get("text/markdown", "") + o.get("data", {}).get("text/plain", "")
                    for o in nb.cells[1].outputs)
    assert re.search(r"Head to head: int8-minmax@\d+ vs int8-minmax@\d+\+biascorr", shown), shown[:500]
