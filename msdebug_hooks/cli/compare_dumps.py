"""``msdebug compare-dumps A B``: compare two sync dumps of the same network; name the first operator that parts.

A is the run under test, B the reference (relative errors are against B). Operators are matched by full name, or,
where op ids moved, by scope, op type, execution order and shape. The report names the MindSpore version each dump
records; dumps of two versions (an upgrade whose loss changed) also pair the scopes the versions built from different
operators by what leaves them (docs/precision-comparison.md). Every matched output (and input) tensor gets
cosine, max/mean absolute error, max relative error, the shares within 0.1 %/0.5 % relative error, NaN/Inf
disagreement, |a-b|/|b| and a pass/warning/error verdict for its row. The first diverging operator is where the
difference appears: the first output beyond the noise floor of its dtype, then read against its inputs (a weight
that already differed is named as the root; docs/precision-comparison.md).

Exit 0: every pair compared, nothing beyond the noise; 1: an operator diverges; 2: bad input (not a dump, no common
iteration or rank, nothing compared, or some tensor could not be read: such a run is never reported as clean).

Example::

    msdebug compare-dumps /data/dump_new /data/dump_ref --iterations 4 --csv pairs.csv
"""
from __future__ import annotations

import argparse
import sys

from msdebug_hooks.errors import ConfigError, DumpError


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "compare-dumps", help="compare two MindSpore sync dumps tensor by tensor; name the first diverging operator",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dump_a", metavar="A", help="dump of the run under test (the dump config's path)")
    parser.add_argument("dump_b", metavar="B", help="dump of the reference run")
    parser.add_argument("--iterations", metavar="RANGE", help="e.g. 2-3, 0,5 or 1|4-6 (default: all in both)")
    parser.add_argument("--ranks", metavar="RANGE", help="ranks of A to compare (default: all in both)")
    parser.add_argument("--rank-b", type=int, metavar="R", help="compare the (single) rank of A with rank R of B")
    parser.add_argument("--rtol", type=float, help="relative tolerance of 'pass' (default 1e-4)")
    parser.add_argument("--atol", type=float, help="absolute tolerance of 'pass' (default 1e-4)")
    parser.add_argument("--diverge-at", choices=("warning", "error"), default="warning",
                        help="warning (default): the first output beyond the noise floor of its dtype diverges; "
                             "error: only an output whose row verdict is 'error' (e.g. fp16 against fp32)")
    parser.add_argument("--no-inputs", action="store_true", help="compare operator outputs only")
    parser.add_argument("--csv", metavar="FILE", help="write every pair to this CSV file")
    parser.add_argument("--json", metavar="FILE", help="write the whole result (every pair) to this JSON file")
    parser.add_argument("--limit", type=int, default=15, metavar="N",
                        help="print at most N diverging pairs (0: all; default 15)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(func=run)


def _short(name: str, width: int = 72) -> str:
    """Long scope names keep their informative end."""
    return name if len(name) <= width else "..." + name[-(width - 3):]


def _metric(value) -> str:
    return "-" if value is None else f"{value:.6g}"


def _print_divergence(div) -> None:
    print(f"first diverging operator (iteration {div.iteration}, rank {div.rank_a}"
          f"{'' if div.rank_a == div.rank_b else f' vs rank {div.rank_b}'}): {div.op_type} {div.node_a}")
    if div.node_b != div.node_a:
        print(f"  matched in B: {div.node_b}")
    print(f"  source A: {div.source_a or '(no user source line in the dump)'}")
    print(f"  source B: {div.source_b or '(no user source line in the dump)'}")
    for pair in div.outputs:
        c = pair.comparison
        print(f"  output {pair.slot}: |a-b|/|b| {_metric(c.relative_l2_error)} (noise floor {pair.floor():.0e}); "
              f"row verdict {c.verdict}: {c.reason}; cosine {_metric(c.cosine)}, max abs {_metric(c.max_abs_error)}, "
              f"max rel {_metric(c.max_rel_error)}")
    print(f"  {div.explanation()}")


def _print_versions(result) -> None:
    """Which MindSpore wrote each dump (from its .dump_metadata), and what is known to differ between the two."""
    a, b = (v or "unknown (the dump does not record it)" for v in (result.version_a, result.version_b))
    print(f"MindSpore: A {a}, B {b}")
    for note in result.version_notes:
        print(f"  across versions: {note}")


def _print_regrouped(result) -> None:
    regrouped = len(result.regrouped_a) + len(result.regrouped_b)
    if regrouped:
        print(f"regrouped: {len(result.regrouped_a)} operator(s) of A and {len(result.regrouped_b)} of B lie inside "
              f"scopes the two versions built from different operators, or among operators one dump computes "
              f"instead of the other's (replaced); each was compared by what leaves it")
        for label, names in (("A", result.regrouped_a), ("B", result.regrouped_b)):
            for name in names[:5]:
                print(f"  inside, {label}: {name}")
            if len(names) > 5:
                print(f"  ... {len(names) - 5} more in {label} (see --json)")


def run(args: argparse.Namespace) -> int:
    import dataclasses

    from msdebug_hooks.cli.check_dump import parse_range
    from msdebug_hooks.compare.dumps import DumpComparer
    from msdebug_hooks.compare.metrics import DEFAULT_TOLERANCE, PASS

    try:
        changes = {k: v for k, v in (("rtol", args.rtol), ("atol", args.atol)) if v is not None}
        tolerance = dataclasses.replace(DEFAULT_TOLERANCE, **changes)
    except ValueError as exc:
        print(f"msdebug compare-dumps: error: {exc}", file=sys.stderr)
        return 2
    try:
        comparer = DumpComparer(args.dump_a, args.dump_b, tolerance=tolerance,
                                iterations=parse_range(args.iterations, "--iterations"),
                                ranks=parse_range(args.ranks, "--ranks"), rank_b=args.rank_b,
                                inputs=not args.no_inputs, diverge_at=args.diverge_at)
        result = comparer.compare(progress=False if args.no_progress else None)
        if args.csv:
            result.write_csv(args.csv)
        if args.json:
            result.write_json(args.json)
    except (ConfigError, DumpError, OSError) as exc:
        print(f"msdebug compare-dumps: error: {exc}", file=sys.stderr)
        return 2
    counts = result.counts()
    iterations = sorted({p.iteration for p in result.pairs})
    _print_versions(result)
    print(f"compared {len(result.pairs)} tensor pairs (iterations {iterations}): "
          + ", ".join(f"{n} {verdict}" for verdict, n in counts.items()))
    _print_regrouped(result)
    if result.unmatched_a or result.unmatched_b:
        print(f"unmatched: {len(result.unmatched_a)} node(s) only in A, {len(result.unmatched_b)} only in B")
        for label, names in (("A", result.unmatched_a), ("B", result.unmatched_b)):
            for name in names[:5]:
                print(f"  only in {label}: {name}")
            if len(names) > 5:
                print(f"  ... {len(names) - 5} more only in {label} (see --json)")
    for div in result.divergences[:1]:
        _print_divergence(div)
    for div in result.divergences[1:]:
        print(f"first diverging operator at iteration {div.iteration}, rank {div.rank_a}: {div.node_a}")
    diverging = [p for p in result.pairs if p.comparison.verdict != PASS]
    shown = diverging[: args.limit] if args.limit > 0 else diverging
    if shown:
        print(f"pairs that did not pass ({len(diverging)}; in execution order):")
        rows = [("iter", "node", "io", "slot", "verdict", "cosine", "max rel", "reason")]
        rows += [(str(p.iteration), _short(p.node_a), p.io, str(p.slot), p.comparison.verdict,
                  _metric(p.comparison.cosine), _metric(p.comparison.max_rel_error), p.comparison.reason)
                 for p in shown]
        widths = [max(len(row[col]) for row in rows) for col in range(len(rows[0]))]
        for row in rows:
            print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
        if len(shown) < len(diverging):
            print(f"... {len(diverging) - len(shown)} more (--limit 0, --csv or --json)")
    code = result.exit_code()
    if code == 2:
        reason = ("nothing was compared" if not result.compared else
                  f"{counts['not comparable']} pair(s) could not be compared")
        print(f"msdebug compare-dumps: error: {reason}: the dumps are not shown to agree", file=sys.stderr)
    elif code == 0:
        worst = max((p.error() for p in result.pairs if p.comparison.comparable), default=0.0)
        print(f"no operator differs beyond the noise of its dtype (largest |a-b|/|b|: {worst:.1e})")
    if args.csv:
        print(f"pairs: {args.csv}")
    if args.json:
        print(f"result: {args.json}")
    return code
