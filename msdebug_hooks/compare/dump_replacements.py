"""Pair the operators one dump computes *instead of* others: ReLU in one run where the other has GeLU.

After the ordinary matching (:mod:`msdebug_hooks.compare.dump_matching`) a changed layer leaves operators unpaired on
both sides, because their types (and often their number) differ: ``ReLU`` against ``GeLU``, or one ``GeLU`` against
the ``Div, Erf, Add, Mul, Mul`` of an exact GELU. Left unpaired, the first operator that parts is the one *after*
them, read as "inherited", and the real change shows only as an unmatched name. This rule pairs them by their place
in the graph, never by names:

1. the unpaired operators of each side are grouped into connected pieces of the data flow (an edge: one uses the
   other's output, followed through nodes that are not dumped), within one phase (the forward pass, or the backward
   pass: a ``Gradients/`` scope; an expander operator belongs to the scope of its first consumer);
2. a piece of A and a piece of B *sit at the same place* when the paired operators they feed are the same pairs
   (at least one), and the paired operators feeding them share at least one pair (a gradient operator of one type
   may also read the forward input, of another only the forward output); or, for pieces that feed nothing, when
   the paired operators feeding them are the same pairs. Only a one-to-one correspondence is kept: a piece that
   sits where two pieces of the other side sit is left unpaired;
3. the pieces' *exits* (operators whose output a paired operator uses, or nothing does) are paired in execution
   order when both pieces have as many and their output shapes agree: ``BY_REPLACEMENT``. Only the exits are
   compared, on their outputs; the operators inside are *regrouped* (neither compared one to one nor missing).

Each exit pair carries a :class:`Replacement`: the op types of both pieces, in execution order, and the pairs that
feed the piece, so that whether the difference was made there is judged on the piece's own inputs.
"""
from __future__ import annotations

from collections import defaultdict
from typing import NamedTuple, Optional, Sequence

from msdebug_hooks.dump.index import NodeInfo

BY_REPLACEMENT = "replaced: other operator types at the same place"
_BACKWARD_SCOPE = "Gradients/"


class Replacement(NamedTuple):
    """What a ``BY_REPLACEMENT`` pair stands for: the op types of A's piece and of B's (execution order), and the
    A names of the paired operators feeding A's piece (its inputs, for the verdict made or inherited)."""

    types_a: tuple[str, ...]
    types_b: tuple[str, ...]
    inputs_a: tuple[str, ...]

    def describe(self, cell: str = "") -> str:
        """``A computes ReLU where B computes GeLU (cell act)``."""
        where = f" (cell {cell})" if cell else ""
        return f"A computes {', '.join(self.types_a)} where B computes {', '.join(self.types_b)}{where}"


class Replacements(NamedTuple):
    """The exit pairs (A node, B node, Replacement), and the operators inside the pieces of each side."""

    pairs: list[tuple[NodeInfo, NodeInfo, Replacement]]
    regrouped_a: list[NodeInfo]
    regrouped_b: list[NodeInfo]


class _Piece(NamedTuple):
    members: list[NodeInfo]
    inputs: frozenset        # names of the paired operators feeding it (this side's names)
    users: frozenset         # names of the paired operators using its outputs
    exits: list[NodeInfo]


def _pieces(unpaired: Sequence[NodeInfo], users: dict[str, list[NodeInfo]], scopes: dict[str, str],
            paired: set[str]) -> list[_Piece]:
    """Connected pieces of the unpaired operators (rule 1), with their paired neighbours."""
    names = {info.name: info for info in unpaired}
    parent = {name: name for name in names}

    def root(name: str) -> str:
        while parent[name] != name:
            parent[name] = parent[parent[name]]
            name = parent[name]
        return name

    def phase(name: str) -> bool:
        return scopes.get(name, name).startswith(_BACKWARD_SCOPE) or name.startswith(_BACKWARD_SCOPE)

    producers: dict[str, set[str]] = defaultdict(set)
    for source, found in users.items():
        for user in found:
            producers[user.name].add(source)
            if source in names and user.name in names and phase(source) == phase(user.name):
                parent[root(source)] = root(user.name)
    groups: dict[str, list[NodeInfo]] = defaultdict(list)
    for info in sorted(unpaired, key=lambda i: (i.order_group, i.exec_index, i.name)):
        groups[root(info.name)].append(info)
    pieces = []
    for members in groups.values():
        inputs = frozenset(p for info in members for p in producers.get(info.name, ()) if p in paired)
        outside = frozenset(u.name for info in members for u in users.get(info.name, ()) if u.name in paired)
        exits = [info for info in members
                 if not users.get(info.name) or any(u.name in paired for u in users[info.name])]
        pieces.append(_Piece(members, inputs, outside, exits))
    return pieces


def _same_place(piece_a: _Piece, piece_b: _Piece, to_b: dict[str, str]) -> bool:
    """Rule 2, with A's neighbours named as their B partners."""
    inputs = {to_b[name] for name in piece_a.inputs}
    users = {to_b[name] for name in piece_a.users}
    if users or piece_b.users:
        return users == piece_b.users and bool(inputs & piece_b.inputs)
    return bool(inputs) and inputs == piece_b.inputs


def pair_replacements(unpaired_a: Sequence[NodeInfo], unpaired_b: Sequence[NodeInfo], to_b: dict[str, str],
                      side_a: tuple, side_b: tuple, shape_a, shape_b) -> Replacements:
    """Rules 1 to 3 on what the ordinary matching left unpaired. ``to_b``: A name -> B name of every pair;
    ``side_a``/``side_b``: ``(users, scopes)`` of each dump (``dump_matching.consumers`` and
    ``effective_scopes``); ``shape_a``/``shape_b``: a node's output shapes (None: unknown)."""
    operators_a = [info for info in unpaired_a if info.exec_index is not None]
    operators_b = [info for info in unpaired_b if info.exec_index is not None]
    if not operators_a or not operators_b:
        return Replacements([], [], [])
    pieces_a = _pieces(operators_a, side_a[0], side_a[1], set(to_b))
    pieces_b = _pieces(operators_b, side_b[0], side_b[1], set(to_b.values()))
    candidates = {id(a): [b for b in pieces_b if _same_place(a, b, to_b)] for a in pieces_a}
    claimed: dict[int, int] = defaultdict(int)
    for found in candidates.values():
        for b in found:
            claimed[id(b)] += 1
    out = Replacements([], [], [])
    for piece_a in pieces_a:
        found = candidates[id(piece_a)]
        if len(found) != 1 or claimed[id(found[0])] != 1:
            continue
        piece_b = found[0]
        exits_a, exits_b = piece_a.exits, piece_b.exits
        if len(exits_a) != len(exits_b) or any(_shapes_differ(shape_a(ia), shape_b(ib))
                                               for ia, ib in zip(exits_a, exits_b)):
            continue
        replacement = Replacement(tuple(i.op_type for i in piece_a.members), tuple(i.op_type for i in piece_b.members),
                                  tuple(sorted(piece_a.inputs)))
        out.pairs.extend((ia, ib, replacement) for ia, ib in zip(exits_a, exits_b))
        out.regrouped_a.extend(i for i in piece_a.members if i not in exits_a)
        out.regrouped_b.extend(i for i in piece_b.members if i not in exits_b)
    return out


def _shapes_differ(a: Optional[tuple], b: Optional[tuple]) -> bool:
    return a is not None and b is not None and a != b
