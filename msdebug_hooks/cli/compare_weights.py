"""``msdebug compare-weights A B``: converted weights checked against their source.

A and B are each a MindSpore ``.ckpt`` or a PyTorch ``.pth``/``.pt`` (any combination; PyTorch is needed for
``.pth``: ``pip install "msdebug-hooks[torch]"``). Names are matched through the built-in MindSpore <-> PyTorch
map (BatchNorm gamma/beta/moving_mean/moving_variance <-> weight/bias/running_mean/running_var, Embedding
embedding_table <-> weight, ...) and the --mapping file (A name -> B name). Each problem gets its own line:
MISSING, EXTRA, RENAMED (with the closest name), SHAPE, TRANSPOSED, DTYPE, VALUES.
Exit 0: every weight matches; 1: a problem found; 2: bad input (missing or unreadable file, PyTorch missing).

Example::

    msdebug compare-weights model.pth model.ckpt
"""
from __future__ import annotations

import argparse

from msdebug_hooks.cli._report import print_report
from msdebug_hooks.errors import ConfigError


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "compare-weights", help="check converted weights (.pth <-> .ckpt) by name, shape, layout and value",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("a", metavar="A", help="source weights (.pth/.pt or .ckpt)")
    parser.add_argument("b", metavar="B", help="converted weights (.ckpt or .pth/.pt)")
    parser.add_argument("--mapping", metavar="FILE", help="name mapping (JSON object or 'a_name b_name' lines)")
    parser.add_argument("--rtol", type=float, default=1e-6, help="relative tolerance of equal values (1e-6)")
    parser.add_argument("--atol", type=float, default=1e-8, help="absolute tolerance of equal values (1e-8)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from msdebug_hooks.compare.naming import load_name_mapping
    from msdebug_hooks.compare.weights import compare_weights

    for field_name, value in (("--rtol", args.rtol), ("--atol", args.atol)):
        if not value >= 0:
            raise ConfigError(field_name, value, "a number >= 0")
    mapping = load_name_mapping(args.mapping) if args.mapping else None
    report = compare_weights(args.a, args.b, mapping=mapping, rtol=args.rtol, atol=args.atol)
    return print_report(report, args.json)
