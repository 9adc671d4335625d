"""What a comparison of two dumps found: the compared tensor pairs and, per iteration and rank, the first operator
where the runs part, with the source line behind it and whether the difference was made there or came in.

The operator is found with the noise model of :mod:`msdebug_hooks.compare.attribution`, read in execution order:
the first node whose output differs by more than the noise floor of its dtype (``|a - b| / |b|``; float32: 1e-5;
operators of the backward pass, ``Gradients/`` scopes, the gradient floor). Then its inputs say why:

* an input that differs beyond the floor comes from a weight or a graph input (through its ``Load``): the runs
  start the step from different values of that parameter; it is named as the root, this operator as its first
  consumer;
* an input that differs comes from an operator that was not dumped or not matched: the difference came in through
  it;
* every input agrees to the floor and the output's error is more than ``JUMP`` times theirs: this operator itself
  computes differently. An output only a few times noisier than its inputs (rounding amplified by cancellation) is
  inherited noise, and the scan goes on.

The exit of operators one run computes *instead of* the other's (ReLU where the other has GeLU, paired by
:mod:`~msdebug_hooks.compare.dump_replacements`) is judged on the inputs of the whole replaced piece; when they agree,
the replacement is the answer ("A computes ReLU where B computes GeLU (cell act)"). With ``exact`` (two runs that are
bit-equal where nothing differs) every floor is 0: any bit of difference parts, and an operator whose inputs are
bit-equal but whose output is not computes differently.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Optional

from msdebug_hooks.compare import attribution
from msdebug_hooks.compare.dump_replacements import Replacement
from msdebug_hooks.compare.metrics import ERROR, NOT_COMPARABLE, PASS, WARNING, TensorComparison
from msdebug_hooks.dump.index import PARAMETER, NodeInfo

_LIBRARY_PARTS = ("site-packages", "dist-packages")
_BACKWARD_SCOPE = "Gradients/"
#: scopes the train cell wraps the user's network in (TrainOneStepCell.network, WithLossCell._backbone)
_WRAPPERS = ("network", "_backbone")


def cell_of(node: str) -> str:
    """The cell an operator belongs to, as the user names it: ``Default/network-WithLossCell/_backbone-Net/
    fc2-Dense/MatMul-op0`` -> ``fc2``; gradients name their forward cell; ``""`` for a node outside any cell."""
    parts = node.split("/")[:-1]
    if parts and parts[0] == _BACKWARD_SCOPE.rstrip("/"):
        parts = parts[1:]
    if parts and parts[0] == "Default":
        parts = parts[1:]
    names = [part.split("-", 1)[0] for part in parts if not part.startswith("Grad_")]
    while names and names[0] in _WRAPPERS:
        names = names[1:]
    return ".".join(names)


def user_source(info: Optional[NodeInfo]) -> str:
    """``file:line  code`` of the innermost frame outside installed packages (the user's line), or ``""``."""
    if info is None:
        return ""
    frames = [f for f in info.stack if not any(part in f.file_path for part in _LIBRARY_PARTS)]
    if not frames:
        return ""
    frame = frames[-1]
    return f"{frame.file_path}:{frame.line_no}  {frame.code_line.strip()}"


@dataclass(frozen=True)
class TensorPair:
    """One compared tensor: where it is in both dumps and the comparison."""

    iteration: int
    rank_a: int
    rank_b: int
    graph_id: int
    order: int                # position in A's iteration: (group, execution index) flattened for sorting
    node_a: str
    node_b: str
    op_type: str
    io: str
    slot: int
    matched_by: str
    comparison: TensorComparison
    file_a: str = ""
    file_b: str = ""

    def as_row(self) -> dict[str, Any]:
        row = {"iteration": self.iteration, "rank_a": self.rank_a, "rank_b": self.rank_b, "graph_id": self.graph_id,
               "order": self.order, "node_a": self.node_a, "node_b": self.node_b, "op_type": self.op_type,
               "io": self.io, "slot": self.slot, "matched_by": self.matched_by}
        row.update(self.comparison.as_dict())
        row["file_a"], row["file_b"] = self.file_a, self.file_b
        return row

    def error(self, exact: bool = False) -> float:
        """Its relative L2 error as the attribution reads it (inf: not comparable or NaN/Inf disagree); ``exact``:
        a tiny tensor's difference counts too (no rounding of near-zero values to 0)."""
        return attribution.error_of(attribution.Entry(self.node_a, attribution.FORWARD, self.comparison),
                                    0.0 if exact else 1e-6)

    def floor(self, exact: bool = False) -> float:
        """The noise floor of its dtype (the gradient floor in the backward pass); 0 when ``exact``."""
        if exact:
            return 0.0
        c = self.comparison
        table = attribution.GRADIENT_FLOOR if _BACKWARD_SCOPE in self.node_a else attribution.FORWARD_FLOOR
        return table[attribution.coarser_dtype(c.dtype_a, c.dtype_b)]


@dataclass(frozen=True)
class Divergence:
    """The first operator (in execution order) whose output parts, with its source lines and its inputs' state."""

    iteration: int
    rank_a: int
    rank_b: int
    node_a: str
    node_b: str
    op_type: str
    outputs: tuple[TensorPair, ...]
    source_a: str
    source_b: str
    #: True: an input already differed (the cause is upstream or in that input); False: inputs agreed to the noise
    #: floor, so this operator itself computes differently; None: inputs not dumped and no producer compared
    inputs_differed: Optional[bool]
    differing_inputs: tuple[str, ...] = ()
    #: "operator", or "parameter" when the first node that parts is a graph input (the data) or a weight
    node_type: str = "operator"
    #: the weight or graph input a differing input comes from (the root), e.g. "fc2.weight"
    root: str = ""
    #: the root's relative L2 error, and the largest of the outputs'
    root_error: Optional[float] = None
    error: Optional[float] = None
    #: the largest error among its inputs (or their producers), when known
    inputs_error: Optional[float] = None
    #: differing inputs no graph node feeds (constants of the code: an epsilon, a scale), with both values
    constants: tuple[str, ...] = ()
    #: the operator is the exit of operators A computes instead of B's: "A computes ReLU where B computes GeLU
    #: (cell act)" (:mod:`~msdebug_hooks.compare.dump_replacements`), or ""
    replaced: str = ""

    @property
    def verdict(self) -> str:
        """The worst verdict among its outputs."""
        verdicts = {p.comparison.verdict for p in self.outputs}
        return next(v for v in (ERROR, WARNING, NOT_COMPARABLE, PASS) if v in verdicts)

    def explanation(self) -> str:
        if self.node_type == PARAMETER:
            return ("it is a graph input or a weight, not an operator: the runs were fed different data or weights "
                    "(check the data pipeline, the seeds and the checkpoint before the operators)")
        if self.constants:
            return (f"its inputs agree but for {'; '.join(self.constants)}: "
                    f"{'a constant' if len(self.constants) == 1 else 'constants'} of the code, not the output of any "
                    f"operator (an attribute such as an epsilon, a scale or an axis): this operator is configured "
                    f"differently in the two runs")
        if self.root:
            return (f"its inputs already differed ({', '.join(self.differing_inputs)}): the runs start the step from "
                    f"different values of {self.root} ({_percent(self.root_error)} apart, |a-b|/|b|); this is its "
                    f"first consumer")
        if self.replaced and self.inputs_differed is False:
            return (f"{self.replaced}: fed the same inputs (agreeing to {_size(self.inputs_error)}, |a-b|/|b|), "
                    f"the two compute outputs {_size(self.error)} apart: the change is this replacement")
        if self.inputs_differed is None:
            return "its inputs were not dumped (input_output=2): compare the operators before it"
        if self.inputs_differed:
            return (f"its inputs already differed ({', '.join(self.differing_inputs)}): the difference entered "
                    f"through them (an operator that is not dumped or not matched)")
        return (f"its inputs agreed (to {_size(self.inputs_error)}, |a-b|/|b|) and its output differs by "
                f"{_size(self.error)}: this operator itself computes differently")

    def as_dict(self) -> dict[str, Any]:
        return {"iteration": self.iteration, "rank_a": self.rank_a, "rank_b": self.rank_b, "node_a": self.node_a,
                "node_b": self.node_b, "op_type": self.op_type, "verdict": self.verdict,
                "source_a": self.source_a, "source_b": self.source_b, "inputs_differed": self.inputs_differed,
                "differing_inputs": list(self.differing_inputs), "node_type": self.node_type, "root": self.root,
                "root_error": _finite(self.root_error), "relative_l2_error": _finite(self.error),
                "inputs_error": _finite(self.inputs_error), "constants": list(self.constants),
                "replaced": self.replaced,
                "explanation": self.explanation(),
                "outputs": [p.as_row() for p in self.outputs]}


def _finite(value: Optional[float]) -> Any:
    return value if value is None or math.isfinite(value) else str(value)


def _size(error: Optional[float]) -> str:
    return "?" if error is None else ("0" if error == 0 else f"{error:.1e}")


def _percent(error: Optional[float]) -> str:
    return "?" if error is None else f"{100 * error:.3g} %"


def node_divergence(ia: NodeInfo, ib: NodeInfo, node_pairs: list, producer_outputs: Callable[[str], list],
                    input_source: Callable[[NodeInfo, int], tuple[str, bool]], iteration: int, rank_a: int,
                    rank_b: int, errors_only: bool, exact: bool = False,
                    replaced: Optional[Replacement] = None) -> Optional[Divergence]:
    """The divergence at this node, or None when its outputs agree to the noise (or only carry inherited noise).

    ``producer_outputs(name)``: the output pairs of the node ``name`` (for inputs that were not dumped);
    ``input_source(info, slot)``: ``(label, is_parameter)`` of the node feeding an input slot, through its Load.
    ``errors_only`` (``diverge_at="error"``): only an output whose verdict is ``error`` or not comparable counts.
    ``exact``: any difference counts (floor 0). ``replaced``: the node is the exit of operators replaced by others
    (its own inputs are not compared: the piece's inputs, ``replaced.inputs_a``, are judged instead).
    """
    outputs = tuple(p for p in node_pairs if p.io == "output")
    judged = [p for p in outputs if p.comparison.comparable]   # an unreadable file is "could not look", not a part
    if not judged:
        return None

    def err(pair: TensorPair) -> float:
        return pair.error(exact)

    def apart(pair: TensorPair) -> bool:
        return pair.error(exact) > pair.floor(exact)

    error = max(err(p) for p in judged)
    if errors_only:
        if not any(p.comparison.verdict == ERROR for p in judged):
            return None
    elif not any(apart(p) for p in judged):
        return None
    text = replaced.describe(cell_of(ia.name) if cell_of(ia.name) == cell_of(ib.name) else "") if replaced else ""
    make = _maker(ia, ib, outputs, iteration, rank_a, rank_b, error, text)
    if ia.node_type == PARAMETER:
        return make(None)
    inputs = [p for p in node_pairs if p.io == "input" and p.comparison.comparable]
    if inputs:
        differing = [p for p in inputs if apart(p)]
        labels = [(p, *input_source(ia, p.slot)) for p in differing]
        inputs_error = max(err(p) for p in inputs)
        roots = [(p, label) for p, label, is_parameter in labels if is_parameter]
        if labels and all(label == "" for _, label, _ in labels):   # no node feeds them: constants of the code
            return make(True, [f"input {p.slot}" for p, _, _ in labels], inputs_error=inputs_error,
                        constants=tuple(f"input {p.slot}: A {_values(p.file_a)}, B {_values(p.file_b)}"
                                        for p, _, _ in labels))
        if roots:
            pair, label = roots[0]
            return make(True, [f"input {p.slot}{label}" for p, label, _ in labels], root=label.strip(" ()"),
                        root_error=err(pair), inputs_error=inputs_error)
        if labels:
            return make(True, [f"input {p.slot}{label}" for p, label, _ in labels], inputs_error=inputs_error)
    else:   # inputs not dumped: look at the producers' outputs
        names = replaced.inputs_a if replaced else ia.inputs
        seen = [p for name in names for p in producer_outputs(name) if p.comparison.comparable]
        if not seen:
            return make(None)
        inputs_error = max(err(p) for p in seen)
        differing = [p.node_a for p in seen if apart(p)]
        if differing:
            return make(True, differing, inputs_error=inputs_error)
    if not errors_only and error <= attribution.JUMP * inputs_error:
        return None   # rounding noise amplified a few times: inherited, not made here
    return make(False, inputs_error=inputs_error)


def _maker(ia: NodeInfo, ib: NodeInfo, outputs: tuple, iteration: int, rank_a: int, rank_b: int, error: float,
           replaced: str):
    def make(differed: Optional[bool], differing: list = (), root: str = "", root_error: Optional[float] = None,
             inputs_error: Optional[float] = None, constants: tuple = ()) -> Divergence:
        return Divergence(iteration, rank_a, rank_b, ia.name, ib.name, ia.op_type, outputs, user_source(ia),
                          user_source(ib), differed, tuple(differing), ia.node_type, root, root_error, error,
                          inputs_error, constants, replaced)
    return make


def _values(path: str, limit: int = 8) -> str:
    """A dumped constant's values, short: ``0.01`` or ``[1, 2, ...] (12 values)``; ``?`` when unreadable."""
    from msdebug_hooks.dump import npy

    try:
        flat = npy.load(path).reshape(-1)
    except Exception:   # noqa: BLE001 - unreadable: the comparison already reported it
        return "?"
    shown = ", ".join(f"{v:.7g}" if isinstance(v, float) else str(v) for v in flat[:limit].tolist())
    return shown if flat.size == 1 else f"[{shown}{', ...' if flat.size > limit else ''}] ({flat.size} values)"
