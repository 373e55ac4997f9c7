"""Command line: ``python -m trtlab.env {discover,repair,setup,load,doctor,notebook-deps}`` and ``python -m trtlab
doctor``.

Runs on the standard library alone (``setup_kaggle_env.sh`` calls ``setup`` on a half-installed machine).
Exit status: 0 done; 1 TensorRT not found / not loadable (``discover``, ``load``, ``doctor --strict``); 2 a
refusal or a usage error (one ``error:`` line: a mixed library set, a destination inside the input, no space).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from trtlab.core.errors import EXIT_USER_ERROR, UserError, report
from trtlab.env.candidates import Candidate
from trtlab.env.discovery import best_candidate, discover, no_tensorrt_message
from trtlab.env.loading import load
from trtlab.env.notebook_install import complete_install
from trtlab.env.repairing import RepairResult, repair
from trtlab.env.report import collect_report


def doctor_main(argv: list[str] | None = None) -> int:
    """``python -m trtlab doctor [--root PATH ...] [--json] [--strict]``: print the environment report.

    Exit status 0 even without TensorRT (the workbench runs on ONNX Runtime); with ``--strict``, 1 when
    TensorRT is not usable. 2 for a usage error (argparse).
    """
    parser = argparse.ArgumentParser(prog="python -m trtlab doctor", description="GPU / CUDA / TensorRT / ORT report",
                                     allow_abbrev=False)
    parser.add_argument("--root", action="append", default=None, help="folder to search for TensorRT (repeatable)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    parser.add_argument("--strict", action="store_true", help="exit 1 when TensorRT is not usable")
    args = parser.parse_args(argv)
    return doctor(args.root, args.json, args.strict)


def doctor(roots=None, as_json: bool = False, strict: bool = False) -> int:
    """Print the environment report (a table and the verdicts, or JSON); the exit status of `doctor`."""
    report = collect_report(roots=roots)
    if as_json:
        print(json.dumps(report.to_dict(), indent=1))
    else:
        print(report.format_table())
        print()
        print(report.summary(color=sys.stdout.isatty()))
    if not report.ort_ready and not report.trt_ready:
        return 1
    return 1 if strict and not report.trt_ready else 0


def _print_candidates(cands: list[Candidate]) -> None:
    if not cands:
        print(no_tensorrt_message(cands))
    for c in cands:
        state = "healthy" if c.healthy else ("mixed" if c.version_mix else "fixable" if c.usable else "broken")
        print(f"{c.source:6} {c.version or '?':12} {state:8} {c.lib_dir}")
        for key, comp in c.components.items():
            print(f"         {key:30} {comp.best.name if comp.best else '—'}")
        for p in c.problems:
            print(f"         problem: {p}")
        for n in c.notes:
            print(f"         note: {n}")
        for w in c.wheels:
            print(f"         wheel: {w}")


def _check_in_fresh_process(lib_dir: str) -> str:
    """Preload ``lib_dir`` in a new interpreter without LD_LIBRARY_PATH: proves the copies load on their own."""
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    package_root = str(Path(__file__).resolve().parents[2])  # this trtlab, installed or not
    env["PYTHONPATH"] = package_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    try:
        proc = subprocess.run([sys.executable, "-m", "trtlab.env", "load", "--lib-dir", lib_dir, "--no-import"],
                              capture_output=True, text=True, timeout=300, env=env)
    except subprocess.SubprocessError as exc:
        return f"could not run the check ({exc})"
    return (proc.stdout.strip() or proc.stderr.strip() or "(no output)").splitlines()[-1]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m trtlab.env", description="find, repair and load TensorRT "
                                     "libraries (standard library only)", allow_abbrev=False)
    sub = parser.add_subparsers(dest="command", required=True)

    def roots(p):
        p.add_argument("--root", action="append", default=None, help="folder to search (default /kaggle/input)")
        p.add_argument("--json", action="store_true")

    roots(sub.add_parser("discover", help="list TensorRT candidates and their problems", allow_abbrev=False))
    for name in ("repair", "setup"):
        p = sub.add_parser(name, help="discover, copy the libraries into DEST, write env.sh, install bindings",
                           allow_abbrev=False)
        roots(p)
        p.add_argument("--dest", default=None, help="writable folder for the libraries and env.sh "
                                                    "(default <workspace>/lib, env.sh in <workspace>)")
        p.add_argument("--no-bindings", action="store_true", help="do not pip install the bindings wheel")
        p.add_argument("--bindings-target", default=None, help="pip --target folder for the bindings")
        p.add_argument("--force", action="store_true", help="copy even a healthy pip/system install")
    p = sub.add_parser("load", help="preload a library folder into this process (a check in a fresh Python)",
                       allow_abbrev=False)
    p.add_argument("--lib-dir", required=True)
    p.add_argument("--no-import", action="store_true")
    p.add_argument("--json", action="store_true")
    sub.add_parser("doctor", help="environment report (see python -m trtlab doctor --help)")
    p = sub.add_parser("notebook-deps", help="install what trtlab and its notebooks need that this Python lacks "
                       "(the demo's packages included), replacing nothing installed; one line says what",
                       allow_abbrev=False)
    p.add_argument("--wheels", default=None, help="a folder of wheels to install from, without an index")
    return parser


def _repair_command(args) -> int:
    cands = discover(args.root)
    if not args.json and cands:
        _print_candidates(cands)
    result: RepairResult = repair(cands, args.dest, bindings=not args.no_bindings,
                                  bindings_target=args.bindings_target, force=args.force)
    if args.json:
        print(json.dumps({"ok": result.ok, "lib_dir": result.lib_dir, "env_sh": result.env_sh, "error": result.error,
                          "env_note": result.env_note, "actions": result.actions, "fixed": result.fixed,
                          "bindings": result.bindings}, indent=1))
    elif result.error:
        print(f"error: repair: {result.error}", file=sys.stderr)
    else:
        print(result.summary())
    if result.ok and args.command == "setup" and not args.json:
        print(f"check in a fresh Python (no LD_LIBRARY_PATH): {_check_in_fresh_process(result.lib_dir)}")
        print(f"\nNow run:  source {result.env_sh}")
    return 0 if result.ok else EXIT_USER_ERROR


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "doctor":
        return doctor_main(argv[1:])
    args = _parser().parse_args(argv)
    if args.command == "discover":
        cands = discover(args.root)
        if args.json:
            print(json.dumps([c.to_dict() for c in cands], indent=1))
        else:
            _print_candidates(cands)
        return 0 if best_candidate(cands) else 1
    if args.command in ("repair", "setup"):
        return _repair_command(args)
    if args.command == "notebook-deps":
        try:
            print(complete_install(wheels=args.wheels))
        except UserError as exc:
            return report(exc)
        return 0
    res = load(args.lib_dir, import_tensorrt=not args.no_import)
    if args.json:
        print(json.dumps({"ok": res.ok, "loaded": res.loaded, "failed": res.failed,
                          "tensorrt": res.tensorrt, "message": res.message}, indent=1))
    else:
        print(res.message)
    return 0 if res.ok else 1
