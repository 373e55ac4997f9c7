"""What a user sees of trtlab's messages: info as ordinary output in notebooks, warnings once per cause, a run log
beside the results, and no third-party chatter caused by trtlab."""
from __future__ import annotations

import logging

import pytest


@pytest.fixture
def restore_logging():
    logger = logging.getLogger("trtlab")
    handlers, level = list(logger.handlers), logger.level
    yield logger
    for handler in list(logger.handlers):
        if handler not in handlers:
            logger.removeHandler(handler)
            handler.close()
    for handler in handlers:
        if handler not in logger.handlers:
            logger.addHandler(handler)
    logger.setLevel(level)


def test_notebook_setup_sends_info_to_stdout_and_warnings_to_stderr(restore_logging, capsys):
    from trtlab.core import log

    log.setup(0, info_stream="stdout")
    logging.getLogger("trtlab.anything").info("an info line")
    logging.getLogger("trtlab.anything").warning("a real warning")
    logging.getLogger("trtlab.anything").debug("a debug line")
    out, err = capsys.readouterr()
    assert out == "[trtlab] an info line\n"
    assert err == "[trtlab] warning: a real warning\n"


def test_a_run_leaves_a_log_beside_its_results(restore_logging, tmp_path, capsys):
    from trtlab.core import log
    from trtlab.core.workspace import workspace_dir

    log.setup(0)
    folder = workspace_dir(tmp_path / "ws")
    logging.getLogger("trtlab.stage").info("calibrated 6 images")
    logging.getLogger("trtlab.stage").debug("a detail only the log keeps")
    text = (folder / log.LOG_FILE).read_text()
    assert "--- run started" in text and "calibrated 6 images" in text and "a detail only the log keeps" in text
    assert "a detail only the log keeps" not in capsys.readouterr().err  # the screen keeps its level
    # Another run in the same workspace appends, it does not replace.
    other = workspace_dir(tmp_path / "other")
    logging.getLogger("trtlab.stage").info("elsewhere")
    workspace_dir(folder)
    logging.getLogger("trtlab.stage").info("back again")
    text = (folder / log.LOG_FILE).read_text()
    assert "calibrated 6 images" in text and "back again" in text and "elsewhere" not in text
    assert "elsewhere" in (other / log.LOG_FILE).read_text()


def test_the_literal_reference_warning_is_said_once_per_cause(caplog):
    from trtlab.core import log
    from trtlab.evaluation import literal_check

    log.reset_warnings()
    cause = literal_check.disagreement_cause({"machine": "x86_64", "model": "", "x86": True, "avx2": True,
                                              "avx512": False, "vnni": False, "known": True})
    with caplog.at_level(logging.DEBUG, logger="trtlab"):
        for variant in ("int8-minmax@6", "int8-entropy@6", "int8-percentile99.99@6"):
            check = {"images": 8, "disagree": 2, "worst_cosine_optimized_vs_reference": 0.5,
                     "optimized_is_trustworthy": False, "cause": cause}
            check["message"] = literal_check.self_check_message(check, variant)
            literal_check.report_self_check(check, key=variant)
    shown = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert len(shown) == 1 and shown[0].startswith("int8-minmax@6: ") and "on 2 of 8 sample images" in shown[0]
    assert not any(r.levelno >= logging.WARNING for r in caplog.records)  # it is no failure: INFO, once
    assert sum(r.getMessage().startswith("int8-entropy@6") for r in caplog.records if r.levelno == logging.DEBUG) == 1


def test_exporting_the_demo_model_prints_nothing_but_trtlab_lines(demo_export):
    """The session's export (tests/conftest.py: a fresh Python, trtlab's logging at its default verbosity, an empty workspace)."""
    lines = (demo_export.stdout + demo_export.stderr).splitlines()
    assert lines and all(line.startswith("[trtlab] ") for line in lines), lines
