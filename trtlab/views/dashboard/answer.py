"""The dashboard's answer in one sentence (issue 35): what shipping the chosen INT8 variant costs per class against
the reference — how many classes change top-1 and the worst one — or, without labels, how many images change their
top-1. How much each class's figure rests on is said where the labels are few."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from trtlab.views.formatting import Sentence, percent

if TYPE_CHECKING:
    from trtlab.views.dashboard.build import Dashboard

#: Below this many labelled images per class (median), a class's change is a handful of images: said in the answer.
FEW_PER_CLASS = 10


def dashboard_answer(dash: Dashboard) -> Sentence:
    variant, why = dash.answered_variant()
    reference = dash.reference
    if variant is None:
        return Sentence(f"Only {reference} is here: evaluate an INT8 variant to see what it costs per class.", True)
    name = f"{variant} ({why})"
    drift = dash.drift.get(variant)
    if drift is None or not len(drift):
        flips = dash.flips[variant]
        compared = len(dash.results[variant].align(dash.results[reference])[0])
        return Sentence(f"{name} changes the top-1 prediction of {len(flips)} of {compared} images against "
                        f"{reference}; there are no labels, so no per-class accuracy cost can be measured.", True)
    changed = drift[drift["delta"] != 0]
    lost, gained = int((drift["delta"] < 0).sum()), int((drift["delta"] > 0).sum())
    per_class = float(np.median(drift["images"]))
    rests = (f"; each class's figure rests on {per_class:g} labelled image{'s' if per_class != 1 else ''} (median), "
             f"too few to tell a real per-class change from chance" if per_class < FEW_PER_CLASS else "")
    if not len(changed):
        return Sentence(f"{name} changes top-1 accuracy on none of the {len(drift)} labelled classes against "
                        f"{reference}{rests}.", True)
    worst = drift.iloc[0]  # per_class_drift sorts the biggest loss first
    if worst["delta"] < 0:
        count = int(worst["images"])
        worst_text = (f"worst: {worst['name']}, −{100 * -worst['delta']:.0f} points "
                      f"({percent(worst['reference_accuracy'], 0)} → {percent(worst['variant_accuracy'], 0)} of "
                      f"{count} image{'s' if count != 1 else ''})")
    else:
        worst_text = "none loses"
    return Sentence(f"{name} changes top-1 on {len(changed)} of {len(drift)} labelled classes against {reference} "
                    f"({lost} lose, {gained} gain); {worst_text}{rests}.", True)
