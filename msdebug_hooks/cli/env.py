"""``msdebug env``: every MindSpore diagnostics variable set now, what it means, and what is wrong or ignored; whether
the installed MindSpore is one msdebug-hooks supports (2.7 to 2.10.x) and what differs in it from the newest.

Exit 0 when nothing is wrong, 1 when a variable is invalid, ignored by the installed MindSpore, or does not exist
(``GLOG_log_max``), or the installed MindSpore is not supported or cannot load here (a wheel for another platform);
2 on bad options.
"""
from __future__ import annotations

import argparse
import json
import os

from msdebug_hooks.cli import EXIT_FOUND, EXIT_OK


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "env", help="show the MindSpore diagnostics variables set now, and what is wrong or ignored",
        description="List every MindSpore diagnostics variable in the environment (dump, GLOG/logging, RDR, debugger, "
                    "rank), what it means, how the installed MindSpore treats it, and any problem: a value MindSpore "
                    "rejects at import, a setting it ignores (MS_RDR_* on 2.10), a name that does not exist "
                    "(GLOG_log_max), a dump file that is missing or invalid. Exit 0 all fine, 1 problems found.")
    parser.add_argument("--all", action="store_true",
                        help="also list the variables that are not set (the whole table)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from msdebug_hooks import _mindspore, mindspore_versions
    from msdebug_hooks.config.env import PROBLEM, VARIABLES, inspect_env

    version_text = _mindspore.installed_version_string()
    support, support_text = mindspore_versions.support()
    differences = mindspore_versions.differences() if version_text else []
    wheel = mindspore_versions.wheel_mismatch()
    reports = inspect_env(os.environ)
    problems = sum(1 for r in reports for f in r.findings if f.severity == PROBLEM)
    problems += (support == mindspore_versions.UNSUPPORTED) + (wheel is not None)
    set_names = {r.name for r in reports if r.is_set}
    if args.json:
        data = {
            "mindspore": version_text,
            "mindspore_support": {"status": support, "message": support_text, "differences": differences,
                                  "wheel_problem": wheel},
            "problems": problems,
            "variables": [{"name": r.name, "value": r.value if r.is_set else None,
                           "meaning": r.variable.meaning if r.variable else None,
                           "treatment": r.variable.treatment if r.variable else "unknown",
                           "findings": [{"severity": f.severity, "message": f.message} for f in r.findings]}
                          for r in reports],
        }
        if args.all:
            data["unset"] = [{"name": v.name, "meaning": v.meaning, "treatment": v.treatment}
                             for v in VARIABLES if v.name not in set_names]
        print(json.dumps(data, indent=2))
        return EXIT_FOUND if problems else EXIT_OK

    print(f"MindSpore {version_text or '(not installed)'}: {len(set_names)} diagnostics variable(s) set")
    print(f"    {'PROBLEM: ' if support == mindspore_versions.UNSUPPORTED else ''}{support_text}")
    if wheel:
        print(f"    PROBLEM: {wheel}")
    for line in differences:
        print(f"    differs from {'.'.join(map(str, mindspore_versions.NEWEST))}: {line}")
    for report in reports:
        treatment = report.variable.treatment if report.variable else "unknown"
        shown = f"{report.name}={report.value}" if report.is_set else f"{report.name} (not set)"
        print(f"\n{shown}    [{treatment}]")
        if report.variable:
            print(f"    {report.variable.meaning}")
            if report.variable.detail:
                print(f"    MindSpore: {report.variable.detail}")
        for finding in report.findings:
            print(f"    {finding.severity.upper()}: {finding.message}")
    if args.all:
        print("\nNot set:")
        for variable in VARIABLES:
            if variable.name not in set_names:
                print(f"  {variable.name:<38} {variable.meaning}  [{variable.treatment}]")
    print(f"\n{problems} problem(s)" if problems else "\nno problems")
    return EXIT_FOUND if problems else EXIT_OK
