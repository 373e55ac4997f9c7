"""Argument groups the commands share, after Polygraphy's `tools/args` (BaseArgs): a group adds its options to a
command's parser and turns their strings into checked, typed values (`parse`) before the command does any work.

- One spelling per option in every command that takes it. An old spelling is refused with a line that names the
  new one (never a silent alias); abbreviations are off (`--calib` is not `--calibration-images`).
- Options that take a list accept repeats and commas alike: `--guards a --guards b,c` is `--guards a,b,c`.
- A bad value is a trtlab.core.errors.UserError — one line `error: <what> — <fix>`, exit 2 — raised while parsing,
  so before any file is read or decoded. Checks that need the model or the disk (node guards, writable folders)
  follow in trtlab.workflows.checks, in the order documented there.
"""
from __future__ import annotations

import argparse
import math
from pathlib import Path

from trtlab.core.errors import UserValueError

SUPPRESS = argparse.SUPPRESS
# The real defaults (trtlab.graph.guards.DEFAULT_PRECISION): a guard without '=…' follows the INT8 graph's float
# path (FP16 by default); softmax alone means FP32.
GUARD_FORMS = ("first_layer, last_layer, softmax, op:<OpType> or node:<node name>, each optionally with =fp16 or "
               "=fp32 (default: the float path's precision, FP16; softmax: FP32)")
# What users type for TensorRT's algorithms under other names: named in the error, never accepted silently.
ALGORITHM_HINTS = {"kl": "entropy", "kl-divergence": "entropy", "entropy2": "entropy", "max": "minmax",
                   "min-max": "minmax", "min_max": "minmax", "absmax": "minmax", "percent": "percentile"}
PERCENTILE_FLOOR = 50.0  # below this the threshold clips most activations: a fraction typed for a percent


class UsageError(UserValueError):
    """A command line argparse cannot read (unknown option, missing value, old spelling): one line, exit 2."""


def exit_status_help(check_failed: str = "") -> str:
    """The one exit-status rule, shown under every command's --help (`check_failed`: what 1 means there)."""
    one = f"the command ran but its check failed ({check_failed or 'this command has no such check'})"
    return ("exit status:\n"
            "  0    done\n"
            f"  1    {one}\n"
            "  2    a user error: usage, or one line `error: <what was wrong> — <what to do>`\n"
            "  130  interrupted (Ctrl-C); what was finished stays in the workspace\n"
            "  a bug in trtlab keeps its traceback")


class Parser(argparse.ArgumentParser):
    """argparse with abbreviations off and its errors raised as one-line UserErrors (not usage + exit)."""

    def __init__(self, *args, **kwargs):
        kwargs["allow_abbrev"] = False
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message):
        raise UsageError(f"{self.prog}: {message}{self.did_you_mean(message)}", f"see `{self.prog} --help`")

    def did_you_mean(self, message: str) -> str:
        """' (did you mean --labels?)' for a mistyped option or command in argparse's `message`: the closest of the
        spellings --help shows (difflib). Only said, never taken: abbreviations stay off."""
        import difflib
        import re

        guesses = []
        unknown = re.match(r"unrecognized arguments: (.*)", message)
        if unknown:
            spellings = [s for a in self._actions if a.help != SUPPRESS for s in a.option_strings]
            for flag in dict.fromkeys(t.split("=", 1)[0] for t in unknown.group(1).split() if t.startswith("-")):
                guesses += [(flag, m) for m in difflib.get_close_matches(flag, spellings, n=1, cutoff=0.6)]
        choice = re.search(r"invalid choice: '([^']*)'", message)
        if choice:
            commands = [c for a in self._actions if isinstance(a, argparse._SubParsersAction) for c in a.choices]
            guesses += [(choice.group(1), m) for m in difflib.get_close_matches(choice.group(1), commands, n=1)]
        if not guesses:
            return ""
        if len(guesses) == 1:
            return f" (did you mean {guesses[0][1]}?)"
        return " (did you mean " + ", ".join(f"{new} for {old}" for old, new in guesses) + "?)"


class Items(argparse.Action):
    """A list option: repeats and commas alike (`--guards a --guards b,c` → ['a', 'b', 'c']). Default None, so
    a repeat never extends a default list."""

    def __call__(self, parser, namespace, values, option_string=None):
        items = list(getattr(namespace, self.dest, None) or [])
        for value in values if isinstance(values, list) else [values]:
            items += [piece.strip() for piece in value.split(",") if piece.strip()]
        setattr(namespace, self.dest, items)


class Renamed(argparse.Action):
    """An old spelling: refused with the one spelling named (hidden from --help)."""

    def __init__(self, option_strings, dest, new: str = "", fix: str = "", **kwargs):
        super().__init__(option_strings, dest=SUPPRESS, nargs="?", default=SUPPRESS, help=SUPPRESS)
        self.new, self.fix = new, fix

    def __call__(self, parser, namespace, values, option_string=None):
        raise UsageError(f"{parser.prog}: {option_string} is spelled {self.new} now (one spelling in every command)",
                         self.fix or f"use {self.new}")


def positive(flag: str, value, optional: bool = True):
    """`value` (an int from argparse) if it is a whole number ≥ 1 (or None when `optional`)."""
    if value is None and optional:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise UserValueError(f"{flag} {value!r} is not possible", f"give a whole number ≥ 1 for {flag}")
    return value


def given(args, dest: str) -> bool:
    """Whether the user gave option `dest` (the groups' defaults are None so this can be told)."""
    return getattr(args, dest, None) is not None


class ArgGroup:
    """Title: what the options are about (Polygraphy's convention: the docstring's first line is the help section)."""

    #: old spelling → (new spelling, what to write instead); refused in every command that has this group
    renamed: dict[str, tuple[str, str]] = {}

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        title, _, about = (self.__doc__ or "").strip().splitlines()[0].partition(":")
        group = parser.add_argument_group(title.strip(), about.strip() or None)
        self.add_options(group)
        for action in group._group_actions:  # noqa: SLF001 — which group owns an option (tests/test_cli.py)
            action.trtlab_group = type(self).__name__
        for old, (new, fix) in self.renamed.items():
            group.add_argument(old, action=Renamed, new=new, fix=fix)

    def add_options(self, group) -> None:
        raise NotImplementedError

    def parse(self, args) -> None:
        """Check this group's values in `args` and store them typed (UserError on the first bad one)."""


class GlobalArgs(ArgGroup):
    """global: every command, anywhere on the line"""

    renamed = {"--quiet": ("-q", "use -q (warnings only, no progress bars)"),
               "--verbose": ("-v", "use -v (debug messages; TensorRT's verbose log in build)")}

    def add_options(self, group):
        group.add_argument("-q", dest="quiet", action="store_true", help="warnings only, no progress bars")
        group.add_argument("-v", dest="verbose", action="count", default=0, help="debug messages (-vv: more)")

    def parse(self, args):
        args.verbosity = -1 if args.quiet else args.verbose


class ModelDataArgs(ArgGroup):
    """model and data: the ONNX classifier, the images, their labels and preprocessing"""

    def __init__(self, model: bool = True, data: bool = True, labels: bool = True, preset: bool = True,
                 required: bool = False, model_default: str = "the demo EfficientNet-Lite0",
                 data_default: str = "notebook 01's prepared data in the workspace (`python -m trtlab prep`), else "
                                     "the demo photos", data_help: str | None = None,
                 classifier: bool | None = None):
        self.model, self.data, self.labels, self.preset, self.required = model, data, labels, preset, required
        self.model_default, self.data_default, self.data_help = model_default, data_default, data_help
        # --crop/--resize/--output/--background-class: commands that score a model on labelled data (they reach
        # workflows.checks.checked_inputs, which applies them)
        self.classifier = (model and labels and preset) if classifier is None else classifier
        self.renamed = {"--calib-data": ("--data", "use --data FOLDER (without it: the demo photos)")} if data else {}

    def add_options(self, group):
        if self.model:
            group.add_argument("--model", metavar="MODEL.onnx", required=self.required, default=None,
                               help="ONNX classifier, one N×3×H×W input" + self._default(self.model_default))
        if self.data:
            group.add_argument("--data", metavar="FOLDER", required=self.required, default=None,
                               help=(self.data_help or "image folder (flat, or one sub-folder per WNID or class "
                                                       "index)") + self._default(self.data_default))
        if self.labels:
            group.add_argument("--labels", metavar="CSV", default=None,
                               help="labels CSV (file,label) for --data; default: sub-folder names that are WNIDs "
                                    "or class indices (a numbered folder 01/ is read as class 1, said in a warning)")
            group.add_argument("--unlabelled", action="store_true",
                               help="the sub-folder names of --data are not classes (albums, dates): the images are "
                                    "unlabelled and scored by agreement with FP32 only")
        if self.preset:
            from trtlab.data.preprocess import PRESETS

            group.add_argument("--preset", metavar="NAME", default=None,
                               help=f"preprocessing preset: {', '.join(PRESETS)} (default: tf-lite)")
        if self.classifier:
            group.add_argument("--crop", type=int, metavar="PIXELS", default=None,
                               help="center-crop size (default: the model's input size)")
            group.add_argument("--resize", type=int, metavar="PIXELS", default=None,
                               help="short side before the crop (default: crop × 256/224, e.g. 342 for 299)")
            group.add_argument("--output", metavar="NAME", default=None,
                               help="the model output that holds the logits (default: its only output, or the only "
                                    "N×C output whose classes fit the labels)")
            group.add_argument("--background-class", metavar="WHERE", default=None,
                               help="first: output 0 is a background class (TensorFlow's 1001-class models), dropped "
                                    "before scoring; none: no background class (default: auto, from the labels)")

    def _default(self, text: str) -> str:
        return "" if self.required else f" (default: {text})"

    def parse(self, args):
        for dest in ("model", "data", "labels"):
            if given(args, dest):
                setattr(args, dest, Path(getattr(args, dest)))
        if self.labels and given(args, "labels") and self.data and not given(args, "data"):
            raise UserValueError(f"--labels {args.labels} was given without --data",
                                 "give --data FOLDER, the images the labels belong to (without --data the demo "
                                 "photos are used, with their own labels)")
        if self.labels and args.unlabelled:
            if given(args, "labels"):
                raise UserValueError(f"--unlabelled and --labels {args.labels} were both given",
                                     "give --labels CSV for labelled images, or --unlabelled for none")
            if self.data and not given(args, "data"):
                raise UserValueError("--unlabelled was given without --data",
                                     "give --data FOLDER, the images whose folder names are not classes")
        if self.preset:
            args.preset_given = given(args, "preset")
            args.preset = check_preset(args.preset) if args.preset_given else "tf-lite"
        if self.classifier:
            args.model_options = classifier_options(args)


def classifier_options(args) -> dict:
    """--crop/--resize/--output/--background-class, checked, as workflows.checks.checked_inputs takes them."""
    from trtlab.graph.classifier_view import BACKGROUND_CHOICES

    crop, resize = positive("--crop", args.crop), positive("--resize", args.resize)
    if crop is not None and resize is not None and resize < crop:
        raise UserValueError(f"--resize {resize} is smaller than --crop {crop}",
                             f"the short side is resized before the crop: give --resize ≥ {crop}")
    background = check_choice("--background-class", args.background_class or "auto", BACKGROUND_CHOICES,
                              "a background-class choice")
    if args.output is not None and not args.output.strip():
        raise UserValueError("--output is empty", "give the name of the model output that holds the logits")
    return {"crop": crop, "resize": resize, "output": args.output, "background_class": background,
            "folder_labels": not getattr(args, "unlabelled", False)}


def check_preset(name: str) -> str:
    from trtlab.data.preprocess import PRESETS, get_preprocess

    try:
        get_preprocess(name)
    except ValueError:
        raise UserValueError(f"--preset {name!r} is not a preprocessing preset",
                             f"use one of {', '.join(PRESETS)} (tf-lite: RGB (x-127)/128; torchvision: ImageNet "
                             f"mean/std)") from None
    return name


class CalibrationArgs(ArgGroup):
    """calibration: how the INT8 scales are found"""

    renamed = {"--algorithm": ("--algorithms", "use --algorithms NAME (a list where a command compares several)"),
               "--calibrator": ("--algorithms", "use --algorithms entropy or --algorithms minmax"),
               "--calib-images": ("--calibration-images", "use --calibration-images N"),
               "--calib-batch": ("--calibration-batch", "use --calibration-batch N")}

    def __init__(self, choices=None, default=("minmax", "entropy", "percentile"), many: bool = True,
                 percentile: bool = True, images_default: int | None = None, what: str = "trtlab's calibrators"):
        self.choices, self.default, self.many, self.percentile = choices, tuple(default), many, percentile
        self.images_default, self.what = images_default, what

    def _choices(self) -> tuple:
        if self.choices is not None:
            return tuple(self.choices)
        from trtlab.quantization.thresholds import ALGORITHMS

        return tuple(ALGORITHMS)

    def add_options(self, group):
        several = "; repeat or comma-separate" if self.many else " (one)"
        group.add_argument("--algorithms", action=Items, metavar="NAME", default=None,
                           help=f"{self.what}: {', '.join(self._choices())}{several} "
                                f"(default: {','.join(self.default)})")
        if self.percentile:
            group.add_argument("--percentile", type=float, metavar="P", default=None,
                               help="percent of |x| kept below the threshold for --algorithms percentile, "
                                    f"{PERCENTILE_FLOOR:g} < P ≤ 100 (default: 99.99)")
        images = (f"{self.images_default}" if self.images_default else
                  "the split's calibration set, at most 512")
        group.add_argument("--calibration-images", type=int, metavar="N", default=None,
                           help=f"images to calibrate on (default: {images})")
        group.add_argument("--calibration-batch", type=int, metavar="N", default=None,
                           help="images per calibration batch; the first batch sets every histogram's range, as "
                                "in TensorRT's entropy calibrator (default: 8)")

    def parse(self, args):
        choices = self._choices()
        args.calibration_given = any(given(args, d) for d in ("algorithms", "percentile", "calibration_images",
                                                              "calibration_batch"))
        args.algorithms_given = given(args, "algorithms")
        algorithms = tuple(dict.fromkeys(args.algorithms or self.default))  # a repeat named twice counts once
        for name in algorithms:
            if name not in choices:
                hint = f" ({name!r} is called {ALGORITHM_HINTS[name]} here)" if name in ALGORITHM_HINTS else ""
                raise UserValueError(f"--algorithms {name!r} is not one of {self.what}{hint}",
                                     f"choose from {', '.join(choices)}")
        if not self.many and len(algorithms) > 1:
            raise UserValueError(f"--algorithms {','.join(algorithms)}: this command takes one algorithm",
                                 f"give one of {', '.join(choices)} (`python -m trtlab calibrate` compares several)")
        args.algorithms = algorithms
        if self.percentile:
            args.percentile = check_percentile(args.percentile, algorithms)
        args.calibration_images = positive("--calibration-images", args.calibration_images)
        if args.calibration_images is None:
            args.calibration_images = self.images_default
        args.calibration_batch = positive("--calibration-batch", args.calibration_batch) or 8


def check_percentile(value: float | None, algorithms) -> float:
    """The percentile as a percent in (PERCENTILE_FLOOR, 100]; refused when no algorithm would use it."""
    if value is None:
        return 99.99
    if "percentile" not in algorithms:
        raise UserValueError(f"--percentile {value:g} was given but --algorithms {','.join(algorithms)} does not "
                             f"use it", "add percentile to --algorithms, or drop --percentile")
    if not math.isfinite(value) or not 0 < value <= 100:
        raise UserValueError(f"--percentile {value:g} is not a percent in (0, 100]",
                             "give the percent of |x| kept below the threshold, e.g. --percentile 99.99")
    if value <= PERCENTILE_FLOOR:
        meant = f"; did you mean {value * 100:g}?" if value <= 1 else ""
        raise UserValueError(f"--percentile {value:g} would clip more than half of every tensor's |x| (it is a "
                             f"percent, not a fraction{meant})",
                             f"give a percent above {PERCENTILE_FLOOR:g}, e.g. 99.9, 99.99 or 99.999")
    return value


class GuardArgs(ArgGroup):
    """guards: nodes kept out of INT8"""

    renamed = {"--guard": ("--guards", "use --guards G1,G2 (or --guards G1 --guards G2)")}

    def add_options(self, group):
        group.add_argument("--guards", action=Items, metavar="GUARD", default=None,
                           help=f"{GUARD_FORMS}; repeat or comma-separate")

    def parse(self, args):
        from trtlab.core.errors import UserError
        from trtlab.graph.guards import parse_guard

        guards = []
        for guard in args.guards or ():
            try:
                guards.append(parse_guard(guard))  # parsed once here: the commands pass Guard values on
            except ValueError as exc:  # one "— fix" clause: graph.guards' own (a UserError), else the forms
                reason = exc.what if isinstance(exc, UserError) else str(exc).split("; ")[0]
                fix = exc.fix if isinstance(exc, UserError) and exc.fix else f"use {GUARD_FORMS}"
                raise UserValueError(f"--guards: {reason}", fix) from None
        args.guards = tuple(guards)


class RecoveryArgs(ArgGroup):
    """recovery: INT8 accuracy won back without leaving INT8 (trtlab.quantization.recovery)"""

    def __init__(self, what: str, default=()):
        self.what, self.default = what, tuple(default)

    def add_options(self, group):
        from trtlab.quantization.recovery import METHODS

        shown = ",".join(self.default) or "none"
        group.add_argument("--recovery", action=Items, metavar="METHOD", default=None,
                           help=f"{', '.join(METHODS)}, or none; repeat or comma-separate: {self.what} "
                                f"(default: {shown})")

    def parse(self, args):
        from trtlab.quantization.recovery import resolve_methods

        try:
            args.recovery = self.default if args.recovery is None else resolve_methods(args.recovery)
        except UserValueError as exc:
            raise UserValueError(f"--recovery: {exc.what}", exc.fix) from None


class WorkspaceArgs(ArgGroup):
    """workspace: where trtlab keeps caches, variants and results"""

    def add_options(self, group):
        group.add_argument("--workspace", metavar="FOLDER", default=None,
                           help="default: $TRTLAB_WORKSPACE, /kaggle/working/trtlab-runs on Kaggle, else runs/ in "
                                "the trtlab checkout")

    def parse(self, args):
        args.workspace = Path(args.workspace) if given(args, "workspace") else None


FILE_SUFFIXES = (".html", ".htm", ".csv", ".json", ".png", ".md", ".txt")


class OutputArgs(ArgGroup):
    """output: where this command writes its files"""

    def __init__(self, writes: str, default: str):
        self.writes, self.default = writes, default

    def add_options(self, group):
        group.add_argument("--out", metavar="FOLDER", default=None,
                           help=f"a folder (created if missing) for {self.writes} (default: {self.default})")

    def parse(self, args):
        if not given(args, "out"):
            return
        out = Path(args.out)
        if out.suffix.lower() in FILE_SUFFIXES and not out.is_dir():
            raise UserValueError(f"--out {out} looks like a file name, but --out is a folder in every command "
                                 f"(it holds {self.writes})", f"give a folder, e.g. --out {out.with_suffix('')}")
        args.out = out


BACKENDS = ("auto", "ort", "trt", "torch", "gpu")


class BackendArgs(ArgGroup):
    """backend: what runs the model"""

    def __init__(self, backend: bool = True, batch_default: int | str = "auto"):
        self.backend, self.batch_default = backend, batch_default

    def add_options(self, group):
        if self.backend:
            group.add_argument("--backend", metavar="NAME", default=None,
                               help="auto (TensorRT for engines; the torch GPU backend wherever torch sees a GPU, "
                                    "TensorRT or not; else ONNX Runtime on the CPU, the literal reference "
                                    "— says which and why), ort, trt, or torch (alias gpu: ONNX graphs on the GPU "
                                    "with literal Q/DQ) (default: auto)")
        default = "auto: on a GPU what its free memory holds, up to 256; else 32" if self.batch_default == "auto" \
            else self.batch_default
        group.add_argument("--batch-size", type=int, metavar="N", default=None,
                           help=f"images per inference batch (default: {default})")

    def parse(self, args):
        if self.backend:
            backend = args.backend or "auto"
            if backend not in BACKENDS:
                raise UserValueError(f"--backend {backend!r} is not a backend",
                                     "use auto, ort (ONNX Runtime), trt (TensorRT) or torch (alias gpu: the torch "
                                     "GPU backend)")
            if backend in ("torch", "gpu"):
                import importlib.util

                if importlib.util.find_spec("torch") is None:
                    raise UserValueError(f"--backend {backend} needs torch, which is not installed here",
                                         "install torch (Kaggle has it), or use --backend ort")
                backend = "torch"
            args.backend = backend
        args.batch_size = positive("--batch-size", args.batch_size) or self.batch_default


def check_choice(flag: str, value: str, choices, what: str) -> str:
    """`value` when it is one of `choices`, else a one-line error naming them."""
    if value not in choices:
        raise UserValueError(f"{flag} {value!r} is not {what}", f"use one of {', '.join(choices)}")
    return value


class Command:
    """One command: its name, what it does, its argument groups (shared ones first, then its own)."""

    def __init__(self, name: str, summary: str, groups: list[ArgGroup], check_failed: str = "",
                 description: str | None = None):
        self.name, self.summary, self.groups, self.check_failed = name, summary, list(groups), check_failed
        self.description = description or summary

    @property
    def prog(self) -> str:
        return f"python -m trtlab {self.name}"

    def parser(self) -> Parser:
        parser = Parser(prog=self.prog, description=self.description,
                        epilog=exit_status_help(self.check_failed))
        for group in [*self.groups, GlobalArgs()]:
            group.add_to(parser)
        return parser

    def parse(self, argv) -> argparse.Namespace:
        """The typed, checked values of `argv` (UserError, one line, on the first bad one)."""
        args = self.parser().parse_args(list(argv))
        for group in [*self.groups, GlobalArgs()]:
            group.parse(args)
        return args


__all__ = ["ArgGroup", "BackendArgs", "CalibrationArgs", "Command", "GlobalArgs", "GuardArgs", "Items",
           "ModelDataArgs", "OutputArgs", "Parser", "Renamed", "UsageError", "WorkspaceArgs", "check_choice",
           "classifier_options",
           "check_percentile", "check_preset", "exit_status_help", "given", "positive"]
