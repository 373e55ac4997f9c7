"""Issue 20: what notebooks 00_quickstart, 03 and 04 show reads like a report — executed headless (nbclient, as
tests/test_notebooks.py does), every table, verdict and note they display is formatted (no float printed with 5 or
more decimals, the mark of an unformatted DataFrame), 03 ends with the head-to-head verdict, and each notebook ends
by saying what to open next."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from trtlab.views.formatting import UNFORMATTED_FLOAT

REPO = Path(__file__).resolve().parents[1]
SHOWN = ("text/html", "text/plain", "text/markdown")  # what a notebook renders of a table, a verdict or a note


@pytest.fixture(scope="module")
def executed(tmp_path_factory, session_workspace):
    """00_quickstart, 03 and 04 executed in order in fresh kernels (the session workspace: the exported model and
    the caches are reused)."""
    import nbformat
    from nbclient import NotebookClient

    folder = tmp_path_factory.mktemp("notebooks")
    out = {}
    for stem in ("00_quickstart", "03_calibration_ab", "04_accuracy_dashboard"):
        nb = nbformat.read(str(REPO / "notebooks" / f"{stem}.ipynb"), as_version=4)
        NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(folder)}}).execute()
        out[stem] = nb
    return out


def displayed(nb):
    """(cell source, mime type, text) of every rich output: tables, verdicts, notes — not streams or images."""
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for output in cell.outputs:
            for mime in SHOWN:
                if mime in output.get("data", {}):
                    yield cell.source, mime, output["data"][mime]


@pytest.mark.slow
@pytest.mark.parametrize("stem", ["00_quickstart", "03_calibration_ab", "04_accuracy_dashboard"])
def test_notebook_tables_are_formatted_and_it_says_what_next(stem, executed):
    nb = executed[stem]
    errors = [f"{o.ename}: {o.evalue}" for c in nb.cells if c.cell_type == "code" for o in c.outputs
              if o.output_type == "error"]
    assert not errors, errors
    shown = list(displayed(nb))
    assert shown
    raw = [(source.splitlines()[-1], mime, match.group(0)) for source, mime, text in shown
           for match in [UNFORMATTED_FLOAT.search(re.sub(r"base64,[A-Za-z0-9+/=]+", "", text))] if match]
    assert raw == [], f"unformatted floats in what {stem} displays: {raw}"
    assert nb.cells[-1].cell_type == "markdown" and nb.cells[-1].source.startswith("**Next:** open `")


@pytest.mark.slow
def test_notebook_tables_show_intervals_in_one_column_and_03_ends_with_the_verdict(executed):
    quick = {source: text for source, mime, text in displayed(executed["00_quickstart"]) if mime == "text/html"}
    assert "<th>top-1 (95 % CI)</th>" in quick["job.table"] and "90.0 % (69.9–97.2)" in quick["job.table"]
    assert "top1_low" not in quick["job.table"]
    ab = executed["03_calibration_ab"]
    last = [c for c in ab.cells if c.cell_type == "code"][-1]
    assert last.source == "result.verdict()"
    text = "".join(o["data"].get("text/markdown", "") + o["data"].get("text/html", "") for o in last.outputs
                   if "data" in o)
    assert "Head to head: int8-minmax@6 vs int8-entropy@6" in text
    assert re.search(r"int8-minmax@6 and int8-entropy@6 (differ on \d+ of 20|are right on exactly)", text)
    assert "<th>only int8-minmax@6</th>" in text and "threshold</th>" in text
    assert any(o.get("data", {}).get("image/png") for o in last.outputs)  # the side-by-side drift
    dash = executed["04_accuracy_dashboard"]
    compared = [c for c in dash.cells if c.cell_type == "code" and c.source.startswith("dash.compare(")]
    assert [c.source for c in compared] == ["dash.compare()", "dash.compare('minmax', 'percentile')"]
    second = "".join(o["data"].get("text/markdown", "") for o in compared[1].outputs if "data" in o)
    assert "Head to head: int8-minmax@6 vs int8-percentile99.99@6" in second
