"""``msdebug check-dump DUMP_DIR --watch ... [--select ...]``: check watchpoints over a sync dump, list the hits.

A check that could not look never reads as clean: a selection that matches nothing is an error, tensors that could
not be read are counted, listed and change the exit code, and what the dump lacks (``graphs/``,
``execution_order/``) is said before the results.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import warnings
from typing import Optional

from msdebug_hooks.cli import EXIT_BAD_INPUT
from msdebug_hooks.errors import ConfigError

_SELECT_KINDS = ("node_name", "code_stack")
EXIT_INCOMPLETE = 3      # no hit, but some selected tensors could not be read: not a clean result
_DESCRIPTION = """\
Check watchpoints over a MindSpore sync dump and list the hits, ordered by iteration, then execution order, so the
operator that first produced a NaN is on the first row.

A weight_*, gradient_* or activation_* condition checks only weights (parameters), gradients (the Gradients/ scope)
or activations (outputs of ReLU, Sigmoid, Softmax, GeLU ... outside Gradients/), as MindInsight's UI selects them;
tensor_* conditions check every selected tensor. Hits are reported under the name given to --watch.

exit codes:
  0  every selected tensor was read and none hit
  1  hits (tensors that could not be read are listed too)
  2  bad input: not a dump, unknown condition or parameter, bad range, or nothing to check (a --select,
     --iterations or --ranks that matches no dumped tensor)
  3  no hit, but N tensors could not be checked (file missing, truncated or unreadable): not a clean result

example:
  msdebug check-dump /tmp/dump --watch tensor_overflow --watch "tensor_too_large:abs_mean_gt=1e3" \\
      --select "code_stack=lenet.py:79" --iterations 1-2
"""


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not allowed: a whole number >= 0 (0 shows every hit)")
    return value


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "check-dump", help="check watchpoints over a MindSpore sync dump and list the hits",
        description=_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dump_dir", metavar="DUMP_DIR", help="the dump config's path (holds rank_<id>/)")
    parser.add_argument("--watch", action="append", default=[], metavar="NAME[:PARAM=VALUE,...]",
                        help="a watchpoint, e.g. tensor_overflow or tensor_too_large:abs_mean_gt=1e3 (repeatable); "
                             "NAME is a MindInsight UI id (tensor_too_large, weight_change_too_small, ...), a "
                             "protocol name or an API name")
    parser.add_argument("--select", action="append", default=[], metavar="KIND=QUERY",
                        help="tensors to check: node_name=TEXT, node_name=regex:PATTERN, code_stack=FILE:LINE "
                             "(repeatable, union; default: every dumped tensor)")
    parser.add_argument("--iterations", metavar="RANGE", help="e.g. 2-3, 0,5 or 1|4-6 (default: all)")
    parser.add_argument("--ranks", metavar="RANGE", help="e.g. 0 or 0-3 (default: all)")
    parser.add_argument("--error-on-no-value", action="store_true",
                        help="list each selected tensor that has no file as a row (they are always counted)")
    parser.add_argument("--limit", type=_non_negative_int, default=0, metavar="N",
                        help="print at most N hits (0: all)")
    parser.add_argument("--json", action="store_true", help="print the hits as JSON")
    parser.set_defaults(func=run)


def parse_range(text: Optional[str], field: str) -> Optional[list[int]]:
    """``"2-3"``, ``"0,5"``, ``"1|4-6"`` -> sorted ints; ``None`` stays ``None``."""
    if text is None:
        return None
    values: set[int] = set()
    for part in re.split(r"[,|]", text.strip()):
        match = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if not match:
            raise ConfigError(field, text, "non-negative ints and ranges like 2-3, 0,5 or 1|4-6")
        if match[2] is not None and int(match[2]) < int(match[1]):
            raise ConfigError(field, text, "ranges from low to high like 2-3, 0,5 or 1|4-6",
                              detail=f"{part.strip()} is reversed: {match[2]}-{match[1]}")
        start = int(match[1])
        values.update(range(start, int(match[2] or start) + 1))
    return sorted(values)


def parse_select(spec: str) -> tuple[str, str, bool]:
    """``"code_stack=lenet.py:49"`` -> ``("code_stack", "lenet.py:49", False)``; ``node_name=regex:...`` -> regex."""
    kind, eq, query = spec.partition("=")
    kind = kind.strip()
    if not eq or kind not in _SELECT_KINDS or not query:
        raise ConfigError("--select", spec, "node_name=TEXT, node_name=regex:PATTERN or code_stack=FILE:LINE")
    use_regex = query.startswith("regex:")
    return kind, query[len("regex:"):] if use_regex else query, use_regex


def _detail(hit) -> str:
    if hit.error_code:
        return "; ".join(hit.error_msg)
    parts = [f"{p.name}={p.actual_value:.6g} (set {p.value})" for p in hit.params
             if p.hit and isinstance(p.actual_value, (int, float))]
    return ", ".join(parts) or "hit"


def _source(hit) -> str:
    frames = hit.tensor.node.source_lines()
    return f"{frames[-1]['file_path'].rsplit('/', 1)[-1]}:{frames[-1]['line_no']}" if frames else ""


# MindSpore's collective communication operators: a NaN/Inf first seen in their output came from another rank
_COMMUNICATION_OPS = frozenset({"AllReduce", "AllGather", "ReduceScatter", "Broadcast", "AlltoAll", "AllToAll",
                                "AlltoAllV", "Send", "Receive", "NeighborExchange", "NeighborExchangeV2",
                                "CollectiveScatter", "CollectiveGather", "MicroStepAllGather", "BatchISendIRecv"})


def is_communication(hit) -> bool:
    """True if the hit is in the output of a collective operator (its values arrived from other ranks)."""
    node = hit.tensor.node
    op_type = getattr(node, "op_type", "") or ""
    return op_type in _COMMUNICATION_OPS or op_type.startswith("DistComm")


def first_hits_by_rank(hits) -> dict:
    """The first hit of each rank (hits are ordered by iteration, rank, then execution order)."""
    first: dict = {}
    for hit in hits:
        first.setdefault(hit.tensor.rank, hit)
    return dict(sorted(first.items()))


# the op types MindInsight's UI counts as activations (its node type identifier)
_ACTIVATION_TYPES = frozenset({"elu", "fastgelu", "gelu", "hsigmoid", "hswish", "leakyrelu", "logsigmoid",
                               "logsoftmax", "prelu", "relu", "relu6", "reluv2", "sigmoid", "softmax", "tanh"})


def _targets(spec: str) -> tuple[str, str]:
    """``"weight_overflow:..."`` -> (the name as typed, which tensors it checks: weight, gradient, activation,
    tensor)."""
    from msdebug_hooks.conditions.protocol import UI_CONDITIONS

    name = spec.partition(":")[0].strip()
    ui = UI_CONDITIONS.get(name)
    return name, ui.target if ui else "tensor"


def _is_target(tensor, target: str) -> bool:
    node = tensor.node
    if target == "weight":
        return bool(node._info.is_weight)
    gradient = node.name.startswith("Gradients/")
    if target == "gradient":
        return gradient
    if target == "activation":
        return node.node_type == "operator" and not gradient and node.op_type.lower() in _ACTIVATION_TYPES
    return True


def _select(analyzer, selects, iterations, ranks) -> dict:
    """Every tensor the --select options find (union, in order); a --select that finds nothing is said."""
    tensors: dict = {}
    for kind, query, use_regex in selects or [("node_name", "", False)]:
        found = analyzer.select_tensors(query, use_regex=use_regex, select_by=kind, iterations=iterations,
                                        ranks=ranks)
        if not found and len(selects) > 1:
            shown = f"{kind}={'regex:' if use_regex else ''}{query}"
            print(f"msdebug check-dump: warning: --select {shown} matches no dumped tensor", file=sys.stderr)
        for tensor in found:
            tensors[tensor] = None
    return tensors


def run(args: argparse.Namespace) -> int:
    from msdebug_hooks.conditions import parse_condition
    from msdebug_hooks.dump.analyzer import DumpAnalyzer, Watchpoint
    from msdebug_hooks.conditions.error_codes import ERROR_NO_VALUE, ERROR_UNREADABLE

    if not args.watch:
        raise ConfigError("--watch", None,
                          "at least one --watch NAME[:PARAM=VALUE,...], e.g. --watch tensor_overflow")
    conditions = [parse_condition(spec) for spec in args.watch]
    labels = [_targets(spec) for spec in args.watch]
    selects = [parse_select(spec) for spec in args.select]
    iterations = parse_range(args.iterations, "--iterations")
    ranks = parse_range(args.ranks, "--ranks")
    analyzer = DumpAnalyzer(args.dump_dir)
    for note in analyzer.layout_warnings():
        print(f"msdebug check-dump: warning: {note}", file=sys.stderr)
    with warnings.catch_warnings():   # what the dump lacks was said above, once
        warnings.simplefilter("ignore")
        tensors = _select(analyzer, selects, iterations, ranks)
    watchpoints = [Watchpoint([t for t in tensors if _is_target(t, target)], condition)
                   for condition, (_, target) in zip(conditions, labels)]
    checked = {t for w in watchpoints for t in w.tensors}
    if not checked:   # a check that looked at nothing must not read as clean
        print(f"msdebug check-dump: error: nothing was checked: {_nothing_because(args, tensors, labels)}",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    label_of = {id(w): name for w, (name, _) in zip(watchpoints, labels)}
    found = analyzer.check_watchpoints(watchpoints, error_on_no_value=True)
    missing = [h for h in found if h.error_code == ERROR_NO_VALUE]
    unreadable = [h for h in found if h.error_code & ERROR_UNREADABLE]
    hits = [h for h in found if not h.error_code & (ERROR_NO_VALUE | ERROR_UNREADABLE)]
    not_checked = {h.tensor for h in missing + unreadable}
    why = _why(missing, unreadable, args.error_on_no_value)
    rows = [h for h in found if args.error_on_no_value or h.error_code != ERROR_NO_VALUE]
    shown = rows[: args.limit] if args.limit > 0 else rows
    if args.json:
        first = {str(rank): dict(hit.to_dict(), condition=label_of[id(hit.watchpoint)],
                                 communication=is_communication(hit))
                 for rank, hit in first_hits_by_rank(hits).items()}
        print(json.dumps({"dump_dir": args.dump_dir, "tensors_checked": len(checked) - len(not_checked),
                          "tensors_not_checked": len(not_checked), "hits": len(hits),
                          "results": [dict(h.to_dict(), condition=label_of[id(h.watchpoint)]) for h in shown],
                          "first_hit_by_rank": first}, indent=1))
    else:
        summary = f"{len(checked) - len(not_checked)} tensors checked against {len(watchpoints)} watchpoint(s): " \
                  f"{len(hits)} hit(s)"
        if not_checked:
            summary += f"; could not read {len(not_checked)} tensor(s) ({why})"
        print(summary)
        if shown:
            table = [("iter", "rank", "node", "slot", "condition", "detail", "source")]
            table += [(str(h.tensor.iteration), str(h.tensor.rank), h.tensor.node.name, str(h.tensor.slot),
                       label_of[id(h.watchpoint)], _detail(h), _source(h)) for h in shown]
            widths = [max(len(row[col]) for row in table) for col in range(len(table[0]))]
            for row in table:
                print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
        if len(shown) < len(rows):
            print(f"... {len(rows) - len(shown)} more (use --limit 0 or --json)")
        first = first_hits_by_rank(hits)
        if len(first) > 1:
            print("first hit on each rank:")
            for rank, hit in first.items():
                note = ("  <- a collective's output: the values came from another rank" if is_communication(hit)
                        else "")
                print(f"  rank {rank}: iteration {hit.tensor.iteration}, {hit.tensor.node.name} "
                      f"slot {hit.tensor.slot}{note}")
    if not_checked:
        print(f"msdebug check-dump: warning: could not read {len(not_checked)} of {len(checked)} selected tensor(s) "
              f"({why}); they were not checked", file=sys.stderr)
    return 1 if hits else EXIT_INCOMPLETE if not_checked else 0


def _nothing_because(args: argparse.Namespace, tensors: dict, labels: list) -> str:
    if tensors:
        kinds = " or ".join(sorted({target for _, target in labels}))
        return f"the {len(tensors)} selected tensor(s) hold no {kinds} tensor"
    filters = [f"--select {spec}" for spec in args.select]
    filters += [f"--{name} {value}" for name, value in (("iterations", args.iterations), ("ranks", args.ranks))
                if value is not None]
    return f"no dumped tensor matches {' '.join(filters)}" if filters else f"{args.dump_dir} holds no tensor"


def _why(missing, unreadable, listed: bool) -> str:
    parts = []
    if unreadable:
        parts.append(f"{len({h.tensor for h in unreadable})} unreadable, listed")
    if missing:
        parts.append(f"{len({h.tensor for h in missing})} with no file"
                     + (", listed" if listed else "; --error-on-no-value lists them"))
    return "; ".join(parts)
