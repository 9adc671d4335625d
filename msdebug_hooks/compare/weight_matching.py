"""Which tensor of B belongs to which tensor of A, when the names alone do not say it.

Strongest first:

1. ``mapping``: the user's mapping file (exact pairs, then rules); ``name``: the same canonical name.
2. ``value``: an A tensor left over pairs with a left-over B tensor of the same parameter name (the last part, after
   the naming map: a port renames modules, not a Linear's ``weight``) and equal values (or values equal transposed).
   Equal candidates go in file order. Where value pairs of distinctive tensors show the port's renaming pattern
   (``layers.N.self_attn.wq.*`` -> ``blocks.N.attn.q_proj.*``, the most pairs behind each pattern), a value pair that
   breaks the pattern is undone and ``scheme`` pairs the tensors the pattern names: a swap in one layer of a renamed
   port is then compared, and found, like a swap under equal names.
3. ``renamed``: equal values under another parameter name (``fc3.weights`` for ``fc3.weight``): a real problem, the
   file would not load under that name. A constant (a ones scale) only pairs so with a close name.
4. ``position``: same parameter name and shape, between the B partners of A's paired neighbours; ``similar name``:
   the closest B name of the same (or transposed) shape. Never for a tensor whose (distinctive) values equal a tensor
   elsewhere on the other side: that one is not a renamed copy with other values.

``find_moved`` then looks, for each pair whose values differ, for A's value elsewhere in B (swapped tensors).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, NamedTuple, Optional

import numpy as np

from msdebug_hooks.compare.name_rules import NameMapping, suggest_rules
from msdebug_hooks.compare.naming import canonical_name
from msdebug_hooks.compare.value_index import ValueIndex
from msdebug_hooks.config._common import closest_name

BY_MAPPING, BY_NAME, BY_VALUE, BY_SCHEME, BY_POSITION, BY_SIMILAR_NAME, BY_RENAMED = (
    "mapping", "name", "value", "scheme", "position", "similar name", "renamed")


@dataclass
class MatchPlan:
    """The pairs (``(name_a, name_b, matched_by)``, in A's order of pairing), what is left on each side with a hint
    (``{name: hint}``), and the mapping file's exact pairs whose B name is not in B."""

    pairs: list = field(default_factory=list)
    only_a: dict = field(default_factory=dict)
    only_b: dict = field(default_factory=dict)
    unresolved: list = field(default_factory=list)


class MovedValues(NamedTuple):
    """Where the values of differing pairs went: ``cycles`` of ``(name_a, name_b, transposed)`` that close (A's q is
    B's k and A's k is B's q: swapped), and the moves that do not close, ``{name_a: (name_b, transposed)}``."""

    cycles: list[list[tuple[str, str, bool]]]
    moved: dict[str, tuple[str, bool]]


def leaf(canonical: str) -> str:
    """The parameter's own name (``weight``, ``bias``, ``running_mean``): set by its layer type, not by the port."""
    return canonical.rpartition(".")[2]


class WeightMatcher:
    """Pairs the tensors of two weight files (see the module docstring); ``match`` gives the ``MatchPlan``."""

    def __init__(self, weights_a: Mapping[str, np.ndarray], framework_a: str, weights_b: Mapping[str, np.ndarray],
                 framework_b: str, rtol: float, atol: float) -> None:
        self.weights_a, self.weights_b = weights_a, weights_b
        self.framework_a, self.framework_b = framework_a, framework_b
        self.canon_a = {name: canonical_name(name, framework_a) for name in weights_a}
        self.canon_b = {name: canonical_name(name, framework_b) for name in weights_b}
        self.b_by_key = {canon: name for name, canon in self.canon_b.items()}
        self.index_a = ValueIndex(weights_a, rtol, atol)
        self.index_b = ValueIndex(weights_b, rtol, atol)

    # -- lookups ---------------------------------------------------------------------------------------------------
    def resolve(self, target: Optional[str]) -> Optional[str]:
        """B's tensor for a mapped name written either side's way (``norm.gamma`` or ``norm.weight``)."""
        if target is None:
            return None
        if target in self.weights_b:
            return target
        return (self.b_by_key.get(canonical_name(target, self.framework_a))
                or self.b_by_key.get(canonical_name(target, self.framework_b)))

    def in_b(self, name_a: str, among: Optional[list] = None) -> list:
        """``[(name_b, transposed)]``: B tensors equal to A's ``name_a`` (or to it transposed)."""
        return self.index_b.equal(self.weights_a[name_a], self.index_a.fingerprint_of(name_a), among)

    def in_a(self, name_b: str) -> list:
        return self.index_a.equal(self.weights_b[name_b], self.index_b.fingerprint_of(name_b))

    # -- the passes ------------------------------------------------------------------------------------------------
    def match(self, names: NameMapping) -> MatchPlan:
        plan = MatchPlan()
        taken: set = set()
        left_a = []
        for name_a in self.weights_a:
            target = names.lookup(name_a) or names.lookup(self.canon_a[name_a])
            name_b, how = self.resolve(target), BY_MAPPING
            if target is not None and name_b is None and name_a in names:
                plan.unresolved.append((name_a, target))
            if name_b is None or name_b in taken:
                name_b, how = self.b_by_key.get(self.canon_a[name_a]), BY_NAME
            if name_b is None or name_b in taken:
                left_a.append(name_a)
                continue
            taken.add(name_b)
            plan.pairs.append((name_a, name_b, how))
        left_b = [name for name in self.weights_b if name not in taken]
        if left_a and left_b:
            left_a = self._by_value(left_a, left_b, plan)
            left_b = [name for name in left_b if name not in {b for _, b, _ in plan.pairs}]
            left_a = self._renamed(left_a, left_b, plan)
            left_b = [name for name in left_b if name not in {b for _, b, _ in plan.pairs}]
            left_a = self._by_position(left_a, left_b, plan)
        paired_b = {b for _, b, _ in plan.pairs}
        for name_a in left_a:
            plan.only_a[name_a] = self._hint_a(name_a, [n for n in self.weights_b if n not in paired_b])
        for name_b in self.weights_b:
            if name_b not in paired_b:
                found = self.in_a(name_b) if self.index_b.distinctive(name_b) else []
                plan.only_b[name_b] = f"its values equal A's {found[0][0]}" if found else ""
        return plan

    def _by_value(self, left_a: list, left_b: list, plan: MatchPlan) -> list:
        free = list(left_b)
        tentative = {}
        for name_a in left_a:
            same_leaf = [b for b in free if leaf(self.canon_b[b]) == leaf(self.canon_a[name_a])]
            found = sorted(self.in_b(name_a, same_leaf), key=lambda hit: hit[1]) if same_leaf else []  # as is first
            if found:
                tentative[name_a] = found[0][0]
                free.remove(found[0][0])
        telling = [(self.canon_a[a], self.canon_b[b]) for a, b in tentative.items() if self.index_a.distinctive(a)]
        scheme = NameMapping(rules=suggest_rules(telling))
        expected = {}
        for name_a in left_a:
            name_b = self.resolve(scheme.lookup(self.canon_a[name_a]))
            if name_b in left_b:
                expected[name_a] = name_b
        reserved: set = set()
        chosen = {}
        for name_a, name_b in tentative.items():   # value pairs the pattern agrees with (or says nothing about)
            if expected.get(name_a, name_b) == name_b:
                chosen[name_a] = (name_b, BY_VALUE)
                reserved.add(name_b)
        for name_a in left_a:                      # the pattern's pairs for the rest: compared, not assumed
            name_b = expected.get(name_a)
            if name_a not in chosen and name_b is not None and name_b not in reserved:
                chosen[name_a] = (name_b, BY_SCHEME)
                reserved.add(name_b)
        for name_a, name_b in tentative.items():   # a value pair whose patterned partner went elsewhere
            if name_a not in chosen and name_b not in reserved:
                chosen[name_a] = (name_b, BY_VALUE)
                reserved.add(name_b)
        plan.pairs += [(name_a, *chosen[name_a]) for name_a in left_a if name_a in chosen]
        return [name_a for name_a in left_a if name_a not in chosen]

    def _renamed(self, left_a: list, left_b: list, plan: MatchPlan) -> list:
        rest = []
        for name_a in left_a:
            found = [b for b, _ in self.in_b(name_a, left_b)] if left_b else []
            guess = self._closest(name_a, found)
            name_b = guess or (found[0] if found and self.index_a.distinctive(name_a) else None)
            if name_b is None:
                rest.append(name_a)
                continue
            plan.pairs.append((name_a, name_b, BY_RENAMED))
            left_b.remove(name_b)
        return rest

    def _by_position(self, left_a: list, left_b: list, plan: MatchPlan) -> list:
        order_a = {name: i for i, name in enumerate(self.weights_a)}
        order_b = {name: i for i, name in enumerate(self.weights_b)}
        rest = []
        for name_a in left_a:
            value_a = self.weights_a[name_a]
            if self.index_a.distinctive(name_a) and self.in_b(name_a):   # its values are in B, paired elsewhere
                rest.append(name_a)
                continue
            shaped = [b for b in left_b if self.weights_b[b].shape in (value_a.shape, value_a.shape[::-1])
                      and not (self.index_b.distinctive(b) and self.in_a(b))]
            partners = {order_a[a]: order_b[b] for a, b, _ in plan.pairs}
            below = [partners[i] for i in partners if i < order_a[name_a]]
            above = [partners[i] for i in partners if i > order_a[name_a]]
            low, high = max(below, default=-1), min(above, default=len(order_b))
            between = [b for b in shaped if low < order_b[b] < high and leaf(self.canon_b[b]) == leaf(
                self.canon_a[name_a]) and self.weights_b[b].shape == value_a.shape]
            if between:
                name_b, how = between[0], BY_POSITION
            else:
                name_b = self._closest(name_a, shaped)
                how = BY_SIMILAR_NAME if name_b and leaf(self.canon_b[name_b]) == leaf(self.canon_a[name_a]) \
                    else BY_RENAMED
            if name_b is None:
                rest.append(name_a)
                continue
            plan.pairs.append((name_a, name_b, how))
            left_b.remove(name_b)
        return rest

    # -- helpers ---------------------------------------------------------------------------------------------------
    def _closest(self, name_a: str, names_b: list) -> Optional[str]:
        keys = {self.canon_b[name]: name for name in names_b}
        guess = closest_name(self.canon_a[name_a], keys)
        return keys[guess] if guess else None

    def _hint_a(self, name_a: str, free_b: list) -> str:
        found = self.in_b(name_a) if self.index_a.distinctive(name_a) else []
        if found:
            return f"its values are in B under {found[0][0]}, which is paired with another tensor"
        guess = self._closest(name_a, free_b)
        return f"closest name in B: {guess}" if guess else ""

    def find_moved(self, pairs: list) -> MovedValues:
        """For ``pairs`` (``(name_a, name_b)`` whose values differ), where A's value went.

        ``moved[name_a] = (name_b, transposed)`` when A's value is distinctive and equals exactly one other B tensor;
        a cycle is a list of such ``(name_a, name_b, transposed)`` that closes (A's q is B's k and A's k is B's q:
        swapped). Moves that do not close stay in ``moved`` (the finding gets a note).
        """
        a_of_b = {b: a for a, b in pairs}
        moved = {}
        for name_a, name_b in pairs:
            if not self.index_a.distinctive(name_a):
                continue
            found = [(b, t) for b, t in self.in_b(name_a) if b != name_b]
            if len(found) == 1:
                moved[name_a] = found[0]
        cycles, seen = [], set()
        for start in moved:
            path, node = [], start
            while node in moved and node not in seen and node not in path:
                path.append(node)
                node = a_of_b.get(moved[node][0])
            seen.update(path)
            if node in path and len(path) - path.index(node) > 1:
                cycles.append([(a, *moved[a]) for a in path[path.index(node):]])
        for cycle in cycles:
            for name_a, _, _ in cycle:
                moved.pop(name_a, None)
        return MovedValues(cycles, moved)
