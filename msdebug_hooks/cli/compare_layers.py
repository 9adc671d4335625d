"""``msdebug compare-layers A B``: two layer captures (MindSpore or PyTorch on either side), layer by layer.

Layers are matched by the user's mapping, then by name through the built-in MindSpore <-> PyTorch map, then by
order and shape; every pair gets the comparison metrics and a pass/warning/error verdict (A is the run under test,
B the reference). The first layer, in execution order, whose output diverges is named; unmatched layers are listed.
Exit 0: every pair passes (warnings too, unless --strict) and every record has a partner; 1: a divergence, a pair
that could not be compared, or a record in one capture only; 2: bad input (not a capture, unknown step, bad mapping
file).

Example::

    msdebug compare-layers capture_ms capture_torch --step 1 --csv layers.csv
"""
from __future__ import annotations

import argparse
import dataclasses

from msdebug_hooks.cli._report import print_report
from msdebug_hooks.errors import ConfigError

_KIND_CHOICES = {"forward": ("forward-output",), "gradients": ("parameter-gradient",), "parameters": ("parameter",),
                 "all": ("forward-output", "parameter-gradient", "parameter")}


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "compare-layers", help="compare two layer captures (MindSpore / PyTorch) and name the first diverging layer",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("a", metavar="A", help="capture directory of the run under test")
    parser.add_argument("b", metavar="B", help="capture directory of the reference run")
    parser.add_argument("--step", type=int, default=None, help="step to compare in both (default: A's first)")
    parser.add_argument("--step-b", type=int, default=None, help="B's step when it differs from --step")
    parser.add_argument("--mapping", metavar="FILE", help="name mapping (JSON object or 'a_name b_name' lines)")
    parser.add_argument("--kinds", choices=sorted(_KIND_CHOICES), default="all",
                        help="what to compare: forward outputs, parameter gradients, parameters, or all (default)")
    parser.add_argument("--rtol", type=float, default=None, help="relative tolerance of 'pass' (default 1e-4)")
    parser.add_argument("--atol", type=float, default=None, help="absolute tolerance of 'pass' (default 1e-4)")
    parser.add_argument("--strict", action="store_true", help="a warning verdict counts as divergence too")
    parser.add_argument("--csv", metavar="FILE", help="write every pair to FILE as CSV")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from msdebug_hooks._files import atomic_write_text
    from msdebug_hooks.compare.layers import compare_layers
    from msdebug_hooks.compare.metrics import DEFAULT_TOLERANCE
    from msdebug_hooks.compare.naming import load_name_mapping

    changes = {k: v for k, v in (("rtol", args.rtol), ("atol", args.atol)) if v is not None}
    try:
        tolerance = dataclasses.replace(DEFAULT_TOLERANCE, **changes)
    except ValueError as exc:
        raise ConfigError("--rtol/--atol", changes, "finite numbers >= 0", detail=str(exc)) from None
    mapping = load_name_mapping(args.mapping) if args.mapping else None
    report = compare_layers(args.a, args.b, step_a=args.step, step_b=args.step_b, mapping=mapping,
                            tolerance=tolerance, kinds=_KIND_CHOICES[args.kinds], warnings_diverge=args.strict)
    if args.csv:
        atomic_write_text(args.csv, report.to_csv(), mode=0o644)
    return print_report(report, args.json)

