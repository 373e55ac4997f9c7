"""What notebooks 02–05 work on: the dataset and split prepared by notebook 01 (`python -m trtlab prep`) in this
workspace, or — when none was prepared — the demo photos with the demo split, said out loud either way."""
from __future__ import annotations

import logging

from dataclasses import dataclass, replace

from trtlab.data.dataset import Dataset
from trtlab.data.split import Split

log = logging.getLogger(__name__)


@dataclass
class PreparedData:
    dataset: Dataset
    split: Split
    source: str  # "prepared" (notebook 01 / prep) or "demo"
    description: str  # one line for people: what the data is and where it came from
    prep: object = None  # imagenet.ImageNetPrep when source == "prepared"

    def __iter__(self):  # dataset, split = trtlab.prepared_data()
        return iter((self.dataset, self.split))

    def _repr_markdown_(self) -> str:
        return f"**data:** {self.description}"


def prepared_data(workspace=None, eval_per_class: int | None = None, announce: bool = True) -> PreparedData:
    """The data later notebooks use by default: ImageNet val (or its demo stand-in) as prepared by notebook 01 in
    this workspace, with its saved calibration/evaluation split; otherwise the demo photos and demo split, with a
    note saying so. `eval_per_class` evaluates on the nested N-per-class subset of the evaluation images (quick
    runs on ImageNet). A prepared set whose images changed since is refused (prep says how to refresh it), never
    silently replaced by the demo photos."""
    from trtlab.data.imagenet import PREP_JSON, last_failed_attempt, load_imagenet
    from trtlab.core.workspace import workspace_dir

    folder = workspace_dir(workspace) / "imagenet"
    failed = last_failed_attempt(workspace)
    if (folder / PREP_JSON).exists():
        prep = load_imagenet(workspace)
        split = prep.split
        if eval_per_class is not None:
            subset = split.evaluation_subset(prep.dataset, eval_per_class)
            split = replace(split, evaluation=subset,
                            params={**split.params, "evaluation_per_class": eval_per_class})
        data = PreparedData(prep.dataset, split, "prepared",
                            f"{prep.what} prepared by notebook 01 in {folder}: {len(prep.dataset):,} images, "
                            f"calibration {len(split.calibration):,} / evaluation {len(split.evaluation):,} "
                            f"(seed {split.seed})", prep)
    else:
        from trtlab.data.demo import demo_dataset, demo_split

        dataset = demo_dataset()
        split = demo_split(dataset)
        data = PreparedData(dataset, split, "demo",
                            f"no prepared dataset in {folder.parent} (run notebook 01_imagenet_prep or `python -m "
                            f"trtlab prep`); using the demo photos: {len(dataset)} photos, calibration "
                            f"{len(split.calibration)} / evaluation {len(split.evaluation)}")
    if announce:
        log.info(f"data: {data.description}")
        # Said loudly (a warning, shown at once): results about other photos than the user meant to use.
        if failed and data.source == "demo":
            log.warning(f"notebook 01 did not prepare your data — its last run failed: {failed['error']}. These "
                        f"results are about the {len(data.dataset)} demo photos, NOT your data: fix that in notebook "
                        f"01 and run it again")
        elif failed:
            log.warning(f"notebook 01's last run failed ({failed['error']}); using what it prepared before: "
                        f"{data.description}")
        elif data.source == "prepared" and data.prep.standin:
            log.warning("notebook 01 found no ImageNet or photos of yours and prepared the demo stand-in: these "
                        "results are about the labelled demo photos, NOT your data (set DATA in notebook 01)")
    return data

