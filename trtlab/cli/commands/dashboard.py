"""`python -m trtlab dashboard`: the accuracy/consistency dashboard (HTML) from stored results."""
from __future__ import annotations

from pathlib import Path

from trtlab.cli.args import ArgGroup, Command, Items, OutputArgs, WorkspaceArgs
from trtlab.cli.main import command_main
from trtlab.core.errors import UserError, UserValueError

HTML_NAME = "dashboard.html"


class DashboardArgs(ArgGroup):
    """dashboard: which results and how they are compared"""

    def add_options(self, group):
        group.add_argument("--store", action="append", metavar="FOLDER", default=None,
                           help="results folder (default: the most recently updated one under <workspace>/results); "
                                "repeat to combine stores of one experiment (results of different models or data "
                                "are refused)")
        group.add_argument("--variants", nargs="+", action=Items, metavar="VARIANT", default=None,
                           help="variants to show (default: all stored); space- or comma-separated, or repeated")
        group.add_argument("--reference", metavar="VARIANT", default=None,
                           help="variant the others are compared with (default: fp32)")
        group.add_argument("--focus", nargs="+", action=Items, metavar="VARIANT", default=None,
                           help="variants whose drift/flips/confusion figures are drawn (default: all when ≤ 2 are "
                                "compared, else the 2 least agreeing); space- or comma-separated, or repeated")
        group.add_argument("--all-pairs", action="store_true", help="significance for every pair of variants, not "
                                                                    "only each against the reference")
        group.add_argument("--allow-mixed-backends", action="store_true",
                           help="compare variants evaluated on different backends (e.g. ort-cpu and torch-cuda); "
                                "refused otherwise, since their float summation orders differ")
        group.add_argument("--png", action="store_true", help="also write every figure as PNG beside the HTML")
        group.add_argument("--image-root", metavar="FOLDER", default=None,
                           help="folder the image ids are relative to (flips gallery thumbnails when the decode "
                                "cache is gone)")
        group.add_argument("--list", action="store_true", help="list the result stores and their variants, then exit")


COMMAND = Command("dashboard", "write the accuracy/consistency dashboard (self-contained HTML) from stored results",
                  [WorkspaceArgs(), OutputArgs(f"{HTML_NAME} and, with --png, the figures",
                                               "<workspace>/reports/<store>/"), DashboardArgs()])
main = command_main(COMMAND.name)


def _list_stores(workspace) -> int:
    from trtlab.core.workspace import workspace_dir
    from trtlab.evaluation.results import ResultsStore
    from trtlab.evaluation.stores import find_result_stores

    stores = find_result_stores(workspace)
    legacy = find_result_stores(workspace, legacy=True)
    if not stores and not legacy:
        print(f"no result stores under {workspace_dir(workspace) / 'results'}")
    for folder in stores:
        print(f"{folder}\n  {ResultsStore(folder).describe()}\n  variants: {', '.join(ResultsStore(folder).variants())}")
    for folder in legacy:
        print(f"{folder}\n  written by trtlab 0.1 without experiment identity: refused; rebuild it by re-running "
              f"what made it, then delete the folder")
    return 0


def _user_error(exc: Exception) -> UserError:
    """views.dashboard says what was wrong as "<what>; <what to do>" in plain FileNotFoundError / KeyError /
    ValueError; the CLI shows them as the one-line error they are."""
    message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
    what, _, fix = str(message).partition("; ")
    return UserValueError(what, fix or "see `python -m trtlab dashboard --list`")


def run(args) -> int:
    from trtlab.views.dashboard import build_dashboard
    from trtlab.workflows.checks import check_inputs

    check_inputs(workspace=args.workspace, outputs=[args.out] if args.out else ())
    if args.list:
        return _list_stores(args.workspace)
    try:
        dash = build_dashboard(args.store, args.variants, args.reference, image_root=args.image_root,
                               workspace=args.workspace, focus=args.focus, all_pairs=args.all_pairs,
                               allow_mixed_backends=args.allow_mixed_backends)
    except UserError:
        raise
    except (FileNotFoundError, KeyError, ValueError) as exc:
        raise _user_error(exc) from exc
    for note in dash.notes:
        print(f"- {note.replace('**', '')}")
    print(dash.display_table().to_string())
    path = dash.write_html(args.out / HTML_NAME if args.out else None)
    print(f"[trtlab] dashboard: {path}")
    if args.png:
        for png in dash.save_pngs(Path(path).parent):
            print(f"[trtlab] figure: {png}")
    return 0
