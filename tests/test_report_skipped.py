"""A skipped image is named in the report itself (issue 18), not only on stderr and in failures.json: the report's
header says how many evaluation images could not be decoded and which, so its image count and the table's agree."""
from __future__ import annotations

import odd_models as om


def test_the_report_and_dashboard_name_a_skipped_photo(demo_model, photo_folder, tmp_path, capsys):
    from trtlab.backends import resolve_backend
    from trtlab.evaluation.results import ResultsStore
    from trtlab.views.dashboard import build_dashboard

    broken = sorted(photo_folder.rglob("*.*"))[0].parent / "zz_cut_short.jpg"
    broken.write_bytes(sorted(photo_folder.rglob("*.*"))[0].read_bytes()[:600])  # a copy cut off mid-transfer
    photos = len([p for p in photo_folder.rglob("*") if p.is_file()])
    ws = tmp_path / "ws"
    code, _, err = om.run_cli(capsys, "eval", "--model", demo_model, "--data", photo_folder, "--workspace", ws, "-q")
    assert code == 0, err
    (folder,) = (ws / "results").iterdir()
    store = ResultsStore(folder)
    result = store.load("fp32")
    assert len(result) == photos - 1 and store.experiment.evaluation_images == photos
    (md,) = (ws / "reports").rglob("report.md")
    text = md.read_text()
    assert f"**Skipped:** 1 of {photos} evaluation image(s) could not be decoded and are not in the table: " \
           f"{broken}" in text
    backend = resolve_backend(demo_model)[0]  # what 'auto' runs here: ort, or torch where a GPU is visible
    assert f"\n{photos - 1} images (all labelled); backend {backend}" in text  # the header's count minus the one named

    dash = build_dashboard(store, workspace=ws)
    (note,) = [n for n in dash.notes if n.startswith("Skipped: ")]
    assert f"1 of {photos} evaluation image(s)" in note and str(broken) in note
