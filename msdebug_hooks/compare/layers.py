"""Two layer captures side by side: match their layers, compare each pair, name the first layer that diverges.

Matching, strongest first: the user's mapping (a name of A -> a name of B); the same canonical name (through the
built-in MindSpore <-> PyTorch map of :mod:`msdebug_hooks.compare.naming`, same record kind); then, for what is
left, execution order and shape (the next unmatched record of B, after the last matched one, of the same kind and
shape). Each pair is compared with :func:`msdebug_hooks.compare.metrics.compare_arrays` (A is the run under test,
B the reference). "First divergence" is the first forward output, in A's execution order, whose verdict is
``error`` (or, with ``warnings_diverge``, ``warning`` too) -- or that could not be compared -- and if no forward
output diverges, the first parameter gradient or parameter that does. A comparison is ``ok`` only when nothing
diverges and every record found its partner.
"""
from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from msdebug_hooks.compare.layer_capture import (FORWARD_OUTPUT, KINDS, Capture, CaptureError, LayerRecord,
                                                 read_capture)
from msdebug_hooks.compare.metrics import ERROR, NOT_COMPARABLE, WARNING, Tolerance, compare_arrays, not_comparable
from msdebug_hooks.compare.naming import canonical_name
from msdebug_hooks.errors import ConfigError

MATCHED_BY_MAPPING = "mapping"
MATCHED_BY_NAME = "name"
MATCHED_BY_ORDER = "order+shape"


@dataclass
class LayerPair:
    """One matched pair and its comparison."""

    record_a: LayerRecord
    record_b: LayerRecord
    matched_by: str
    result: Any  # metrics.TensorComparison

    def to_dict(self) -> dict:
        data = {"order": self.record_a.order, "kind": self.record_a.kind, "name_a": self.record_a.name,
                "name_b": self.record_b.name, "matched_by": self.matched_by}
        data.update(self.result.as_dict())
        return data


@dataclass
class LayerComparison:
    """Every pair of one step, what matched nothing, and the first divergence."""

    capture_a: str
    capture_b: str
    framework_a: str
    framework_b: str
    step_a: int
    step_b: int
    pairs: list = field(default_factory=list)
    unmatched_a: list = field(default_factory=list)
    unmatched_b: list = field(default_factory=list)
    warnings_diverge: bool = False

    def diverges(self, pair: LayerPair) -> bool:
        bad = (ERROR, NOT_COMPARABLE, WARNING) if self.warnings_diverge else (ERROR, NOT_COMPARABLE)
        return pair.result.verdict in bad

    @property
    def first_divergence(self) -> Optional[LayerPair]:
        for kinds in ((FORWARD_OUTPUT,), tuple(k for k in KINDS if k != FORWARD_OUTPUT)):
            for pair in self.pairs:
                if pair.record_a.kind in kinds and self.diverges(pair):
                    return pair
        return None

    @property
    def ok(self) -> bool:
        """No pair diverges and every record found its partner (a layer missing on one side is a difference too)."""
        return self.first_divergence is None and not self.unmatched_a and not self.unmatched_b

    def to_dict(self) -> dict:
        first = self.first_divergence
        return {"capture_a": self.capture_a, "capture_b": self.capture_b, "framework_a": self.framework_a,
                "framework_b": self.framework_b, "step_a": self.step_a, "step_b": self.step_b,
                "pairs": [pair.to_dict() for pair in self.pairs],
                "first_divergence": first.to_dict() if first else None,
                "unmatched_a": [r.name for r in self.unmatched_a], "unmatched_b": [r.name for r in self.unmatched_b]}

    def to_csv(self) -> str:
        rows = [pair.to_dict() for pair in self.pairs]
        out = io.StringIO()
        columns = list(rows[0]) if rows else ["order", "kind", "name_a", "name_b", "matched_by", "verdict"]
        writer = csv.DictWriter(out, fieldnames=columns)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: (" ".join(map(str, v)) if isinstance(v, list) else v) for k, v in row.items()})
        return out.getvalue()

    def format(self) -> str:
        lines = [f"A: {self.capture_a} ({self.framework_a}, step {self.step_a})",
                 f"B: {self.capture_b} ({self.framework_b}, step {self.step_b})",
                 f"{len(self.pairs)} pairs compared; {len(self.unmatched_a)} only in A, "
                 f"{len(self.unmatched_b)} only in B"]
        table = [("order", "kind", "layer A", "layer B", "by", "verdict", "cosine", "max abs err", "max rel err")]
        for pair in self.pairs:
            r = pair.result
            table.append((str(pair.record_a.order), pair.record_a.kind, pair.record_a.name, pair.record_b.name,
                          pair.matched_by, r.verdict, _num(r.cosine, ".6f"), _num(r.max_abs_error, ".3g"),
                          _num(r.max_rel_error, ".3g")))
        widths = [max(len(row[col]) for row in table) for col in range(len(table[0]))]
        lines += ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in table]
        for label, records in (("only in A", self.unmatched_a), ("only in B", self.unmatched_b)):
            if records:
                lines.append(f"{label}: " + ", ".join(f"{r.name} {list(r.shape)}" for r in records))
        first = self.first_divergence
        if first is None and self.ok:
            lines.append("no layer diverges")
        elif first is None:
            lines.append("no matched pair diverges, but the records listed above have no partner (a layer in one "
                         "run only, or a capture cut short): compare the structure, or pass --mapping")
        else:
            lines.append(f"first divergence: {first.record_a.name} ({first.record_a.kind}, order "
                         f"{first.record_a.order}) vs {first.record_b.name}: {first.result.verdict}: "
                         f"{first.result.reason}")
            lines.append(self._reading(first))
        return "\n".join(lines)

    def _reading(self, first: LayerPair) -> str:
        """What the first divergence says about where to look."""
        name = first.record_a.name
        if first.record_a.kind != FORWARD_OUTPUT:
            return (f"every forward output agrees; {first.record_a.kind} {name} differs: look at the backward pass "
                    f"or the update of that parameter")
        earlier = [pair for pair in self.pairs
                   if pair.record_a.kind == FORWARD_OUTPUT and pair.record_a.order < first.record_a.order]
        if not earlier:
            return f"the first recorded layer already differs: check the inputs, then {name} itself"
        return (f"the {len(earlier)} layer output(s) before it agree: the difference starts in {name} (its "
                f"computation, its parameters, or state such as BatchNorm running statistics)")


def _num(value: Optional[float], spec: str) -> str:
    return "" if value is None else format(value, spec)


def _pick_step(capture: Capture, step: Optional[int], option: str) -> int:
    if not capture.steps:
        raise CaptureError(capture.directory, "a capture with at least one finished step", detail="no records")
    if step is None:
        return capture.steps[0]
    if step not in capture.steps:
        raise ConfigError(option, step, f"a step in {capture.directory}: {', '.join(map(str, capture.steps))}")
    return step


def match_records(records_a: list, records_b: list, framework_a: str, framework_b: str,
                  mapping: Optional[Mapping[str, str]] = None) -> tuple[list, list, list]:
    """``(pairs [(a, b, matched_by)], unmatched_a, unmatched_b)`` by mapping, then name, then order and shape."""
    mapping = mapping or {}
    free_b = {id(b): b for b in records_b}
    pairs: list = []
    by_name_b = {(b.kind, b.name): b for b in records_b}
    by_canonical_b = {(b.kind, _key(b, framework_b)): b for b in records_b}
    rest_a = []
    for a in records_a:
        b = by_name_b.get((a.kind, mapping[a.name])) if a.name in mapping else None
        how = MATCHED_BY_MAPPING
        if b is None and a.name not in mapping:
            b, how = by_canonical_b.get((a.kind, _key(a, framework_a))), MATCHED_BY_NAME
        if b is not None and id(b) in free_b:
            del free_b[id(b)]
            pairs.append((a, b, how))
        else:
            rest_a.append(a)
    order_b = [b for b in records_b if id(b) in free_b]
    unmatched_a = []
    for a in rest_a:  # between the B positions of A's nearest matched neighbours
        same_kind = [(pa.order, b.order) for pa, b, _ in pairs if pa.kind == a.kind]
        after = max((ob for oa, ob in same_kind if oa < a.order), default=-1)
        before = min((ob for oa, ob in same_kind if oa > a.order), default=float("inf"))
        candidate = next((b for b in order_b if id(b) in free_b and b.kind == a.kind and b.shape == a.shape
                          and after < b.order < before), None)
        if candidate is None:
            unmatched_a.append(a)
        else:
            del free_b[id(candidate)]
            pairs.append((a, candidate, MATCHED_BY_ORDER))
    pairs.sort(key=lambda pair: (pair[0].kind != FORWARD_OUTPUT, pair[0].order))
    return pairs, unmatched_a, [b for b in records_b if id(b) in free_b]


def _key(record: LayerRecord, framework: str) -> str:
    return record.name if record.kind == FORWARD_OUTPUT else canonical_name(record.name, framework)


def compare_layers(capture_a: Any, capture_b: Any, *, step_a: Optional[int] = None, step_b: Optional[int] = None,
                   mapping: Optional[Mapping[str, str]] = None, tolerance: Optional[Tolerance] = None,
                   kinds: tuple = KINDS, warnings_diverge: bool = False) -> LayerComparison:
    """Compare step ``step_a`` of capture A with ``step_b`` of B (default: each capture's first step).

    ``capture_a``/``capture_b`` are capture directories (or :class:`Capture` objects). Unreadable tensor files and
    pairs of different shape or dtype become "not comparable" rows (which count as divergence); a directory that is
    not a capture raises ``CaptureError``.
    """
    cap_a = capture_a if isinstance(capture_a, Capture) else read_capture(capture_a)
    cap_b = capture_b if isinstance(capture_b, Capture) else read_capture(capture_b)
    sa = _pick_step(cap_a, step_a, "--step")
    sb = _pick_step(cap_b, step_b if step_b is not None else (step_a if step_a in cap_b.steps else None), "--step-b")
    pairs, only_a, only_b = match_records(cap_a.step_records(sa, kinds), cap_b.step_records(sb, kinds),
                                          cap_a.framework, cap_b.framework, mapping)
    report = LayerComparison(str(cap_a.directory), str(cap_b.directory), cap_a.framework, cap_b.framework, sa, sb,
                             unmatched_a=only_a, unmatched_b=only_b, warnings_diverge=warnings_diverge)
    for a, b, how in pairs:
        report.pairs.append(LayerPair(a, b, how, _compare_pair(cap_a, a, cap_b, b, tolerance)))
    return report


def _compare_pair(cap_a: Capture, a: LayerRecord, cap_b: Capture, b: LayerRecord, tolerance: Optional[Tolerance]):
    arrays = []
    for cap, record in ((cap_a, a), (cap_b, b)):
        try:
            arrays.append(cap.load(record))
        except CaptureError as exc:
            return not_comparable(str(exc), shape_a=a.shape, shape_b=b.shape, dtype_a=a.dtype, dtype_b=b.dtype)
    return compare_arrays(arrays[0], arrays[1], tolerance)
