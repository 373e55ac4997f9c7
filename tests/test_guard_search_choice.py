"""The guard search's choice between guards on top of recovery and guards alone (issue 39; found on notebook 05's
broken layer: recovery fitted around a clipped scale left 7 layers to guard where guards alone needed 1). A
debugger stand-in scores each guard set, so the choice itself is what is tested; the real debugger runs it in
tests/test_recovery_ab.py and notebook 05."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from tqdm.auto import tqdm

from trtlab.quantization.recipe import Recipe


class _Debugger:
    """What search_guards reads of a LayerDebugger; `scores` maps a recovered flag and a guard set to the cosine."""

    layers = all_layers = ["a", "b", "c", "d"]
    guard_precision, progress = "fp16", False
    search_indices = np.arange(4)

    def __init__(self, folder, scores, recovered=False):
        self.folder, self.scores, self.recovered = folder, scores, recovered
        self.key = f"stand-in-{recovered}"
        self.recipe = Recipe(algorithm="minmax", recovery=("bias_correction",) if recovered else ())

    def image_ids(self, indices):
        return [f"img{k}" for k in indices]

    def with_recovery(self, methods):
        return _Debugger(self.folder, self.scores, recovered=True)

    def sensitivity(self, resume=True):
        assert not self.recovered, "the candidates are the plain recipe's most sensitive layers"
        return SimpleNamespace(ranking=["b", "a", "c", "d"])

    def block(self, name):
        return f"block_{name}"

    def progress_bar(self, total, desc, unit):
        return tqdm(total=total, disable=True)

    def mac_share(self, guards, precision=None):
        return {"FP16": 0.25 * len(guards), "INT8": 1 - 0.25 * len(guards)}

    def guard_strings(self, guards, precision):
        return [f"node:{name}={precision}" for name in guards]

    def metrics(self, added):
        cosine = self.scores[self.recovered].get(frozenset(added), 0.98)
        return {"top1_agreement": 1.0, "cosine_mean": cosine, "sqnr_db": 20.0, "kl_mean": 0.01}


@pytest.fixture()
def search(tmp_path, monkeypatch):
    from trtlab.debug import guard_search

    monkeypatch.setattr(guard_search, "evaluate_guards", lambda debugger, added, precision: debugger.metrics(added))

    def run(scores):
        return guard_search.search_guards(_Debugger(tmp_path, scores), target="cosine=0.99",
                                          recovery=("bias_correction",), resume=False)
    return run


def test_guards_alone_win_where_recovery_first_needs_more_layers_in_fp16(search):
    plain = {frozenset(): 0.98, frozenset("b"): 0.995}
    recovered = {frozenset(): 0.985, frozenset("ba"): 0.985, frozenset("bac"): 0.995, frozenset("ac"): 0.98,
                 frozenset("bc"): 0.98}
    found = search({False: plain, True: recovered})
    assert found.reached and found.added == ["b"] and found.recovery == ()
    assert found.recipe().recovery == ()
    answer = str(found.answer())
    assert "keep this layer in FP16 — block_b" in answer and "recover with" not in answer
    assert ("guards alone: with recovery (bias_correction) first, 3 layer(s) would leave INT8 (75.0 % of the MACs "
            "in FP16, 25.0 % INT8)") in answer
    phases = list(found.steps["phase"])
    assert phases[:2] == ["add", "recover"] and "add (no recovery)" in phases and "prune" in phases


def test_recovery_with_guards_is_kept_where_it_costs_no_more(search):
    plain = {frozenset(): 0.98, frozenset("b"): 0.995}
    recovered = {frozenset(): 0.985, frozenset("b"): 0.996}
    found = search({False: plain, True: recovered})
    assert found.reached and found.added == ["b"] and found.recovery == ("bias_correction",)
    assert found.instead == "" and "recover with bias_correction and keep this layer in FP16" in str(found.answer())
