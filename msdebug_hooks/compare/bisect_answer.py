"""What ``msdebug bisect`` answers: the step, the part of the step, the cell, the operator and its source lines.

The dump comparison names the first operator that parts (:mod:`msdebug_hooks.compare.dump_findings`); this module
says where in the training step it sits, from the node's scope and what the dumped steps show:

* a node under ``Gradients/`` is the **backward** pass; one under the train cell's ``optimizer`` scope (or an
  optimizer kernel: ``ApplyMomentum``, ``Adam``, ...) the **update**; any other operator the **forward** pass;
* the first node that parts is a graph input or a weight (read before any operator): the step was fed different
  **data or weights**;
* an operator whose differing input is a weight (the *root*): at the runs' first step the runs start from different
  initial weights; at a later step whose previous step was dumped and agreed in every operator (forward, backward
  and update), the weight was changed **between the steps, outside the graph** (a callback, ``set_data``, a
  checkpoint load); at a later step that is the first one dumped, the weights already differed when it began;
* an operator whose only differing inputs are fed by no node of the graph: they are constants of the code that
  MindSpore passes to the kernel as inputs (LayerNorm's epsilon is its input 5): the operator is **configured
  differently**, and both values are shown;
* a collective (``AllReduce`` of the gradients, ...) whose inputs agree on its rank: **another rank** brought a
  different value. Ranks are answered one by one; the headline is the earliest: lowest step, then the moment in it
  (a weight changed before the step, forward, backward, update), so the rank that made a difference comes before a
  rank that only received it through the gradient all-reduce.

Steps are 1-based (``cur_step_num``): dump iteration ``i`` is step ``i + 1``.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Optional

from msdebug_hooks.compare.dump_findings import Divergence, TensorPair, cell_of
from msdebug_hooks.dump.index import PARAMETER

FORWARD, BACKWARD, UPDATE, INPUT = "forward", "backward", "update", "input"
_BACKWARD_SCOPE = "Gradients/"
_OPTIMIZER_OPS = ("Apply", "Adam", "Lamb", "Lars", "FusedSparse", "SparseApply")
#: the train cell's gradient all-reduce scope in a data-parallel job (TrainOneStepCell.grad_reducer)
_GRAD_REDUCER = "grad_reducer"
#: operators that combine the ranks' tensors: equal inputs on one rank, a different output, means another rank's
_COLLECTIVES = ("AllReduce", "AllGather", "ReduceScatter", "Broadcast", "AlltoAll", "AllToAll", "NeighborExchange",
                "Reduce", "Send", "Receive")
#: when in a step each answer happened, to order the ranks' answers: before any operator, forward, backward, update
_MOMENT = {INPUT: 0, FORWARD: 1, BACKWARD: 2, UPDATE: 3}


def phase_of_node(node: str, op_type: str) -> str:
    """``backward`` (gradients, and their all-reduce in a data-parallel job), ``update`` (the optimizer) or
    ``forward``, from the node's scope."""
    scopes = [part.split("-", 1)[0] for part in node.split("/")[:-1]]
    if node.startswith(_BACKWARD_SCOPE) or f"/{_BACKWARD_SCOPE}" in node or _GRAD_REDUCER in scopes:
        return BACKWARD
    if "optimizer" in scopes or op_type.startswith(_OPTIMIZER_OPS):
        return UPDATE
    return FORWARD


@dataclass(frozen=True)
class Answer:
    """The first operator where one rank's runs part, placed in the training step."""

    rank: int
    step: int
    phase: str                  # forward / backward / update / input
    where: str                  # the phase in words, with the step
    cell: str
    operator: str
    node_a: str
    node_b: str
    source_a: str
    source_b: str
    #: "own" (inputs agreed: this operator computes differently), "constant" (only a constant input of the code
    #: differs: an attribute such as an epsilon), "root" (a weight input differs), "inherited" (an input differed,
    #: from an operator not dumped or not matched), "replaced" (A computes other operators than B at this place, fed
    #: the same inputs), "input" (a graph input or weight), "unknown" (inputs not dumped)
    reading: str
    explanation: str
    root: str = ""
    error: Optional[float] = None
    #: 0: before the step's operators (data, a weight changed before it), 1 forward, 2 backward, 3 update
    moment: int = 1
    #: reading "replaced": "A computes ReLU where B computes GeLU (cell act)"
    replaced: str = ""

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["error"] = None if self.error is None or not math.isfinite(self.error) else self.error
        return out


def _reading(div: Divergence) -> str:
    if div.node_type == PARAMETER:
        return INPUT
    if div.root:
        return "root"
    if div.inputs_differed is None:
        return "unknown"
    if div.replaced and not div.inputs_differed:
        return "replaced"
    return "inherited" if div.inputs_differed else "own"


def answer(div: Divergence, dumped_iterations: list[int], clean_iterations: set[int],
           pairs: Iterable[TensorPair] = ()) -> Answer:
    """Place ``div`` in its step. ``clean_iterations``: dumped iterations where every operator of this rank agreed;
    ``pairs``: the comparison's pairs (kept for callers; the constants come with ``div``)."""
    step = div.iteration + 1
    reading = _reading(div)
    explanation = div.explanation()
    constants = list(div.constants)
    if reading == "own" and div.op_type in _COLLECTIVES:
        reading = "other rank"
        explanation = (f"its inputs agree on rank {div.rank_a} but its output differs: it combines the ranks' tensors "
                       f"({div.op_type}), so another rank brought a different value: see that rank's answer")
    if constants:
        reading = "constant"
        explanation = (f"its inputs agree but for {'; '.join(constants)}: "
                       f"{'a constant' if len(constants) == 1 else 'constants'} of the code, not the output of any "
                       f"operator (an attribute such as an epsilon, a scale or an axis): this operator is configured "
                       f"differently in the two runs")
    phase = phase_of_node(div.node_a, div.op_type)
    moment = None
    if reading == INPUT:
        phase = INPUT
        where = (f"step {step}, before any operator: the runs were fed different data or weights"
                 if step > 1 else "step 1, before any operator: the runs start from different data or initial "
                                  "weights")
    elif reading == "root" and phase == FORWARD:
        before = div.iteration - 1
        if div.iteration == 0:
            phase = INPUT
            where = f"step 1: the runs start from different initial values of {div.root} (initialisation, seed or " \
                    f"checkpoint)"
        elif before in dumped_iterations and before in clean_iterations:
            phase, moment = UPDATE, 0
            where = (f"between step {step - 1} and step {step}, outside the graph: step {step - 1} agreed in every "
                     f"dumped operator (forward, backward, update), yet step {step} starts from different values of "
                     f"{div.root} (a callback, set_data, a checkpoint load or another change made between steps)")
        else:
            phase, moment = UPDATE, 0
            where = (f"before step {step}: {div.root} already differs when step {step}, the first step dumped, "
                     f"begins; the difference is older than the loss shows (a smaller --rtol finds an earlier step)")
    elif phase == BACKWARD:
        where = f"the backward pass of step {step} (gradients)"
    elif phase == UPDATE:
        where = f"the weight update of step {step} (optimizer)"
    else:
        where = f"the forward pass of step {step}"
    return Answer(div.rank_a, step, phase, where, cell_of(div.node_a), div.op_type, div.node_a, div.node_b,
                  div.source_a, div.source_b, reading, explanation, div.root, div.error,
                  _MOMENT[phase] if moment is None else moment, div.replaced if reading == "replaced" else "")


@dataclass
class BisectResult:
    """Everything one bisection found. ``exit_code``: 0 the runs agree, 1 they part (see :attr:`answers`)."""

    run_a: str
    run_b: str
    workdir: str
    exit_code: int
    #: rank -> the loss comparison of that rank (``LossComparison.as_dict()``)
    losses: dict[int, dict] = field(default_factory=dict)
    #: the first step whose loss parts (on any rank), and the rank it parts on first
    step: Optional[int] = None
    rank: Optional[int] = None
    dumped_steps: list[int] = field(default_factory=list)
    dump_bytes: Optional[int] = None
    pairs_compared: int = 0
    answers: list[Answer] = field(default_factory=list)
    #: what could not be said (the dump showed no operator apart, runs of another length, ...)
    notes: list[str] = field(default_factory=list)
    #: why the answer may not be the cause (a dump without the forward and backward passes), or ""
    caveat: str = ""
    #: the tolerance rule the losses and dumps were judged by (:mod:`~msdebug_hooks.compare.bisect_tolerance`)
    tolerance: str = ""
    kept: bool = True

    @property
    def answer(self) -> Optional[Answer]:
        """The earliest place where the runs part: lowest step, then earliest in the step (a weight changed before
        it, forward, backward, update: a rank whose gradient all-reduce parts follows the rank that made the
        difference), then lowest rank."""
        return min(self.answers, key=lambda a: (a.step, a.moment, a.rank), default=None)

    def as_dict(self) -> dict[str, Any]:
        return {"run_a": self.run_a, "run_b": self.run_b, "workdir": self.workdir, "exit_code": self.exit_code,
                "step": self.step, "rank": self.rank, "dumped_steps": self.dumped_steps,
                "dump_bytes": self.dump_bytes, "pairs_compared": self.pairs_compared,
                "answer": self.answer.as_dict() if self.answer else None,
                "answers": [a.as_dict() for a in self.answers], "notes": self.notes, "caveat": self.caveat,
                "tolerance": self.tolerance,
                "losses": {str(rank): value for rank, value in self.losses.items()}, "kept": self.kept}

    def lines(self) -> list[str]:
        """The report: the losses, the step, and the answer with both source lines."""
        out = [f"A (under test): {self.run_a}", f"B (reference):  {self.run_b}"]
        for rank, loss in sorted(self.losses.items()):
            first = loss.get("first_parted")
            label = f"rank {rank}: " if len(self.losses) > 1 else ""
            if first is None and loss["rtol"] == loss["atol"] == 0 and not loss["max_abs_error"]:
                out.append(f"losses: {label}{loss['steps_compared']} steps agree bit for bit")
            elif first is None:
                out.append(f"losses: {label}{loss['steps_compared']} steps agree "
                           f"({_forward_text(loss)}later steps within rtol {loss['rtol']:g})")
            else:
                tol = loss["forward_rtol"] if first["forward"] else loss["rtol"]
                judged = (f"{'forward-rtol' if first['forward'] else 'rtol'} {tol:g}" if tol or loss["atol"]
                          else "not bit-equal")
                out.append(f"losses: {label}the runs part at step {first['step']}: A {first['loss_a']:.7g}, "
                           f"B {first['loss_b']:.7g} ({_sci(first['rel_error'])} relative, {judged})")
        if self.tolerance:
            out.append(f"tolerance: {self.tolerance}")
        if self.dumped_steps:
            size = f", {self.dump_bytes / 1024 ** 2:.1f} MB per run" if self.dump_bytes else ""
            steps = " and ".join(str(s) for s in self.dumped_steps)
            out.append(f"dump: step{'s' if len(self.dumped_steps) > 1 else ''} {steps} in both runs{size}; "
                       f"{self.pairs_compared} tensor pairs compared")
        best = self.answer
        if self.exit_code == 0:
            out.append("answer: no difference: the runs agree on every step compared")
        elif best is None:
            out.append(f"answer: the runs part at step {self.step}, but no operator could be named")
            if self.caveat:
                out.append(f"  caveat:   {self.caveat}")
        else:
            what = best.replaced or f"{best.operator} in cell {best.cell or '(none)'}"
            out.append(f"answer: step {best.step}, {best.phase}: {what}"
                       f"{f' (rank {best.rank})' if len(self.losses) > 1 else ''}")
            if self.caveat:
                out.append(f"  caveat:   {self.caveat}")
            out.append(f"  where:    {best.where}")
            out.append(f"  operator: {best.node_a}" + (f"  (B: {best.node_b})" if best.node_b != best.node_a else ""))
            out.append(f"  source A: {best.source_a or '(no user source line in the dump)'}")
            out.append(f"  source B: {best.source_b or '(no user source line in the dump)'}")
            out.append(f"  reading:  {best.reading}: {best.explanation}")
            for other in self.answers:
                if other is not best:
                    out.append(f"  rank {other.rank}: step {other.step}, {other.phase}: {other.operator} in cell "
                               f"{other.cell or '(none)'}; {other.reading}; "
                               f"{other.source_a or 'no user source line'}")
        out.extend(f"note: {note}" for note in self.notes)
        return out


def _forward_text(loss: dict) -> str:
    if loss.get("forward_step") is None:
        return ""
    error = loss.get("forward_rel_error") or 0.0
    return (f"step {loss['forward_step']} " + ("bit-equal" if error == 0 else f"within {_sci(error)} relative")
            + f" (forward-rtol {loss['forward_rtol']:g}), ")


def _sci(value: Any) -> str:
    if isinstance(value, str) or value is None:
        return str(value)
    return "0" if value == 0 else f"{value:.1e}"
