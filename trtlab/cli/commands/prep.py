"""`python -m trtlab prep`: ImageNet val — labels, classes, checks, split, decode cache."""
from __future__ import annotations

import argparse
import logging
import sys

from trtlab.data.imagenet import SOURCES, ImageNetPrepError, organize, prepare_imagenet

log = logging.getLogger(__name__)


# ----------------------------------------------------------------------------------------------------------- CLI
def main(argv: list[str] | None = None) -> int:
    """`python -m trtlab prep ...`: prepare ImageNet val (labels, classes, checks, split) and optionally decode."""
    parser = argparse.ArgumentParser(prog="python -m trtlab prep", description=main.__doc__.split(":", 1)[1])
    parser.add_argument("--root", default=None, help="ImageNet folder (auto: $TRTLAB_IMAGENET, /kaggle/input)")
    parser.add_argument("--images", default=None, help="the folder holding the val images (default: found in root)")
    parser.add_argument("--labels", default="auto", choices=("auto",) + SOURCES, help="label source")
    parser.add_argument("--devkit", default=None, help="ILSVRC2012 devkit folder or its meta.mat")
    parser.add_argument("--ground-truth", default=None, help="ILSVRC2012_validation_ground_truth.txt")
    parser.add_argument("--loc-solution", default=None, help="Kaggle LOC_val_solution.csv")
    parser.add_argument("--synset-mapping", default=None, help="Kaggle LOC_synset_mapping.txt")
    parser.add_argument("--class-index", default=None, help="class index JSON (default: the shipped asset)")
    parser.add_argument("--workspace", default=None)
    parser.add_argument("--calibration-per-class", type=int, default=10)
    parser.add_argument("--calibration-size", type=int, default=None, help="total calibration images instead")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--expect-full-set", action="store_true", help="require 50,000 images = 1,000 × 50")
    parser.add_argument("--organize", choices=("wnid", "flat"), default=None, help="also lay images out (links)")
    parser.add_argument("--organize-to", default=None, help="target folder for --organize")
    parser.add_argument("--move", action="store_true", help="with --organize: move files (writable inputs only)")
    parser.add_argument("--decode", choices=("none", "all", "calibration", "evaluation"), default="none",
                        help="build the decode cache of this set")
    parser.add_argument("--eval-per-class", type=int, default=None, help="with --decode evaluation: N per class")
    parser.add_argument("--preset", default="tf-lite", help="preprocessing preset of the decode cache")
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--pool", choices=("auto", "threads", "processes"), default="auto")
    parser.add_argument("--ignore-disk-check", action="store_true", help="decode even if the estimate exceeds free disk")
    args = parser.parse_args(argv)
    from trtlab.data.decode_cache import InsufficientDiskSpace

    per_class = None if args.calibration_size is not None else args.calibration_per_class
    try:
        prep = prepare_imagenet(args.root, images=args.images, labels=args.labels, devkit=args.devkit,
                                ground_truth=args.ground_truth, loc_solution=args.loc_solution,
                                synset_mapping=args.synset_mapping, class_index=args.class_index,
                                workspace=args.workspace, calibration_per_class=per_class,
                                calibration_size=args.calibration_size, seed=args.seed,
                                expect_full_set=args.expect_full_set)
        if args.organize:
            organize(prep, args.organize, args.organize_to, move=args.move)
        if args.decode != "none":
            cache = prep.decode(args.preset, args.decode, args.eval_per_class, workers=args.workers, pool=args.pool,
                                check_disk=not args.ignore_disk_check)
            log.info(f"decode cache {cache.folder}: {len(cache.valid_indices):,} images ready, "
                  f"{len(cache.failures)} skipped")
    except (ImageNetPrepError, InsufficientDiskSpace) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0
