"""How many calibration images are enough (issue 26.3), on the demo model and the bundled photos: thresholds and
output fidelity against calibration size for each algorithm, from per-image statistics merged per resample."""
from __future__ import annotations

import numpy as np
import pytest

import trtlab
from trtlab.core.errors import UserError


@pytest.fixture(scope="module")
def study(demo_model, demo_data, session_workspace):
    from trtlab.data.demo import demo_split

    return trtlab.calibration_size_study(demo_model, demo_data, split=demo_split(demo_data), resamples=6,
                                         fidelity_resamples=2, workspace=session_workspace, progress=False)


def test_study_measures_every_algorithm_at_every_size(study):
    table = study.table
    assert study.pool == 6 and study.evaluation_images == 4  # the 6 demo calibration photos; 4 evaluation photos
    assert list(table["algorithm"].unique()) == ["minmax", "entropy", "percentile"]
    assert sorted(table["size"].unique()) == [1, 2, 4, 6] and (table["resamples"] == 6).all()
    for algorithm in study.algorithms:
        rows = table[table["algorithm"] == algorithm].sort_values("size")
        spread = rows["threshold_spread_p90"].to_numpy()
        # one image is a noisy calibration set; the whole pool, resampled, much less so
        assert spread[0] > 0.05 and spread[-1] < 0.75 * spread[0], (algorithm, spread)
        assert (rows["threshold_spread"] <= rows["threshold_spread_p90"]).all()
        assert ((rows["cosine_low"] <= rows["cosine_mean"]) & (rows["cosine_mean"] <= rows["cosine_high"])).all()
        assert rows["cosine_mean"].between(0.9, 1.0).all()
    entropy = table[table["algorithm"] == "entropy"]["cosine_mean"].mean()
    minmax = table[table["algorithm"] == "minmax"]["cosine_mean"].mean()
    assert minmax > entropy  # what the guard search sees too: entropy ≈ 0.98, minmax ≈ 0.99 on this model
    assert len(study.resamples) == 3 * 4 * 2


def test_the_sentence_says_when_thresholds_settle_or_how_many_images_would(study):
    sentences = study.sentences()
    assert len(sentences) == 3
    for algorithm, sentence in zip(study.algorithms, sentences):
        assert sentence.startswith(f"{algorithm}'s thresholds ")
        settled = study.settled(algorithm)
        if settled is not None:
            assert f"settle by about {settled} image" in sentence
            rows = study.table[(study.table["algorithm"] == algorithm) & (study.table["size"] >= settled)]
            assert (rows["threshold_spread_p90"] <= study.tolerance).all()
        else:
            assert "have not settled by 6 images, the whole pool" in sentence
            needed = study.needed(algorithm)
            assert (needed is None or needed > 6) and (f"about {needed:,} would" in sentence if needed else True)
    # the answer in one sentence, first in the summary
    one = study.sentence()
    assert study.summary().startswith(one) and one.startswith("On this model, ") and one.count(".") <= 8
    for algorithm in study.algorithms:
        settled = study.settled(algorithm)
        assert (f"{algorithm}'s thresholds settle by about {settled} image" in one if settled else
                f"{algorithm}'s" in one.split("not settled within the 6-image pool")[0])
    assert "moves by at most" in one and "6 pool images resampled 6×" in study.summary()


def test_merged_per_image_statistics_match_one_pass_over_the_pool(study, demo_model, demo_data, session_workspace):
    """The study merges per-image histograms instead of running the model per subset: the whole pool's merge gives
    the thresholds one statistics pass over the pool gives (minmax exactly; the others within a few bins)."""
    from trtlab.data.demo import demo_split
    from trtlab.quantization.thresholds import compute_thresholds
    from trtlab.quantization.variants import calibration_statistics
    from trtlab.workflows.calibration_size import _Setting

    setting = _Setting(demo_model, demo_data, demo_split(demo_data), None, 32, 4, session_workspace, False)
    per_image = setting.per_image_statistics()
    one_pass = calibration_statistics(setting.source, setting.cache, setting.pool, 8, session_workspace, False)
    for algorithm in ("minmax", "entropy", "percentile"):
        merged = setting.reference(per_image, algorithm)
        direct = compute_thresholds(one_pass, algorithm)
        ratio = np.array([merged[t] / direct[t] for t in setting.tensors if direct[t] > 0])
        if algorithm == "minmax":
            np.testing.assert_allclose(ratio, 1.0, rtol=1e-6)
        else:
            assert np.median(np.abs(ratio - 1)) < 0.01 and np.abs(ratio - 1).max() < 0.1, algorithm


def test_calibration_batch_and_image_order_spread(study):
    """The pool streamed in 3 orders at calibration batches 1 and 6 (all the pool): with one image setting the range,
    entropy's thresholds move with the order; with every image in the first batch, nothing can (bit for bit), and
    minmax (a max) never moves. One sentence says so, after the size answer."""
    table = study.batch_order
    assert sorted(table["calibration_batch"].unique()) == [1, 6] and (table["orders"] == 3).all()
    assert list(table["algorithm"].unique()) == ["minmax", "entropy", "percentile"]
    rows = table.set_index(["algorithm", "calibration_batch"])
    for algorithm in study.algorithms:
        assert rows.loc[(algorithm, 6), "order_spread_p90"] < 1e-12  # identical thresholds (up to np.std's rounding)
        assert rows.loc[(algorithm, 6), "from_one_batch_p90"] == 0.0
    assert rows.loc[("minmax", 1), "order_spread_p90"] == 0.0
    assert rows.loc[("entropy", 1), "order_spread_p90"] > 0.005  # the first image's range decides the bins
    sentence = study.batch_order_sentence()
    assert study.summary().endswith(sentence) and sentence.count(".") == 1 + sentence.count("% at")
    assert "calibrated in 3 orders" in sentence and "at batch 6 every image is in the first batch" in sentence


def test_figure_has_both_panels_and_no_overlapping_text(study):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = study.plot()
    assert len(fig.axes) == 2 and len(fig.axes[0].lines) == 4 and len(fig.axes[1].lines) == 3  # + tolerance line
    FigureCanvasAgg(fig).draw()
    renderer = fig.canvas.get_renderer()
    texts = [t for ax in fig.axes for t in (ax.title, ax.xaxis.label, ax.yaxis.label)] + [fig._suptitle]
    boxes = [t.get_window_extent(renderer) for t in texts if t is not None and t.get_text()]
    boxes += [legend.get_window_extent(renderer) for legend in fig.legends]
    bounds = fig.bbox
    assert all(bounds.contains(b.x0, b.y0) and bounds.contains(b.x1, b.y1) for b in boxes)
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])


def test_bad_sizes_are_refused_with_the_fix(demo_model, demo_data, session_workspace):
    from trtlab.data.demo import demo_split

    with pytest.raises(UserError, match="sizes"):
        trtlab.calibration_size_study(demo_model, demo_data, split=demo_split(demo_data), sizes=[1, 7],
                                      workspace=session_workspace, progress=False)
    with pytest.raises(UserError, match="resamples"):
        trtlab.calibration_size_study(demo_model, demo_data, resamples=1, workspace=session_workspace,
                                      progress=False)
    with pytest.raises(UserError, match="orders=1"):
        trtlab.calibration_size_study(demo_model, demo_data, orders=1, workspace=session_workspace, progress=False)
    with pytest.raises(UserError, match="cannot be studied"):
        trtlab.calibration_size_study(demo_model, demo_data, algorithms=("entropy-gtc",),
                                      workspace=session_workspace, progress=False)
