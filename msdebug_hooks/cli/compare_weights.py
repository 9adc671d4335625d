"""``msdebug compare-weights A B``: converted weights checked against their source.

A and B are each a MindSpore ``.ckpt`` or a PyTorch ``.pth``/``.pt`` (any combination; PyTorch is needed for
``.pth``: ``pip install "msdebug-hooks[torch]"``). Tensors are paired by the --mapping file (exact pairs, then rules
such as ``layers.* -> blocks.*``), then by name through the built-in MindSpore <-> PyTorch map (BatchNorm
gamma/beta/moving_mean/moving_variance <-> weight/bias/running_mean/running_var, Embedding embedding_table <->
weight, ...), then -- where the port named its modules differently -- by equal values and the pattern of the
names; those pairs are ok, and the report suggests the mapping rules that would pair them by name. Each problem
gets its own line: MISSING, EXTRA, RENAMED, SHAPE, TRANSPOSED (square weights too), SWAPPED (A's q is B's k and
A's k is B's q), DTYPE, VALUES.
Exit 0: every weight matches; 1: a problem found; 2: bad input (missing or unreadable file, a bad mapping line or
rule -- named with its file and line --, PyTorch missing).

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
    parser.add_argument("--mapping", metavar="FILE", help="name mapping: JSON object or 'a_name b_name' lines; "
                        "'layers.* -> blocks.*' is a rule ('*': one or more name parts)")
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
