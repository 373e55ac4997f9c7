"""`python -m trtlab prep`: ImageNet val — labels, classes, checks, split, decode cache."""
from __future__ import annotations

import logging

from trtlab.cli.args import ArgGroup, Command, ModelDataArgs, WorkspaceArgs, check_choice, given, positive
from trtlab.cli.main import command_main
from trtlab.core.errors import UserValueError

log = logging.getLogger(__name__)
DECODE_SETS = ("none", "all", "calibration", "evaluation")


class PrepArgs(ArgGroup):
    """ImageNet: where its files are, the split and what to decode"""

    # --labels is a labels CSV and --images a count in the other commands; prep's label source and image folder
    # have their own names.
    renamed = {"--labels": ("--label-source", "use --label-source auto|<source> (a labels CSV is written by prep)"),
               "--images": ("--data", "use --data FOLDER, the folder holding the val images")}

    def add_options(self, group):
        from trtlab.data.imagenet import SOURCES

        group.add_argument("--root", metavar="FOLDER", default=None,
                           help="ImageNet folder (default: $TRTLAB_IMAGENET, else found under /kaggle/input)")
        group.add_argument("--label-source", metavar="SOURCE", default="auto",
                           help=f"where the labels come from: auto, {', '.join(SOURCES)} (default: auto)")
        group.add_argument("--devkit", metavar="PATH", default=None, help="ILSVRC2012 devkit folder or its meta.mat")
        group.add_argument("--ground-truth", metavar="FILE", default=None,
                           help="ILSVRC2012_validation_ground_truth.txt")
        group.add_argument("--loc-solution", metavar="FILE", default=None, help="Kaggle LOC_val_solution.csv")
        group.add_argument("--synset-mapping", metavar="FILE", default=None, help="Kaggle LOC_synset_mapping.txt")
        group.add_argument("--class-index", metavar="FILE", default=None,
                           help="class index JSON (default: the shipped asset)")
        group.add_argument("--calibration-per-class", type=int, metavar="N", default=None,
                           help="calibration images per class in the split (default: 10)")
        group.add_argument("--calibration-size", type=int, metavar="N", default=None,
                           help="total calibration images in the split, instead of per class")
        group.add_argument("--seed", type=int, default=0, help="split seed (default: 0)")
        group.add_argument("--expect-full-set", action="store_true", help="require 50,000 images = 1,000 × 50")
        group.add_argument("--organize", metavar="LAYOUT", default=None,
                           help="also lay the images out as wnid or flat folders (links)")
        group.add_argument("--organize-to", metavar="FOLDER", default=None, help="target folder for --organize")
        group.add_argument("--move", action="store_true", help="with --organize: move files (writable inputs only)")
        group.add_argument("--decode", metavar="SET", default="none",
                           help=f"build the decode cache of this set: {', '.join(DECODE_SETS)} (default: none)")
        group.add_argument("--eval-per-class", type=int, metavar="N", default=None,
                           help="with --decode evaluation: N images per class")
        group.add_argument("--workers", type=int, metavar="N", default=None, help="decode workers (default: auto)")
        group.add_argument("--pool", metavar="KIND", default="auto", help="auto, threads or processes (default: auto)")
        group.add_argument("--ignore-disk-check", action="store_true",
                           help="decode even if the estimate exceeds free disk")

    def parse(self, args):
        from trtlab.data.imagenet import SOURCES

        check_choice("--label-source", args.label_source, ("auto",) + tuple(SOURCES), "a label source")
        check_choice("--decode", args.decode, DECODE_SETS, "a set to decode")
        check_choice("--pool", args.pool, ("auto", "threads", "processes"), "a worker pool")
        if args.organize is not None:
            check_choice("--organize", args.organize, ("wnid", "flat"), "a layout")
        if args.calibration_per_class is not None and args.calibration_size is not None:
            raise UserValueError("--calibration-per-class and --calibration-size were both given",
                                 "give one: N per class, or N in total")
        for flag in ("calibration_per_class", "calibration_size", "eval_per_class", "workers"):
            positive(f"--{flag.replace('_', '-')}", getattr(args, flag))
        for flag, needs, on in (("--organize-to", "--organize", given(args, "organize_to")),
                                ("--move", "--organize", args.move),
                                ("--eval-per-class", "--decode evaluation", given(args, "eval_per_class")),
                                ("--preset", "--decode SET", args.preset_given)):
            met = {"--organize": bool(args.organize), "--decode evaluation": args.decode == "evaluation",
                   "--decode SET": args.decode != "none"}[needs]
            if on and not met:
                raise UserValueError(f"{flag} was given without {needs}", f"add {needs}, or drop {flag}")


COMMAND = Command("prep", "prepare ImageNet val: labels, classes, checks, split, and optionally the decode cache",
                  [ModelDataArgs(model=False, labels=False, data_default="found in --root",
                                 data_help="the folder holding the val images"), WorkspaceArgs(), PrepArgs()])
main = command_main(COMMAND.name)


def run(args) -> int:
    from trtlab.data.imagenet import organize, prepare_imagenet
    from trtlab.workflows.checks import check_inputs

    check_inputs(workspace=args.workspace)
    per_class = None if args.calibration_size is not None else (args.calibration_per_class or 10)
    prep = prepare_imagenet(args.root, images=args.data, labels=args.label_source, devkit=args.devkit,
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
    return 0
