"""The graph a training sent (``GraphProto``), as nodes a person or a script can list, search and watch.

The rules are the protocol's, as MindInsight 2.3.1 applies them, so a node is classified the same here and in its UI:

* op nodes: ``full_name`` (or ``scope/<type>-op<name>``), type, scope, outputs from ``output_type`` (one for a
  tensor, one per element of a tuple, none without it: such a node has no value to watch or view);
* parameters become nodes in the scope of the op that consumes them (``<scope>/<bare name>``); an unconsumed
  parameter is dropped, as MindInsight drops it; clients look parameters up by their bare name;
* category: ``weight`` (a parameter whose name ends in ``.weight`` / ``.bias``, not an optimizer state, not a
  gradient), ``parameter`` (any other parameter), ``gradient`` (an op under ``gradients/``), ``activation`` (an op of
  an activation type), ``operator`` (anything else);
* ``stack``: the source lines in ``source_address`` (``# In file <path>:<line>.../<code>/``), innermost first as
  MindSpore writes them; ``source`` is the training's own line among them. A parameter has no lines of its own in
  the protocol: its ``source`` comes from those of the op it is named after (the first one consuming it in its
  scope: ``stack_from``, ``borrowed_stack``; a ``stack=`` search still matches ops only). Our light source puts
  the layer's definition first there (``self.fc1 = nn.Dense(...)``), so a weight's source is its definition; in a
  dump graph it is the line that uses the weight.
"""
from __future__ import annotations

import difflib
import fnmatch
import re
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence

from msdebug_hooks.wire import ms_graph_pb2 as graph_pb
from msdebug_hooks.dump.ir_trace import StackFrame, parse_trace_line

__all__ = ["Node", "JobGraph", "CATEGORIES", "parse_graph"]

CATEGORIES = ("weight", "gradient", "activation", "parameter", "operator")
_LIBRARY = re.compile(r"/(site|dist)-packages/mindspore/")
ACTIVATION_TYPES = frozenset({"elu", "fastgelu", "gelu", "hsigmoid", "hswish", "leakyrelu", "logsigmoid",
                              "logsoftmax", "prelu", "relu", "relu6", "reluv2", "sigmoid", "softmax", "tanh"})


@dataclass(frozen=True)
class Node:
    """One node of a training's graph: ``name`` is the full name the protocol uses."""

    name: str
    type: str
    scope: str
    category: str
    graph: str
    index: int                          # position in the graph: execution order for op nodes
    outputs: int                        # number of output slots (0: nothing to view or watch)
    stack: tuple[StackFrame, ...] = ()
    inputs: tuple[str, ...] = ()        # full names of the nodes feeding it (parameters and ops), in order
    stack_from: str = ""                # a parameter: the op whose source lines it borrows ("" for an op)
    borrowed_stack: tuple[StackFrame, ...] = ()     # those lines (a parameter has none of its own)

    @property
    def is_parameter(self) -> bool:
        return self.type == "Parameter"

    @property
    def short_name(self) -> str:
        return self.name.rsplit("/", 1)[-1]

    @property
    def source_frame(self) -> Optional[StackFrame]:
        """The line of the training's own code that made the node: the innermost frame outside MindSpore's
        package that is not a ``def`` line (a parameter's: among its consumer's lines, ``borrowed_stack``); None
        when the graph carries no stack."""
        for frame in self.stack or self.borrowed_stack:
            path = frame.file_path.replace("\\", "/")
            if _LIBRARY.search(path) or frame.code_line.startswith("def "):
                continue
            return frame
        return None

    @property
    def source(self) -> str:
        """``file:line  code`` of ``source_frame``; "" without one."""
        frame = self.source_frame
        return f"{frame.file_path}:{frame.line_no}  {frame.code_line}" if frame else ""


def _output_count(output_type: graph_pb.TypeProto, has_type: bool) -> int:
    if not has_type:
        return 0
    if output_type.data_type == graph_pb.DT_TUPLE:
        return len(output_type.sequence_type.elem_types)
    return 1


def _stack(source_address: str) -> tuple[StackFrame, ...]:
    frames = (parse_trace_line(line) for line in source_address.splitlines())
    return tuple(f for f in frames if f is not None)


def _is_weight_name(full_name: str) -> bool:
    lower = full_name.lower()
    return lower.endswith((".weight", ".bias")) and "optimizer-" not in lower and not lower.startswith("gradients/")


def _op_category(full_name: str, op_type: str) -> str:
    lower = full_name.lower()
    if lower == "gradients" or lower.startswith("gradients/"):
        return "gradient"
    if op_type.lower() in ACTIVATION_TYPES:
        return "activation"
    return "operator"


class JobGraph:
    """All nodes of the graph(s) one training sent, in graph order; parameters first, then op nodes."""

    def __init__(self, nodes: Sequence[Node], graph_names: Sequence[str]) -> None:
        self.nodes: list[Node] = list(nodes)
        self.graph_names = list(graph_names)
        self._by_name = {n.name: n for n in self.nodes}
        self._by_short: dict[str, list[Node]] = {}
        self._after_backward: Optional[frozenset[str]] = None
        for node in self.nodes:
            self._by_short.setdefault(node.short_name, []).append(node)

    def __len__(self) -> int:
        return len(self.nodes)

    def __iter__(self):
        return iter(self.nodes)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.find(name) is not None

    def find(self, name: str) -> Optional[Node]:
        """The node called ``name`` (full name, or a unique last component such as ``fc1.weight``), or None. The
        prompt's shortened form (``.../conv1-Conv2d/conv1.weight``, ``...v1-Conv2d/conv1.weight``) is the end of a
        full name: it finds the one node whose name ends so."""
        node = self._by_name.get(name)
        if node is not None:
            return node
        if name.startswith("...") and len(name) > 3:
            ending = [n for n in self.nodes if n.name.endswith(name[3:])]
            return ending[0] if len(ending) == 1 else None
        same = self._by_short.get(name.rsplit("/", 1)[-1], [])
        if len(same) == 1 and (name == same[0].short_name or same[0].name.endswith("/" + name)):
            return same[0]
        return None

    def after_backward(self) -> frozenset[str]:
        """Op nodes that run after the backward pass: fed by a gradient node, directly or through other ops (the
        optimizer's updates such as ``ApplyMomentum``, a weight decay on the gradients). Read from the graph's edges,
        once."""
        if self._after_backward is None:
            consumers: dict[str, list[Node]] = {}
            for node in self.nodes:
                for source in node.inputs:
                    consumers.setdefault(source, []).append(node)
            todo = [n.name for n in self.nodes if n.category == "gradient"]
            found: set[str] = set()
            while todo:
                for node in consumers.get(todo.pop(), ()):
                    if node.category != "gradient" and not node.is_parameter and node.name not in found:
                        found.add(node.name)
                        todo.append(node.name)
            self._after_backward = frozenset(found)
        return self._after_backward

    def node(self, name: str) -> Node:
        """Like ``find``; ``KeyError`` naming close matches when there is no such node."""
        node = self.find(name)
        if node is None:
            close = difflib.get_close_matches(name, list(self._by_name) + list(self._by_short), n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise KeyError(f"no node {name!r} in the graph ({len(self.nodes)} nodes){hint}")
        return node

    def search(self, pattern: str = "", *, category: Optional[str] = None, stack: str = "",
               watchable: bool = False) -> list[Node]:
        """Nodes whose full name matches ``pattern`` (a glob if it has ``*?[``, else a case-insensitive substring),
        of ``category`` (one of ``CATEGORIES``; ``parameter`` includes weights), whose source lines contain
        ``stack`` (e.g. ``train.py:42`` or a piece of code), with a value to watch if ``watchable``."""
        if category is not None and category not in CATEGORIES:
            raise ValueError(f"category={category!r} is not allowed: one of {', '.join(CATEGORIES)}")
        glob = any(c in pattern for c in "*?[")
        needle, key = pattern.lower(), stack.lower()
        found = []
        for node in self.nodes:
            if glob and not fnmatch.fnmatchcase(node.name, pattern) and \
                    not fnmatch.fnmatchcase(node.short_name, pattern):
                continue
            if not glob and needle and needle not in node.name.lower():
                continue
            if category is not None and node.category != category and \
                    not (category == "parameter" and node.category == "weight"):
                continue
            if key and not any(key in f"{f.file_path}:{f.line_no}  {f.code_line}".lower() for f in node.stack):
                continue
            if watchable and not node.outputs:
                continue
            found.append(node)
        return found


def parse_graph(graphs: Iterable[graph_pb.GraphProto]) -> JobGraph:
    """Nodes of every graph a training sent (full names are unique across graphs, as the protocol requires)."""
    nodes: list[Node] = []
    names: list[str] = []
    index = 0
    for proto in graphs:
        names.append(proto.name)
        ids: dict[str, str] = {}
        ops: list[tuple[str, graph_pb.NodeProto]] = []
        for op in proto.node:
            full = op.full_name or f"{op.scope}/{op.op_type}-op{op.name}"
            ids[op.name] = full
            ops.append((full, op))
        consumers: dict[str, list[str]] = {}            # bare parameter name -> consumer scopes, in order
        first_user: dict[tuple[str, str], tuple[str, str]] = {}   # (bare, scope) -> (op full name, its source)
        declared = {p.name: p for p in proto.parameters}
        for full, op in ops:
            for edge in op.input:
                if edge.name in declared:
                    scopes = consumers.setdefault(edge.name, [])
                    if op.scope not in scopes:
                        scopes.append(op.scope)
                        first_user[(edge.name, op.scope)] = (full, op.source_address)
        param_names: dict[str, str] = {}
        for bare in declared:
            scopes = consumers.get(bare)
            if not scopes:
                continue
            names_in_scopes = [f"{scope}/{bare}" if scope else bare for scope in scopes]
            weight = next((n for n in names_in_scopes if _is_weight_name(n)), None)
            name = weight or names_in_scopes[0]
            param_names[bare] = name
            user, trace = first_user[(bare, scopes[names_in_scopes.index(name)])]
            nodes.append(Node(name, "Parameter", name.rsplit("/", 1)[0] if "/" in name else "",
                              "weight" if weight else "parameter", proto.name, index, 1,
                              stack_from=user if trace else "", borrowed_stack=_stack(trace)))
            index += 1
        for full, op in ops:
            if not op.op_type or op.op_type.endswith("_scope"):
                continue
            nodes.append(Node(full, op.op_type, op.scope, _op_category(full, op.op_type), proto.name, index,
                              _output_count(op.output_type, op.HasField("output_type")),
                              _stack(op.source_address),
                              tuple(ids.get(e.name) or param_names.get(e.name) or e.name for e in op.input
                                    if e.type == graph_pb.InputProto.DATA_EDGE)))
            index += 1
    return JobGraph(nodes, names)
