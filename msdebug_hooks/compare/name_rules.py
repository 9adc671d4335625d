"""Name mappings with prefix/glob rules: ``layers.* -> blocks.*`` pairs every ``layers.N...`` name with ``blocks.N...``.

A port that renames a container (``layers`` -> ``blocks``) or a sub-module (``self_attn.wq`` -> ``attn.q_proj``)
renames every tensor under it; a mapping file would need one line per tensor. A rule says it once:

* a rule is a pair of dotted names where ``*`` stands for one or more whole name parts (``layers.*.self_attn.wq.*``);
* the parts each ``*`` captured are put, in order, in the target's ``*`` (both sides have the same number of ``*``);
* when a name fits a rule in more than one way, each ``*`` takes as few parts as it can, from the left;
* exact pairs win over rules; among rules, the first that fits wins (put the specific ones first).

``NameMapping`` is a ``Mapping`` of the exact pairs -- code that used the plain ``dict`` of a mapping file keeps
working -- plus the rules; ``lookup(name)`` applies both. ``infer_rule`` and ``suggest_rules`` go the other way: from
pairs of names known to belong together (paired by value) to the rules a user can put in a mapping file.
"""
from __future__ import annotations

import re
from collections import Counter, defaultdict
from difflib import SequenceMatcher
from typing import Iterable, Iterator, Mapping, Optional, Sequence, Union

STAR = "*"


class NameRule:
    """One ``pattern -> target`` rule. ``ValueError`` (the reason, one line) when it is not a valid rule."""

    def __init__(self, pattern: str, target: str, *, where: str = "") -> None:
        for side in (pattern, target):
            parts = side.split(".")
            if "" in parts:
                raise ValueError(f"{side!r} has an empty name part (a leading, trailing or doubled '.')")
            if any(STAR in part and part != STAR for part in parts):
                raise ValueError(f"{side!r}: a '*' must stand for whole name parts, between dots ('layers.*')")
            if any(a == b == STAR for a, b in zip(parts, parts[1:])):
                raise ValueError(f"{side!r}: two '*' next to each other are ambiguous; one '*' already matches "
                                 f"several parts")
        if pattern.count(STAR) != target.count(STAR):
            raise ValueError(f"{pattern!r} has {pattern.count(STAR)} '*' and {target!r} has {target.count(STAR)}: "
                             f"each '*' of the target takes what the same '*' of the pattern matched")
        if not pattern.count(STAR):
            raise ValueError(f"{pattern!r} has no '*': write an exact pair as a name pair, a rule needs a '*'")
        self.pattern, self.target, self.where = pattern, target, where
        pieces = [r"([^.]+(?:\.[^.]+)*?)" if part == STAR else re.escape(part) for part in pattern.split(".")]
        self._regex = re.compile(r"\.".join(pieces))
        self._slots = target.split(".")

    def apply(self, name: str) -> Optional[str]:
        """The target name for ``name``, or None when the rule does not fit it."""
        match = self._regex.fullmatch(name)
        if match is None:
            return None
        captured = iter(match.groups())
        return ".".join(next(captured) if part == STAR else part for part in self._slots)

    @property
    def specificity(self) -> int:
        """Literal parts of the pattern: more of them, narrower the rule (suggested rules are ordered by it)."""
        return sum(part != STAR for part in self.pattern.split("."))

    def __repr__(self) -> str:
        return f"NameRule({self.pattern!r} -> {self.target!r})"

    def __str__(self) -> str:
        return f"{self.pattern} -> {self.target}"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NameRule) and (self.pattern, self.target) == (other.pattern, other.target)

    def __hash__(self) -> int:
        return hash((self.pattern, self.target))


class NameMapping(Mapping[str, str]):
    """A mapping file's content: exact ``A name -> B name`` pairs (the ``Mapping`` part) and ordered rules."""

    def __init__(self, pairs: Optional[Mapping[str, str]] = None,
                 rules: Iterable[Union[NameRule, tuple]] = ()) -> None:
        self._pairs = dict(pairs or {})
        self.rules: list = [rule if isinstance(rule, NameRule) else NameRule(*rule) for rule in rules]

    def __getitem__(self, name: str) -> str:
        return self._pairs[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._pairs)

    def __len__(self) -> int:
        return len(self._pairs)

    def __repr__(self) -> str:
        return f"NameMapping({self._pairs!r}, rules={[str(r) for r in self.rules]!r})"

    def lookup(self, name: str) -> Optional[str]:
        """B's name for A's ``name``: its exact pair, else the first rule that fits, else None."""
        if name in self._pairs:
            return self._pairs[name]
        for rule in self.rules:
            target = rule.apply(name)
            if target is not None:
                return target
        return None


def infer_rule(name_a: str, name_b: str) -> Optional[NameRule]:
    """The rule that maps ``name_a`` to ``name_b`` and its siblings: the common trailing parts become a ``*``, and so
    do the numbers both heads share in the same order (layer indices). None when the names are equal or share no
    trailing part (then nothing general can be said)."""
    parts_a, parts_b = name_a.split("."), name_b.split(".")
    common = 0
    while common < min(len(parts_a), len(parts_b)) and parts_a[-1 - common] == parts_b[-1 - common]:
        common += 1
    if common == 0 or parts_a == parts_b:
        return None
    head_a, head_b = parts_a[:len(parts_a) - common], parts_b[:len(parts_b) - common]
    numbers_a = [part for part in head_a if part.isdigit()]
    if numbers_a and numbers_a == [part for part in head_b if part.isdigit()]:
        general_a = [STAR if part.isdigit() else part for part in head_a]
        general_b = [STAR if part.isdigit() else part for part in head_b]
        if not (general_a[-1:] == [STAR] or general_b[-1:] == [STAR] or _adjacent_stars(general_a)
                or _adjacent_stars(general_b)):
            head_a, head_b = general_a, general_b
    return NameRule(".".join(head_a + [STAR]), ".".join(head_b + [STAR]))


def _adjacent_stars(parts: Sequence[str]) -> bool:
    return any(a == b == STAR for a, b in zip(parts, parts[1:]))


def suggest_rules(pairs: Iterable[tuple[str, str]]) -> list:
    """Rules that map the A names of ``pairs`` to their B names, narrowest first (so first-match-wins keeps them
    apart). Where pairs disagree on one pattern (``wq`` -> ``q_proj`` in most layers, ``k_proj`` in one), the
    target with the most pairs behind it wins, then the target whose name is closer to the pattern's."""
    votes: dict = defaultdict(Counter)
    for name_a, name_b in pairs:
        rule = infer_rule(name_a, name_b)
        if rule is not None:
            votes[rule.pattern][rule.target] += 1
    chosen = []
    for pattern, targets in votes.items():
        target = max(targets, key=lambda t: (targets[t], SequenceMatcher(None, pattern, t).ratio(), t))
        chosen.append(NameRule(pattern, target))
    return sorted(chosen, key=lambda rule: (-rule.specificity, rule.pattern))
