"""Converted weights checked against their source: the first thing to rule out in a port.

``compare_weights(a, b)`` reads two weight files -- ``.ckpt`` (MindSpore, through :mod:`msdebug_hooks.ckpt`) or
``.pth``/``.pt`` (PyTorch, imported lazily) in any combination -- pairs their tensors (the user's mapping and its
rules, the built-in naming map, then values and the pattern of the names: :mod:`.weight_matching`), and gives every
parameter one finding:

``ok``          same values (within ``rtol``/``atol``);
``values``      same shape, values differ (max absolute error and cosine given);
``transposed``  B equals A transposed (a ``[in, out]`` / ``[out, in]`` mixup; square weights too);
``swapped``     the values of two (or more) tensors were exchanged: A's ``q`` is B's ``k`` and A's ``k`` is B's ``q``;
``shape``       shapes differ otherwise;
``dtype``       an integer/bool dtype against another dtype (float widths are compared as values);
``renamed``     in A only, with a B-only tensor of another parameter name and equal values, or of a close name and
                the same (or transposed) shape;
``missing``     in A, nothing in B;
``extra``       in B, nothing in A.

Optimizer state in a ``.ckpt`` (``moments.*``, ``learning_rate``, ``global_step``, ...) and PyTorch's
``num_batches_tracked`` are not weights and are skipped (counted in ``skipped``).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional, Union

import numpy as np

from msdebug_hooks.compare.layouts import one_layout
from msdebug_hooks.compare.name_rules import NameMapping, suggest_rules
from msdebug_hooks.compare.naming import MINDSPORE, PYTORCH, is_framework_bookkeeping
from msdebug_hooks.compare.value_index import values_close
from msdebug_hooks.compare.weight_matching import (BY_POSITION, BY_RENAMED, BY_SCHEME, BY_SIMILAR_NAME, BY_VALUE,
                                                   WeightMatcher)
from msdebug_hooks.errors import ConfigError

PathLike = Union[str, "os.PathLike[str]"]
_SUFFIXES = {".ckpt": MINDSPORE, ".pth": PYTORCH, ".pt": PYTORCH}
OK, VALUES, TRANSPOSED, SWAPPED, SHAPE, DTYPE, RENAMED, MISSING, EXTRA = (
    "ok", "values", "transposed", "swapped", "shape", "dtype", "renamed", "missing", "extra")
#: how a pair found by something else than its name is described on its line
_HOW = {BY_VALUE: "paired by value", BY_SCHEME: "paired by the pattern of the port's names",
        BY_POSITION: "paired by position and shape", BY_SIMILAR_NAME: "paired by a similar name"}
_RULES_SHOWN = 12


@dataclass
class WeightFinding:
    """One parameter's finding; ``message`` is the line the command prints."""

    kind: str
    name_a: Optional[str]
    name_b: Optional[str]
    message: str
    shape_a: Optional[list] = None
    shape_b: Optional[list] = None
    max_abs_error: Optional[float] = None
    #: mapping, name, value, scheme, renamed, position or similar name (see :mod:`.weight_matching`)
    matched_by: Optional[str] = None
    #: ``[[name_a, name_b, transposed], ...]``: where A's value was found in B (swapped or moved values)
    moved: Optional[list] = None


@dataclass
class WeightComparison:
    path_a: str
    path_b: str
    framework_a: str
    framework_b: str
    findings: list = field(default_factory=list)
    skipped: list = field(default_factory=list)
    #: what the report wants read besides its problems (pairs found by value, mapping entries B does not have)
    notes: list = field(default_factory=list)
    #: rules for a mapping file that pair the value-paired tensors by name
    suggested_rules: list = field(default_factory=list)

    @property
    def problems(self) -> list:
        return [f for f in self.findings if f.kind != OK]

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict:
        return {"path_a": self.path_a, "path_b": self.path_b, "framework_a": self.framework_a,
                "framework_b": self.framework_b, "ok": self.ok, "skipped": self.skipped, "notes": self.notes,
                "suggested_rules": self.suggested_rules, "findings": [vars(f) for f in self.findings]}

    def format(self) -> str:
        matched = sum(1 for f in self.findings if f.kind == OK)
        lines = [f"A: {self.path_a} ({self.framework_a})", f"B: {self.path_b} ({self.framework_b})",
                 f"{matched} parameters match, {len(self.problems)} problems"
                 + (f", {len(self.skipped)} non-weight entries skipped" if self.skipped else "")]
        lines += [f"NOTE: {note}" for note in self.notes]
        lines += [f"  {rule}" for rule in self.suggested_rules[:_RULES_SHOWN]]
        if len(self.suggested_rules) > _RULES_SHOWN:
            lines.append(f"  ... and {len(self.suggested_rules) - _RULES_SHOWN} more (--json lists them all)")
        lines += [f"{f.kind.upper()}: {f.message}" for f in self.problems]
        return "\n".join(lines)


def framework_of(path: PathLike) -> str:
    suffix = Path(path).suffix.lower()
    if suffix not in _SUFFIXES:
        raise ConfigError("checkpoint", str(path), "a MindSpore .ckpt or a PyTorch .pth/.pt file",
                          detail=f"unknown suffix {suffix or '(none)'!r}")
    return _SUFFIXES[suffix]


def load_weights(path: PathLike) -> tuple[str, dict]:
    """``(framework, {name: array})`` of a ``.ckpt`` or ``.pth``/``.pt`` file."""
    framework = framework_of(path)
    if framework == MINDSPORE:
        from msdebug_hooks.ckpt import load_parameters
        return framework, load_parameters(path)
    from msdebug_hooks.compare.torch import load_state_dict
    return framework, load_state_dict(path)


def compare_weights(path_a: PathLike, path_b: PathLike, *, mapping: Optional[Mapping[str, str]] = None,
                    rtol: float = 1e-6, atol: float = 1e-8) -> WeightComparison:
    """Check B's weights against A's (A: usually the source, B: the converted file).

    ``mapping``: A name -> B name; a :class:`~msdebug_hooks.compare.name_rules.NameMapping` (what
    ``load_name_mapping`` returns) brings its rules too.
    """
    framework_a, weights_a = load_weights(path_a)
    framework_b, weights_b = load_weights(path_b)
    report = WeightComparison(str(path_a), str(path_b), framework_a, framework_b)
    for framework, weights in ((framework_a, weights_a), (framework_b, weights_b)):
        for name in [n for n in weights if is_framework_bookkeeping(n, framework)]:
            report.skipped.append(name)
            del weights[name]
    names = mapping if isinstance(mapping, NameMapping) else NameMapping(mapping or {})
    matcher = WeightMatcher(weights_a, framework_a, weights_b, framework_b, rtol, atol)
    plan = matcher.match(names)
    for name_a, name_b, how in plan.pairs:
        report.findings.append(_paired_finding(name_a, weights_a[name_a], name_b, weights_b[name_b], how, rtol, atol))
    _suggest_mapping(report, matcher)
    _name_moved_values(report, matcher)
    for name_a, hint in plan.only_a.items():
        value_a = weights_a[name_a]
        report.findings.append(WeightFinding(MISSING, name_a, None, f"{name_a} {list(value_a.shape)} {value_a.dtype} "
                                             f"is missing from B" + (f" ({hint})" if hint else ""),
                                             list(value_a.shape)))
    for name_b, hint in plan.only_b.items():
        value_b = weights_b[name_b]
        report.findings.append(WeightFinding(EXTRA, None, name_b, f"{name_b} {list(value_b.shape)} {value_b.dtype} "
                                             f"is in B only (not in A)" + (f"; {hint}" if hint else ""),
                                             None, list(value_b.shape)))
    report.notes += [f"the mapping pairs {a} with {target}, which B does not have" for a, target in plan.unresolved]
    return report


def _paired_finding(name_a: str, value_a: np.ndarray, name_b: str, value_b: np.ndarray, how: str, rtol: float,
                    atol: float) -> WeightFinding:
    pair = _compare_pair(name_a, value_a, name_b, value_b, rtol, atol)
    pair.matched_by = how
    if how == BY_RENAMED:
        return WeightFinding(RENAMED, name_a, name_b, f"{name_a} {list(value_a.shape)} is not in B under its name; "
                             f"B has {name_b} {list(value_b.shape)} instead: renamed? ({_pair_summary(pair)})",
                             list(value_a.shape), list(value_b.shape), pair.max_abs_error, matched_by=how)
    if pair.kind != OK and how in _HOW:
        pair.message += f" ({_HOW[how]})"
    return pair


def _name_moved_values(report: WeightComparison, matcher: WeightMatcher) -> None:
    """A pair whose values differ may hold another tensor's value: one SWAPPED line per closed cycle, a note on the
    line of a value that moved without one."""
    differing = [f for f in report.findings if f.kind in (VALUES, SHAPE) and f.matched_by != BY_RENAMED]
    cycles, moved = matcher.find_moved([(f.name_a, f.name_b) for f in differing])
    by_a = {f.name_a: f for f in differing}
    for cycle in cycles:
        members = [by_a[name_a] for name_a, _, _ in cycle]
        verb = "swapped" if len(cycle) == 2 else "rotated"
        where = ", ".join(f"A's {a} is B's {b}{' transposed' if t else ''}" for a, b, t in cycle)
        swapped = WeightFinding(SWAPPED, cycle[0][0], cycle[0][1],
                                f"{' and '.join(f.name_a for f in members)} are {verb}: {where}; put each value "
                                f"under its own name in the conversion", members[0].shape_a, members[0].shape_b,
                                matched_by=members[0].matched_by, moved=[[a, b, t] for a, b, t in cycle])
        report.findings[report.findings.index(members[0])] = swapped
        for finding in members[1:]:
            report.findings.remove(finding)
    for name_a, (name_b, transposed) in moved.items():
        by_a[name_a].message += f"; A's {name_a} value is in B under {name_b}{' transposed' if transposed else ''}"
        by_a[name_a].moved = [[name_a, name_b, transposed]]


def _suggest_mapping(report: WeightComparison, matcher: WeightMatcher) -> None:
    """A note on the pairs found by value, and the rules that would pair them by name (checked: each rule listed
    gives the right partner for the pairs it is the first to fit)."""
    paired = [(f.name_a, f.name_b) for f in report.findings if f.matched_by in (BY_VALUE, BY_SCHEME)]
    if not paired:
        return
    canonical = [(matcher.canon_a[a], matcher.canon_b[b]) for a, b in paired]
    rules, right = [], 0
    for rule in suggest_rules(canonical):
        fits = [(a, b) for a, b in canonical if rule.apply(a) is not None and not any(r.apply(a) for r in rules)]
        good = sum(matcher.resolve(rule.apply(a)) == matcher.b_by_key.get(b) for a, b in fits)
        if good:
            rules.append(rule)
            right += good
    report.suggested_rules = [str(rule) for rule in rules]
    note = (f"{len(paired)} parameters paired by value and by the pattern of their names (A and B name them "
            f"differently)")
    if rules:
        note += f"; a mapping file with the {len(rules)} rules below pairs {right} of them by name"
    report.notes.append(note)


def _pair_summary(finding: WeightFinding) -> str:
    return {OK: "values equal", TRANSPOSED: "values equal transposed"}.get(finding.kind, f"{finding.kind}: "
                                                                         f"{finding.message.split(': ', 1)[-1]}")


def _is_numeric_float(array: np.ndarray) -> bool:
    return array.dtype.kind == "f" or array.dtype.name == "bfloat16"


def _compare_pair(name_a: str, a: np.ndarray, name_b: str, b: np.ndarray, rtol: float, atol: float) -> WeightFinding:
    label = name_a if name_a == name_b else f"{name_a} -> {name_b}"
    shapes = (list(a.shape), list(b.shape))
    if a.dtype != b.dtype and not (_is_numeric_float(a) and _is_numeric_float(b)):
        return WeightFinding(DTYPE, name_a, name_b, f"{label}: dtype {a.dtype} in A, {b.dtype} in B", *shapes)
    a, b, layout = one_layout(a, b)  # a layout of the layout table (Conv1d: [o, i, 1, k] / [o, i, k]) is no problem
    if a.shape != b.shape:
        if a.ndim >= 2 and b.shape == a.shape[::-1]:
            if _close(a.T, b, rtol, atol):
                return WeightFinding(TRANSPOSED, name_a, name_b, f"{label}: transposed: B {list(b.shape)} is A "
                                     f"{list(a.shape)} transposed (values equal after transposing); transpose "
                                     f"it in the conversion", *shapes)
            return WeightFinding(SHAPE, name_a, name_b, f"{label}: shape {list(a.shape)} in A, {list(b.shape)} in B "
                                 f"(the transpose, but the values differ even transposed)", *shapes)
        return WeightFinding(SHAPE, name_a, name_b, f"{label}: shape {list(a.shape)} in A, {list(b.shape)} in B",
                             *shapes)
    fa, fb = a.astype(np.float64), b.astype(np.float64)
    diff = np.abs(fa - fb)
    max_abs = float(np.nanmax(diff)) if diff.size else 0.0
    if _close(a, b, rtol, atol):
        return WeightFinding(OK, name_a, name_b, f"{label}: equal" + (f", {layout}" if layout else ""), *shapes,
                             max_abs_error=max_abs)
    if a.ndim >= 2 and a.shape == a.shape[::-1] and _close(a.T, b, rtol, atol):
        return WeightFinding(TRANSPOSED, name_a, name_b, f"{label}: transposed: B {list(b.shape)} is A "
                             f"{list(a.shape)} transposed (square, so the shapes agree; values equal after "
                             f"transposing); transpose it in the conversion", *shapes, max_abs_error=max_abs)
    order = _gate_order(name_a, a, b, rtol, atol)
    if order:
        return WeightFinding(VALUES, name_a, name_b, f"{label}: gate order: B's gate blocks are A's in the order "
                             f"{order} (a recurrent layer's gates reordered in the conversion)", *shapes,
                             max_abs_error=max_abs)
    from msdebug_hooks.compare.metrics import compare_arrays
    result = compare_arrays(b, a)
    return WeightFinding(VALUES, name_a, name_b, f"{label}: values differ: max abs error {max_abs:.3g}, cosine "
                         f"{result.cosine:.6f}" + (f", {layout}" if layout else ""), *shapes, max_abs_error=max_abs)


_close = values_close

#: gate names of recurrent layers, by the number of gate blocks along the first axis (PyTorch's order)
_GATES = {4: "ifgo", 3: "rzn"}


def _gate_order(name: str, a: np.ndarray, b: np.ndarray, rtol: float, atol: float) -> str:
    """``"i, g, f, o"`` when ``b`` is ``a`` with its gate blocks (first axis, 4 for LSTM, 3 for GRU) permuted: a
    conversion that reordered a recurrent layer's gates (Ascend's DynamicRNN order is i, g, f, o); "" otherwise."""
    import itertools
    leaf = name.rsplit(".", 1)[-1]
    if not leaf.startswith(("weight_ih", "weight_hh", "bias_ih", "bias_hh", "w_ih", "w_hh", "b_ih", "b_hh")):
        return ""
    for count, gates in _GATES.items():
        if a.shape[0] % count:
            continue
        blocks = np.split(a, count, axis=0)
        for order in itertools.permutations(range(count)):
            if list(order) != list(range(count)) and _close(np.concatenate([blocks[i] for i in order]), b, rtol,
                                                             atol):
                return ", ".join(gates[i] for i in order)
    return ""
