"""``msdebug ckpt-diff A B`` and ``msdebug ckpt-scan F``: the docs' checkpoint checks as commands.

Exit codes (shared by both): 0 as expected; 1 found something --
``ckpt-diff``: a compared parameter did not change (or, with ``--expect-unchanged``, did change), a change ratio above
``--max-update-ratio``, NaN/Inf in either file, a parameter in one file only, or a shape/dtype mismatch;
``ckpt-scan``: a parameter holds NaN/Inf --; 2 bad input (missing or unreadable file, bad option).
"""
from __future__ import annotations

import argparse
import json
import sys

from msdebug_hooks.cli import EXIT_FOUND, EXIT_OK
from msdebug_hooks.cli._report import strict_json


def register(subparsers: argparse._SubParsersAction) -> None:
    diff = subparsers.add_parser(
        "ckpt-diff", help="which parameters changed between two checkpoints, and by how much",
        description="Compare checkpoint A (earlier) with B (later). Exit 0 when every compared parameter changed "
                    "(or, with --expect-unchanged, none did), 1 when something contradicts that or the files "
                    "differ in names/shapes/dtypes or hold NaN/Inf, 2 on bad input. 0-d parameters (optimizer "
                    "hyper-parameters such as learning_rate) are not compared unless --include-scalars.")
    diff.add_argument("a", help="earlier .ckpt file")
    diff.add_argument("b", help="later .ckpt file")
    diff.add_argument("--rtol", type=float, default=1e-5, help="relative tolerance of 'unchanged' (default 1e-5)")
    diff.add_argument("--atol", type=float, default=1e-8, help="absolute tolerance of 'unchanged' (default 1e-8)")
    diff.add_argument("--max-update-ratio", type=float, default=None,
                      help="flag parameters whose mean|B-A|/mean|A| exceeds this (e.g. 0.1)")
    diff.add_argument("--only", default=None, help="regular expression: compare only matching names")
    diff.add_argument("--exclude", default=None, help="regular expression: skip matching names")
    diff.add_argument("--include-scalars", action="store_true", help="also compare 0-d parameters")
    diff.add_argument("--expect-unchanged", action="store_true",
                      help="expect no change (e.g. a frozen layer, or a copy): exit 1 when something changed")
    diff.add_argument("--json", action="store_true", help="print the report as JSON")
    diff.set_defaults(func=_diff)

    scan = subparsers.add_parser(
        "ckpt-scan", help="find parameters holding NaN/Inf in a checkpoint",
        description="List the parameters of F that hold NaN or Inf, with counts. Exit 0 clean, 1 NaN/Inf found, "
                    "2 bad input.")
    scan.add_argument("file", help=".ckpt file")
    scan.add_argument("--json", action="store_true", help="print the report as JSON")
    scan.set_defaults(func=_scan)


def _diff(args: argparse.Namespace) -> int:
    from msdebug_hooks.ckpt import compare_checkpoints

    report = compare_checkpoints(args.a, args.b, rtol=args.rtol, atol=args.atol,
                                 max_update_ratio=args.max_update_ratio, only=args.only, exclude=args.exclude,
                                 include_scalars=args.include_scalars)
    problems = report.problems(expect_unchanged=args.expect_unchanged)
    if args.json:
        data = report.to_dict()
        data["problems"] = problems
        print(json.dumps(strict_json(data), indent=2, allow_nan=False))
    else:
        print(report.format())
        for line in problems:
            print(f"PROBLEM: {line}", file=sys.stderr)
    return EXIT_FOUND if problems else EXIT_OK


def _scan(args: argparse.Namespace) -> int:
    from msdebug_hooks.ckpt import scan_checkpoint

    report = scan_checkpoint(args.file)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(report.format())
    return EXIT_OK if report.ok else EXIT_FOUND
