"""`python -m trtlab dashboard`: the accuracy/consistency dashboard (HTML) from stored results."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from trtlab.core.workspace import workspace_dir
from trtlab.evaluation.results import ResultsStore
from trtlab.evaluation.stores import find_result_stores
from trtlab.views.dashboard import build_dashboard


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m trtlab dashboard",
        description="Write the accuracy/consistency dashboard (self-contained HTML) from stored results.")
    parser.add_argument("--workspace", default=None, help="workspace (default: $TRTLAB_WORKSPACE, "
                                                          "/kaggle/working/trtlab-runs on Kaggle, else runs/ in the trtlab checkout)")
    parser.add_argument("--store", action="append", default=None, help="results folder (default: the most "
                        "recently updated one under <workspace>/results); repeat to combine stores of one experiment "
                        "(results of different models or data are refused)")
    parser.add_argument("--focus", nargs="+", default=None, help="variants whose drift/flips/confusion figures are "
                        "drawn (default: all when ≤ 2 are compared, else the 2 least agreeing)")
    parser.add_argument("--all-pairs", action="store_true", help="significance for every pair of variants, not only "
                        "each against the reference")
    parser.add_argument("--variants", nargs="+", default=None, help="variants to show (default: all stored); "
                                                                     "space- or comma-separated")
    parser.add_argument("--reference", default=None, help="variant the others are compared with (default: fp32)")
    parser.add_argument("--out", default=None, help="HTML path (default: <workspace>/reports/<store>/dashboard.html)")
    parser.add_argument("--png", action="store_true", help="also write every figure as PNG beside the HTML")
    parser.add_argument("--image-root", default=None, help="folder the image ids are relative to (flips gallery "
                                                           "thumbnails when the decode cache is gone)")
    parser.add_argument("--list", action="store_true", help="list the result stores and their variants, then exit")
    return parser


def main(argv=None) -> int:
    args = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        if args.list:
            stores = find_result_stores(args.workspace)
            legacy = find_result_stores(args.workspace, legacy=True)
            if not stores and not legacy:
                print(f"no result stores under {workspace_dir(args.workspace) / 'results'}")
            for folder in stores:
                print(f"{folder}\n  {ResultsStore(folder).describe()}\n  variants: "
                      f"{', '.join(ResultsStore(folder).variants())}")
            for folder in legacy:
                print(f"{folder}\n  written by trtlab 0.1 without experiment identity: refused; rebuild it by "
                      f"re-running what made it, then delete the folder")
            return 0
        variants = [v for item in args.variants for v in item.split(",") if v] if args.variants else None
        dash = build_dashboard(args.store, variants, args.reference, image_root=args.image_root,
                               workspace=args.workspace, focus=args.focus, all_pairs=args.all_pairs)
        for note in dash.notes:
            print(f"- {note.replace('**', '')}")
        print(dash.display_table().to_string())
        path = dash.write_html(args.out)
        print(f"[trtlab] dashboard: {path}")
        if args.png:
            for png in dash.save_pngs(Path(path).parent):
                print(f"[trtlab] figure: {png}")
        return 0
    except (FileNotFoundError, KeyError, ValueError, PermissionError) as exc:
        from trtlab.core.errors import UserError

        if isinstance(exc, UserError):
            print(exc.line(), file=sys.stderr)
        else:
            message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
            what, _, fix = str(message).partition("; ")  # messages say what was wrong; then what to do
            print(f"error: {what} — {fix}" if fix else f"error: {what}", file=sys.stderr)
        return 2
