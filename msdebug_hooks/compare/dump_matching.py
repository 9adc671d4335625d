"""Pair the operators of two sync dumps: by name, by scope, type, order and shape, and across MindSpore versions.

Within one version (compare-dumps' ordinary matching): nodes are grouped by scope without the op id and the cells'
class names, op type and kind (``.../_backbone/relu/ReLU`` for ``.../_backbone-LeNet5/relu-ReLU/ReLU-op2``). A group
whose full names are the same in both dumps pairs by name. Otherwise (a layer added or removed moves the op ids, a
class was renamed) the group pairs in execution order, each node of A with the next node of B whose output shapes
are the same; what is left over is reported as unmatched.

What is still unpaired on both sides then may be operators computed *instead of* others (ReLU where the other dump
has GeLU): :mod:`msdebug_hooks.compare.dump_replacements` pairs them by their place in the data flow.

Across versions (the two dumps record different MindSpore versions; the facts are in
:mod:`msdebug_hooks.mindspore_versions`), two rules run first:

1. An operator the expander made (``Expand/_<Composite>/<Op>-opN``, 2.8+: no cell scope) belongs to the scope of the
   first operator that consumes its output (followed through other ``Expand/`` operators and through ``Load`` /
   ``Depend`` / ``MakeTuple`` nodes): ``Expand/_Muls/Mul-op0`` feeding ``Gradients/.../Grad_Square/Mul-op0``
   belongs to ``Gradients/.../Grad_Square``.
2. A scope whose operators (their types, in execution order) are not the same in both dumps was built differently:
   2.7 computes Square's gradient as ``(dout * x) * 2`` in ``Grad_Square``, 2.8+ as ``dout * Muls(Pow(x, 1), 2)``.
   Only what leaves the scope is the same quantity in both, so the scope's *exit* operators (those whose output is
   used outside the scope, or by nothing) are paired in execution order when both sides have as many and their
   output shapes agree. The operators inside are *regrouped*: not compared one to one, and not missing either.
"""
from __future__ import annotations

import re
from collections import defaultdict
from typing import Any, Callable, NamedTuple, Optional, Sequence

from msdebug_hooks.compare.dump_replacements import BY_REPLACEMENT, Replacement, pair_replacements
from msdebug_hooks.dump.index import NodeInfo
from msdebug_hooks.mindspore_versions import EXPAND_SCOPE

BY_NAME = "name"
BY_ORDER = "scope+type+order+shape"
BY_DECOMPOSITION = "exit of a scope the two versions built differently"
_OP_ID = re.compile(r"-op\d+$")
NodeLookup = Callable[[str], Optional[NodeInfo]]


class NodePair(NamedTuple):
    """An operator of dump A, the one of dump B it is compared with, and how they were paired (``BY_NAME``,
    ``BY_ORDER``, ``BY_DECOMPOSITION`` or ``BY_REPLACEMENT``, which carries its :class:`Replacement`)."""

    a: NodeInfo
    b: NodeInfo
    how: str
    replaced: Optional[Replacement] = None


class NodeMatching(NamedTuple):
    """What ``match_nodes`` found: the pairs in A's execution order, the nodes of each side nothing paired, and those
    *regrouped* (inside a scope the two versions built differently: neither compared one to one nor missing)."""

    pairs: list[NodePair]
    unmatched_a: list[NodeInfo]
    unmatched_b: list[NodeInfo]
    regrouped_a: list[NodeInfo]
    regrouped_b: list[NodeInfo]


class Decompositions(NamedTuple):
    """Rule 2's result: the exit pairs of the scopes built differently, and the operators inside them."""

    pairs: list[NodePair]
    regrouped_a: list[NodeInfo]
    regrouped_b: list[NodeInfo]


def order_key(info: NodeInfo) -> tuple:
    return (info.order_group, info.exec_index if info.exec_index is not None else -1, info.name)


def scope_key(name: str) -> str:
    """A node's scope without op id and cell class names: ``Default/network-WithLossCell/_backbone-LeNet5/relu-ReLU/
    ReLU-op2`` -> ``Default/network/_backbone/relu/ReLU``. Attribute names identify a cell; its class may be renamed."""
    parts = _OP_ID.sub("", name).split("/")
    return "/".join([part.split("-", 1)[0] for part in parts[:-1]] + parts[-1:])


def _group_key(info: NodeInfo) -> tuple[str, str, str]:
    return (info.node_type, scope_key(info.name), info.op_type)


def _memoized(shape_of):
    """Each node's output shapes are read (from file headers) once."""
    seen: dict[str, Any] = {}

    def lookup(info: NodeInfo):
        if info.name not in seen:
            seen[info.name] = shape_of(info)
        return seen[info.name]
    return lookup


def match_nodes(nodes_a: Sequence[NodeInfo], nodes_b: Sequence[NodeInfo], shape_a, shape_b, *,
                across_versions: bool = False, lookup_a: Optional[NodeLookup] = None,
                lookup_b: Optional[NodeLookup] = None) -> NodeMatching:
    """Pair the nodes (see module doc; ``across_versions`` turns on rules 1 and 2; ``lookup_a`` / ``lookup_b`` follow
    inputs through nodes that are not dumped, for those rules and for the operators replaced by others)."""
    shape_a, shape_b = _memoized(shape_a), _memoized(shape_b)
    all_a, all_b = nodes_a, nodes_b
    lookup_a, lookup_b = lookup_a or (lambda _: None), lookup_b or (lambda _: None)
    pairs: list[NodePair] = []
    regrouped_a: list[NodeInfo] = []
    regrouped_b: list[NodeInfo] = []
    if across_versions:
        pairs, regrouped_a, regrouped_b = pair_decompositions(nodes_a, nodes_b, lookup_a, lookup_b, shape_a, shape_b)
        taken = {id(i) for pair in pairs for i in (pair.a, pair.b)} | {id(i) for i in regrouped_a + regrouped_b}
        nodes_a = [i for i in nodes_a if id(i) not in taken]
        nodes_b = [i for i in nodes_b if id(i) not in taken]
    groups_a: dict[tuple, list[NodeInfo]] = defaultdict(list)
    groups_b: dict[tuple, list[NodeInfo]] = defaultdict(list)
    for info in nodes_a:
        groups_a[_group_key(info)].append(info)
    for info in nodes_b:
        groups_b[_group_key(info)].append(info)
    unmatched_a: list[NodeInfo] = []
    unmatched_b: list[NodeInfo] = []
    for key, members_a in groups_a.items():
        members_b = groups_b.pop(key, [])
        if [i.name for i in members_a] == [i.name for i in members_b]:
            pairs.extend(NodePair(ia, ib, BY_NAME) for ia, ib in zip(members_a, members_b))
            continue
        start = 0
        used = set()
        for ia in members_a:
            wanted = shape_a(ia)
            for position in range(start, len(members_b)):
                ib = members_b[position]
                got = shape_b(ib)
                if wanted is None or got is None or wanted == got:
                    pairs.append(NodePair(ia, ib, BY_ORDER))
                    used.add(position)
                    start = position + 1
                    break
            else:
                unmatched_a.append(ia)
        unmatched_b.extend(ib for position, ib in enumerate(members_b) if position not in used)
    for members_b in groups_b.values():
        unmatched_b.extend(members_b)
    if unmatched_a and unmatched_b:
        sides = []
        for nodes, lookup in ((all_a, lookup_a), (all_b, lookup_b)):
            users = consumers(nodes, lookup)
            sides.append((users, effective_scopes(nodes, users)))
        found = pair_replacements(unmatched_a, unmatched_b, {p.a.name: p.b.name for p in pairs}, sides[0], sides[1],
                                  shape_a, shape_b)
        pairs.extend(NodePair(ia, ib, BY_REPLACEMENT, replacement) for ia, ib, replacement in found.pairs)
        taken = {id(i) for ia, ib, _ in found.pairs for i in (ia, ib)} | {
            id(i) for i in found.regrouped_a + found.regrouped_b}
        unmatched_a = [i for i in unmatched_a if id(i) not in taken]
        unmatched_b = [i for i in unmatched_b if id(i) not in taken]
        regrouped_a += found.regrouped_a
        regrouped_b += found.regrouped_b
    pairs.sort(key=lambda p: order_key(p.a))
    return NodeMatching(pairs, unmatched_a, unmatched_b, regrouped_a, regrouped_b)


# --- across versions --------------------------------------------------------------------------------------------------

def consumers(nodes: Sequence[NodeInfo], lookup: NodeLookup) -> dict[str, list[NodeInfo]]:
    """Name -> the compared operators that use its output, in execution order (through nodes that are not dumped:
    ``Load``, ``Depend``, ``MakeTuple``, ``TupleGetItem``)."""
    compared = {info.name: info for info in nodes}
    users: dict[str, list[str]] = defaultdict(list)
    for info in nodes:
        pending, seen = list(info.inputs), set()
        while pending:
            source = pending.pop()
            if source in seen:
                continue
            seen.add(source)
            users[source].append(info.name)
            if source not in compared:
                node = lookup(source)
                pending.extend(node.inputs if node is not None else ())
    return {name: sorted((compared[u] for u in dict.fromkeys(found)), key=order_key) for name, found in users.items()}


def effective_scopes(nodes: Sequence[NodeInfo], users: dict[str, list[NodeInfo]]) -> dict[str, str]:
    """Name -> the scope it belongs to (rule 1): its own, or for an ``Expand/`` operator its first consumer's."""
    scopes: dict[str, str] = {}

    def scope(info: NodeInfo, depth: int = 0) -> str:
        if info.name not in scopes:
            key = scope_key(info.name)
            found = key.rsplit("/", 1)[0] if "/" in key else ""
            following = users.get(info.name, [])
            if info.name.startswith(EXPAND_SCOPE) and following and depth < 64:
                found = scope(following[0], depth + 1)
            scopes[info.name] = found
        return scopes[info.name]

    for info in nodes:
        scope(info)
    return scopes


def pair_decompositions(nodes_a: Sequence[NodeInfo], nodes_b: Sequence[NodeInfo], lookup_a: NodeLookup,
                        lookup_b: NodeLookup, shape_a, shape_b) -> Decompositions:
    """The exit pairs of every scope the two versions built differently (rule 2) and the operators inside those
    scopes. Nodes in neither list are left to the ordinary matching."""
    sides = []
    for nodes, lookup in ((nodes_a, lookup_a), (nodes_b, lookup_b)):
        users = consumers(nodes, lookup)
        scopes = effective_scopes(nodes, users)
        groups: dict[str, list[NodeInfo]] = defaultdict(list)
        for info in nodes:
            if info.exec_index is not None:       # operators only: weights and inputs keep their names
                groups[scopes[info.name]].append(info)
        sides.append((users, groups))
    (users_a, groups_a), (users_b, groups_b) = sides
    pairs: list[NodePair] = []
    regrouped_a: list[NodeInfo] = []
    regrouped_b: list[NodeInfo] = []
    for scope, members_a in groups_a.items():
        members_b = groups_b.get(scope)
        if not scope or not members_b or [i.op_type for i in members_a] == [i.op_type for i in members_b]:
            continue   # only on one side, or built alike: the ordinary matching pairs it
        exits_a, exits_b = _exits(members_a, users_a), _exits(members_b, users_b)
        if len(exits_a) != len(exits_b) or any(None not in (shape_a(ia), shape_b(ib)) and shape_a(ia) != shape_b(ib)
                                               for ia, ib in zip(exits_a, exits_b)):
            continue   # not the same quantities leaving: the ordinary matching (and its unmatched lists) tell
        pairs.extend(NodePair(ia, ib, BY_DECOMPOSITION) for ia, ib in zip(exits_a, exits_b))
        regrouped_a.extend(i for i in members_a if i not in exits_a)
        regrouped_b.extend(i for i in members_b if i not in exits_b)
    return Decompositions(pairs, regrouped_a, regrouped_b)


def _exits(members: list[NodeInfo], users: dict[str, list[NodeInfo]]) -> list[NodeInfo]:
    inside = {info.name for info in members}
    return [info for info in members if not users.get(info.name) or any(u.name not in inside for u in users[info.name])]
