"""Two layer captures side by side: match their layers, compare each pair, name where the runs part.

Matching, strongest first: the user's mapping (a name of A -> a name of B, exact pairs then prefix rules); the same
canonical name (through the built-in MindSpore <-> PyTorch map of :mod:`msdebug_hooks.compare.naming`, same record
kind); then, for what is left, execution order and shape (the next unmatched record of B, between the B positions of
A's nearest matched neighbours, of the same kind and shape). Each pair is compared with
:func:`msdebug_hooks.compare.metrics.compare_arrays` (A is the run under test, B the reference); its verdict colours
its row. Where the runs part is decided by :mod:`msdebug_hooks.compare.attribution`: the first record whose error
as a whole appears or jumps well above both the noise of its arithmetic and what the records before it carried.
A comparison is ``ok`` when nothing diverges and every record found its partner (a kind that one capture lacks
entirely, such as gradients from a GRAPH_MODE ``Model.train``, is left out and said so), parameter-free layers
aside: an identity, a dropout, a cell activation where the other side calls a function, a pool against a mean,
left without a partner, are listed as a note (:mod:`msdebug_hooks.compare.layer_roles`), and named as the cause only
where the next paired layer differs through its input and their output is not explained.
"""
from __future__ import annotations

import csv
import dataclasses
import functools
import io
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from msdebug_hooks.compare import attribution
from msdebug_hooks.compare.composites import covered_note
from msdebug_hooks.compare.layer_capture import (COMPARED_KINDS, FORWARD_OUTPUT, PARAMETER, PARAMETER_GRADIENT, Capture,
                                                 CaptureError, LayerRecord, read_capture)
from msdebug_hooks.compare.layer_matching import MATCHED_BY_ROLE, fold_containers, match_records
from msdebug_hooks.compare.layer_roles import FreeRecord, find_suspects, layer_type, squeezable, unpaired_free
from msdebug_hooks.compare.layouts import one_layout, same_row_major
from msdebug_hooks.compare.metrics import ERROR, NOT_COMPARABLE, WARNING, Tolerance, compare_arrays, not_comparable
from msdebug_hooks.errors import ConfigError

_ENTRY_KIND = {FORWARD_OUTPUT: attribution.FORWARD, PARAMETER_GRADIENT: attribution.GRADIENT,
               PARAMETER: attribution.PARAMETER}


@dataclass
class LayerPair:
    """One matched pair and its comparison."""

    record_a: LayerRecord
    record_b: LayerRecord
    matched_by: str
    result: Any  # metrics.TensorComparison
    type_a: str = ""   # the classes of the layers behind the records, where the captures name them
    type_b: str = ""
    run_a: tuple = ()  # the layers a side stands for when a composite on the other covers them (.composites)
    run_b: tuple = ()

    @property
    def types_differ(self) -> bool:
        """Two parameter-free layers paired by role whose classes differ (a ReLU with a GELU)."""
        return self.matched_by == MATCHED_BY_ROLE and bool(self.type_a) and self.type_a.lower() != self.type_b.lower()

    def to_dict(self) -> dict:
        data = {"order": self.record_a.order, "kind": self.record_a.kind, "name_a": self.record_a.name,
                "name_b": self.record_b.name, "matched_by": self.matched_by}
        data.update(self.result.as_dict())
        if self.type_a or self.type_b:
            data.update(type_a=self.type_a, type_b=self.type_b)
        if self.run_a or self.run_b:
            data.update(run_a=list(self.run_a), run_b=list(self.run_b))
        return data

    def entry(self) -> attribution.Entry:
        return attribution.Entry(self.record_a.name, _ENTRY_KIND.get(self.record_a.kind, attribution.FORWARD),
                                 self.result, source_dtype(self.record_a), source_dtype(self.record_b))


def source_dtype(record: LayerRecord) -> str:
    """The dtype the layer computed in (a bfloat16 tensor is stored as float32 with its source dtype kept)."""
    return getattr(record, "source_dtype", None) or record.dtype


@dataclass
class LayerComparison:
    """Every pair of one step, what matched nothing, and where the runs part."""

    capture_a: str
    capture_b: str
    framework_a: str
    framework_b: str
    step_a: int
    step_b: int
    pairs: list = field(default_factory=list)
    unmatched_a: list = field(default_factory=list)
    unmatched_b: list = field(default_factory=list)
    #: --strict: the first pair whose verdict is a warning or worse diverges (the per-pair rule, no noise model)
    warnings_diverge: bool = False
    #: record kinds one capture holds and the other lacks entirely: left out of the comparison
    kinds_left_out: dict = field(default_factory=dict)
    #: own error or inherited, for the layer the finding names (``compare_layers(..., replay=True)``)
    replay: Any = None
    #: what the matching had to resolve (a container standing for its layers), said in the report
    notes: list = field(default_factory=list)
    #: parameter-free layers without a partner (``FreeRecord``): a note, never a difference by themselves
    unpaired_free: list = field(default_factory=list)
    #: unpaired parameter-free layers the finding's difference may start at (``layer_roles.find_suspects``)
    suspects: list = field(default_factory=list)

    def diverges(self, pair: LayerPair) -> bool:
        bad = (ERROR, NOT_COMPARABLE, WARNING) if self.warnings_diverge else (ERROR, NOT_COMPARABLE)
        return pair.result.verdict in bad

    @property
    def finding(self) -> Optional[attribution.Finding]:
        """Where the runs part (None: every difference is within the noise of its arithmetic)."""
        if self.warnings_diverge:
            return self._strict_finding()
        return attribution.first_divergence([pair.entry() for pair in self.pairs])

    def _strict_finding(self) -> Optional[attribution.Finding]:
        for kinds in ((FORWARD_OUTPUT,), (PARAMETER, PARAMETER_GRADIENT)):
            for index, pair in enumerate(self.pairs):
                if pair.record_a.kind in kinds and self.diverges(pair):
                    entry = pair.entry()
                    kind = {attribution.GRADIENT: attribution.GRADIENT_FINDING,
                            attribution.PARAMETER: attribution.PARAMETER_FINDING}.get(entry.kind, attribution.LAYER)
                    return attribution.Finding(kind, index, entry, attribution.error_of(entry),
                                               attribution.noise_level([p.entry() for p in self.pairs], index), 0.0)
        return None

    @property
    def first_divergence(self) -> Optional[LayerPair]:
        """The pair the finding names."""
        finding = self.finding
        return None if finding is None else self.pairs[finding.index]

    @property
    def ok(self) -> bool:
        """Nothing diverges and every record found its partner (a layer missing on one side is a difference too),
        parameter-free layers aside (``unpaired_free``: a note)."""
        return self.finding is None and not self.unmatched_a and not self.unmatched_b

    @property
    def culprit(self) -> Optional[FreeRecord]:
        """The first suspect: the unpaired parameter-free layer the finding names as where the difference starts."""
        return self.suspects[0] if self.suspects else None

    def explanation(self) -> str:
        """The finding in one sentence: where it starts (an unpaired parameter-free layer, when one is the cause),
        what computes differently (two activations of different types), the error and the noise it stands out of."""
        finding = self.finding
        if finding is None:
            return ""
        pair = self.pairs[finding.index]
        text = finding.describe()
        if pair.types_differ:
            text = (f"A's {pair.record_a.name} computes {pair.type_a} where B's {pair.record_b.name} computes "
                    f"{pair.type_b}: {text}")
        if self.culprit is not None:
            other = "B" if self.culprit.side == "A" else "A"
            also = [s.describe() for s in self.suspects[1:]]
            text = (f"the difference starts at {self.culprit.describe()}, which has no partner in {other} and "
                    f"changes its input; {pair.record_a.name} differs through its input"
                    + (f" (also unpaired there: {', '.join(also)})" if also else "") + f": {text}")
        return text

    def headline(self) -> str:
        """One line, the same the exit code says: the first divergence, unpaired records, or agreement."""
        finding = self.finding
        if finding is not None:
            first = self.pairs[finding.index]
            where = (self.culprit.record.name if self.culprit is not None and self.culprit.side == "A"
                     else first.record_a.name)
            return f"first divergence: {where} ({finding.kind}): {self.explanation()}"
        if self.unmatched_a or self.unmatched_b:
            return "no matched record diverges, but some have no partner (listed above): the structures differ"
        return "no layer diverges"

    def free_note(self) -> Optional[str]:
        """The note listing the parameter-free layers without a partner, or None."""
        if not self.unpaired_free:
            return None
        listed = ", ".join(free.describe() for free in self.unpaired_free[:12])
        more = f" and {len(self.unpaired_free) - 12} more" if len(self.unpaired_free) > 12 else ""
        return (f"{len(self.unpaired_free)} parameter-free layer(s) without a partner, not a difference by "
                f"themselves (their values reach the next paired layer; one whose parameters are all paired and "
                f"compared counts as one, role 'parameters paired'): {listed}{more}")

    def to_dict(self) -> dict:
        finding = self.finding
        first = None if finding is None else self.pairs[finding.index]
        return {"capture_a": self.capture_a, "capture_b": self.capture_b, "framework_a": self.framework_a,
                "framework_b": self.framework_b, "step_a": self.step_a, "step_b": self.step_b,
                "pairs": [pair.to_dict() for pair in self.pairs],
                "first_divergence": first.to_dict() if first else None,
                "finding": None if finding is None else {
                    "kind": finding.kind, "name": finding.entry.name, "relative_l2_error": _json_float(finding.error),
                    "upstream": finding.upstream, "noise_floor": finding.floor, "explanation": self.explanation()},
                "ok": self.ok, "headline": self.headline(),
                "culprit": None if self.culprit is None else {
                    "side": self.culprit.side, "name": self.culprit.record.name, "role": self.culprit.role,
                    "layer_type": self.culprit.layer_type},
                "unpaired_parameter_free": [{"side": f.side, "name": f.record.name, "role": f.role,
                                             "layer_type": f.layer_type} for f in self.unpaired_free],
                "kinds_left_out": self.kinds_left_out, "notes": self.notes,
                "replay": None if self.replay is None else self.replay.as_dict(),
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
        lines += [f"note: {note}" for note in self.notes + [self.free_note()] if note]
        for kind, side in self.kinds_left_out.items():
            lines.append(f"{kind} records: only {side} has them (e.g. no gradients from a GRAPH_MODE Model.train): "
                         f"compared the rest")
        finding = self.finding
        table = [("order", "kind", "layer A", "layer B", "by", "verdict", "|a-b|/|b|", "cosine", "max abs err")]
        for index, pair in enumerate(self.pairs):
            r = pair.result
            mark = " <<" if finding is not None and index == finding.index else ""
            table.append((str(pair.record_a.order), pair.record_a.kind, pair.record_a.name, pair.record_b.name,
                          pair.matched_by, r.verdict + mark, _num(r.relative_l2_error, ".2e"), _num(r.cosine, ".6f"),
                          _num(r.max_abs_error, ".3g")))
        widths = [max(len(row[col]) for row in table) for col in range(len(table[0]))]
        lines += ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in table]
        for label, records in (("only in A", self.unmatched_a), ("only in B", self.unmatched_b)):
            if records:
                lines.append(f"{label}: " + ", ".join(f"{r.name} {list(r.shape)}" for r in records))
        lines += self._headline(finding)
        return "\n".join(lines)

    def _headline(self, finding: Optional[attribution.Finding]) -> list:
        entries = [pair.entry() for pair in self.pairs]
        forward = [e for e in entries if e.kind == attribution.FORWARD]
        if finding is None:
            level = attribution.noise_level(entries, len(entries))
            agree = (f"every forward output agrees to {level:.1e} (|a-b|/|b|, the noise of "
                     f"{attribution.coarser_dtype(self._dtype('a'), self._dtype('b'))} arithmetic)"
                     if forward else "no forward output compared")
            if self.ok:
                return [f"no layer diverges: {agree}"]
            return [f"no matched pair diverges ({agree}), but the records listed above have no partner (a layer in "
                    f"one run only, or a capture cut short): compare the structure, or pass --mapping"]
        first = self.pairs[finding.index]
        lines = [f"first divergence: {first.record_a.name} ({first.record_a.kind}, order {first.record_a.order}) vs "
                 f"{first.record_b.name}: {finding.kind}",
                 f"  {self.explanation()}"]
        inherited = self.replay is not None and self.replay.verdict == "inherited"
        earlier = [e for e in entries[:finding.index] if e.kind == attribution.FORWARD]
        if finding.kind == attribution.LAYER and not earlier:
            lines.append(f"  the first recorded layer already differs: check the inputs, then {first.record_a.name}")
        elif finding.kind == attribution.LAYER and inherited:
            lines.append(f"  the recorded layers before it agree, but its input differs: the difference starts in "
                         f"the code between {earlier[-1].name} and {first.record_a.name}")
        elif finding.kind == attribution.LAYER:
            lines.append(f"  the layers before it agree: the difference starts in {first.record_a.name} (its "
                         f"computation, its parameters, or state such as BatchNorm running statistics)")
        elif finding.kind == attribution.GRADIENT_FINDING:
            lines.append("  look at the backward pass: a custom bprop, a stop_gradient, the loss reduction or scale")
        if self.replay is not None:
            lines.append(f"  {self.replay.describe()}")
        return lines

    def _dtype(self, side: str) -> str:
        """The coarsest dtype side ``side`` computed in."""
        return functools.reduce(attribution.coarser_dtype,
                                (source_dtype(getattr(pair, f"record_{side}")) for pair in self.pairs), "float64")


def _json_float(value: float) -> Any:
    return value if value == value and value not in (float("inf"), float("-inf")) else str(value)


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


def compare_layers(capture_a: Any, capture_b: Any, *, step_a: Optional[int] = None, step_b: Optional[int] = None,
                   mapping: Optional[Mapping[str, str]] = None, tolerance: Optional[Tolerance] = None,
                   kinds: tuple = COMPARED_KINDS, warnings_diverge: bool = False, replay: bool = False,
                   replay_a: Any = None, replay_b: Any = None) -> LayerComparison:
    """Compare step ``step_a`` of capture A with ``step_b`` of B (default: each capture's first step).

    ``capture_a``/``capture_b`` are capture directories (or :class:`Capture` objects). Unreadable tensor files and
    pairs of different shape or dtype become "not comparable" rows (which count as divergence); a directory that is
    not a capture raises ``CaptureError``.

    Replay (the layer the finding names): ``replay_a`` (A's model, a PyTorch module or MindSpore cell) is run on B's
    captured inputs of that layer, or ``replay_b`` on A's; ``replay=True`` without a model compares the layer's
    recorded inputs (captures made with ``record_inputs=True``). The verdict (own error or inherited) is
    ``report.replay``.
    """
    cap_a = capture_a if isinstance(capture_a, Capture) else read_capture(capture_a)
    cap_b = capture_b if isinstance(capture_b, Capture) else read_capture(capture_b)
    sa = _pick_step(cap_a, step_a, "--step")
    sb = _pick_step(cap_b, step_b if step_b is not None else (step_a if step_a in cap_b.steps else None), "--step-b")
    records_a, records_b, notes = fold_containers(cap_a.step_records(sa, kinds), cap_b.step_records(sb, kinds),
                                                  cap_a.containers, cap_b.containers)
    left_out = _kinds_one_side_lacks(records_a, records_b)
    pairs, only_a, only_b, runs, covered = match_records([r for r in records_a if r.kind not in left_out],
                                          [r for r in records_b if r.kind not in left_out],
                                          cap_a.framework, cap_b.framework, mapping,
                                          layer_types=(cap_a.layer_types, cap_b.layer_types))
    paired = {id(record) for a, b, _ in pairs for record in (a, b)}
    free = (unpaired_free("A", only_a, records_a, cap_a.layer_types, paired)
            + unpaired_free("B", only_b, records_b, cap_b.layer_types, paired))
    freed = {id(f.record) for f in free}
    report = LayerComparison(str(cap_a.directory), str(cap_b.directory), cap_a.framework, cap_b.framework, sa, sb,
                             unmatched_a=[r for r in only_a if id(r) not in freed],
                             unmatched_b=[r for r in only_b if id(r) not in freed],
                             warnings_diverge=warnings_diverge, kinds_left_out=left_out, notes=notes,
                             unpaired_free=free)
    if covered:
        report.notes.append(covered_note(covered))
    for pair in pairs:
        a, b, how = pair
        report.pairs.append(LayerPair(a, b, how, _compare_pair(cap_a, a, cap_b, b, tolerance),
                                      layer_type(a, cap_a.layer_types) or "", layer_type(b, cap_b.layer_types) or "",
                                      *runs.get(id(pair), ((), ()))))
    finding = report.finding if (replay or replay_a is not None or replay_b is not None or free) else None
    paths = {param.name: path for path, param in getattr(replay_a, "parameters_and_names", lambda: ())()}
    replayed = (_replayed_pair(report, finding, paths) if (replay or replay_a is not None or replay_b is not None)
                else None)
    if replayed is not None:
        from msdebug_hooks.compare.layer_replay import replay_verdict
        report.replay = replay_verdict(replayed, cap_a, cap_b, sa, sb, model_a=replay_a, model_b=replay_b)
    if finding is not None and finding.kind == attribution.LAYER and free:
        report.suspects = find_suspects(report, finding.index, (cap_a, sa), (cap_b, sb))
    return report


def _replayed_pair(report: LayerComparison, finding: Optional[attribution.Finding],
                   paths: Mapping[str, str]) -> Optional[LayerPair]:
    """The forward pair the replay runs for ``finding``: its own for a layer or precision finding; for a parameter
    that differs at the start of the step, the layer holding it (its output pair), so the reading says whether that
    layer, run on the same inputs, computes differently with the weight it was given."""
    if finding is None:
        return None
    if finding.kind in (attribution.LAYER, attribution.PRECISION):
        return report.pairs[finding.index]
    if finding.kind == attribution.PARAMETER_FINDING:
        name = report.pairs[finding.index].record_a.name   # a part of a fused tensor: qkv.weight[0:96] -> qkv[0:96]
        part = name[name.rindex("["):] if name.endswith("]") and "[" in name else ""
        base = name[:len(name) - len(part)]
        holder = paths.get(base, base).rpartition(".")[0] + part   # A's parameter name -> its path (a CellList's
        #                                                             parameters are named without its own name)
        return next((pair for pair in report.pairs
                     if pair.record_a.kind == FORWARD_OUTPUT and pair.record_a.name == holder), None)
    return None


def _kinds_one_side_lacks(records_a: list, records_b: list) -> dict:
    """``{kind: "A" | "B"}`` for each kind of record only one side holds at all (the other could not record it)."""
    kinds_a, kinds_b = {r.kind for r in records_a}, {r.kind for r in records_b}
    out = {kind: "A" for kind in kinds_a - kinds_b}
    out.update({kind: "B" for kind in kinds_b - kinds_a})
    if FORWARD_OUTPUT in out:   # a capture without forward outputs is not "the rest": compare what there is
        return {}
    return out


def _compare_pair(cap_a: Capture, a: LayerRecord, cap_b: Capture, b: LayerRecord, tolerance: Optional[Tolerance]):
    arrays = []
    for cap, record in ((cap_a, a), (cap_b, b)):
        try:
            arrays.append(cap.load(record))
        except CaptureError as exc:
            return not_comparable(str(exc), shape_a=a.shape, shape_b=b.shape, dtype_a=a.dtype, dtype_b=b.dtype)
    value_a, value_b, note = one_layout(arrays[0], arrays[1])   # e.g. a Conv1d weight: [o, i, 1, k] vs [o, i, k]
    if squeezable(value_a.shape, value_b.shape):                # a pool's [N, C, 1, 1] against a mean's [N, C]
        value_a, note = value_a.reshape(value_b.shape), (f"compared as {list(value_b.shape)}: the shapes differ "
                                                         f"only by unit axes ({list(value_a.shape)} in A)")
    elif a.kind == FORWARD_OUTPUT and same_row_major(value_a.shape, value_b.shape):   # [N, H*W, C] vs [N, H, W, C]
        value_a, note = value_a.reshape(value_b.shape), (f"compared as {list(value_b.shape)}: the same elements "
                                                         f"in the same order, axes merged ({list(value_a.shape)} in A)")
    result = compare_arrays(value_a, value_b, tolerance)
    return dataclasses.replace(result, reason=f"{result.reason}; {note}") if note else result
