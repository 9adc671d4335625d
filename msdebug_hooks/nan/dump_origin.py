"""The producer of the first NaN/Inf in a sync dump: the first operator, in execution order, whose inputs are all
finite and whose output is not.

Iterations are read in order, each one's operators in the order they ran (``DumpAnalyzer.list_nodes``). For every
operator its own dumped inputs (``input.<slot>`` files: what the kernel read) and outputs are checked; the first
operator with a non-finite output is the answer when its inputs are finite. When its inputs are not finite, the value
came from outside the operators of that iteration: a graph input that is not a weight (the batch) is "the data of
step N"; a weight is "non-finite before the step" (it came from an earlier update). Source lines come from the
dump's graph (the innermost line of the user's code); the phase from the node's scope (``Gradients/``: backward,
an optimizer's operator writing a weight: update).
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, Optional

import numpy as np

from msdebug_hooks.dump import npy
from msdebug_hooks.dump.analyzer import DumpAnalyzer
from msdebug_hooks.dump.index import OPERATOR, PARAMETER
from msdebug_hooks.nan.result import Origin
from msdebug_hooks.nan.values import first_bad, hint, is_finite, stats

__all__ = ["find_origin"]

_BACKWARD = "Gradients/"
_UPDATE_TYPES = ("Assign", "ApplyMomentum", "SGD", "Adam", "ApplyAdam", "AdamWeightDecay", "ApplyGradientDescent",
                 "ScatterNdUpdate")


def _load(path: Optional[Path]) -> Optional[np.ndarray]:
    return None if path is None else npy.load(path)


def _phase(name: str, op_type: str) -> str:
    if name.startswith(_BACKWARD) or f"/{_BACKWARD}" in name:
        return "backward"
    if op_type in _UPDATE_TYPES or "optimizer" in name.lower():
        return "update"
    return "forward"


def _cell(name: str) -> str:
    """The cell path from a node's scope (``Default/fc1-Dense/MatMul-op0`` -> ``fc1``)."""
    parts = [p.split("-")[0] for p in name.split("/")[1:-1] if p and p not in ("Default", "Gradients")]
    parts = [p for p in parts if not p.startswith(("Grad_", "Expand_"))]
    return ".".join(parts)


def _code(text: str) -> str:
    """The source text of a stack entry without the note MindSpore appends to a line several nodes share."""
    return text.split("/<~~", 1)[0].strip()


def find_origin(dump_dir: Path, iterations: Iterable[int], *, rank: int = 0) -> Optional[Origin]:
    """The origin in ``iterations`` (0-based dump iterations; step = iteration + 1) of ``rank``, or ``None`` when
    every dumped tensor there is finite."""
    analyzer = DumpAnalyzer(dump_dir)
    index = analyzer._index    # the dump's own file index: the inputs a kernel read are its input.<slot> files
    nodes = analyzer.list_nodes(ranks=[rank])
    training = {n.graph_name for n in nodes if n.name.startswith(_BACKWARD) or f"/{_BACKWARD}" in n.name}
    for iteration in sorted(iterations):
        step = iteration + 1
        for node in nodes:
            info = node._info
            if info.node_type == PARAMETER and not info.is_weight and info.output_slots and \
                    node.graph_name in training:      # the batch of a graph that trains (not an optimizer's inputs)
                for slot in info.output_slots:
                    found = index.tensor_file(info, iteration, slot)
                    value = _load(found.path if found else None)
                    if value is not None and not is_finite(value):
                        where, bad = first_bad(value)
                        return Origin("data", step, detail=f"graph input {node.name} holds {bad} at index "
                                                           f"{list(where)} (batch element {where[0] if where else 0})",
                                      rank=rank, source="dump", output={"text": stats(value).text()})
            if info.node_type != OPERATOR or not info.output_slots:
                continue
            outputs = []
            for slot in info.output_slots:
                found = index.tensor_file(info, iteration, slot)
                outputs.append(_load(found.path if found else None))
            if all(is_finite(value) for value in outputs):
                continue
            inputs = []
            for slot in info.input_slots:
                found = index.tensor_file(info, iteration, slot, io="input")
                inputs.append(_load(found.path if found else None))
            bad_out = next(value for value in outputs if not is_finite(value))
            if any(value is not None and not is_finite(value) for value in inputs):
                return _from_outside(node, iteration, rank)
            in_stats = [None if value is None else stats(value) for value in inputs]
            out_stats = stats(bad_out)
            source = node.source_lines()
            frame = source[-1] if source else {}
            return Origin("operator", step, operator=info.op_type, phase=_phase(node.name, info.op_type),
                          node=node.name, cell=_cell(node.name), file=frame.get("file_path", ""),
                          line=frame.get("line_no"), code=_code(frame.get("code_line") or ""),
                          inputs=[{"text": "not dumped"} if s is None else dict(s.as_dict(), text=s.text())
                                  for s in in_stats],
                          output=dict(out_stats.as_dict(), text=out_stats.text()),
                          hint=hint(info.op_type, in_stats, out_stats), rank=rank, source="dump")
    return None


def _from_outside(node, iteration: int, rank: int) -> Origin:
    """The first non-finite operator read a non-finite input no dumped operator of the iteration made."""
    step = iteration + 1
    return Origin("before", step, operator=node.op_type, node=node.name, rank=rank, source="dump",
                  detail=f"{node.op_type} ({node.name}) is the first operator with a non-finite output and it read "
                         f"a non-finite input no operator of the dumped steps made (a weight or state updated "
                         f"before them)")
