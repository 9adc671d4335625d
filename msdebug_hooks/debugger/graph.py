"""Turn a MindSpore training network into the ``GraphProto`` MindInsight's debugger displays.

MindSpore's old client exported the compiled kernel graph, which Python cannot see. We describe the network at
cell level instead, with MindSpore's naming so that MindInsight classifies the nodes the way it did then
(docs/debugger-protocol.md section 3):

* every leaf cell becomes one op node whose type is the cell class (``Conv2d``, ``ReLU``, ``Dense``, the loss
  class), in scope ``Default/<attr>-<Class>/...`` (e.g. ``Default/network-WithLossCell/_backbone-LeNet5/
  conv1-Conv2d``), chained in registration order (an approximation of the data flow, which is not knowable
  without tracing);
* every parameter of a cell is a graph parameter under its own name (``conv1.weight``) feeding its cell's node,
  so MindInsight shows it as ``<cell scope>/conv1.weight`` and counts it as a weight. That includes frozen ones
  (``requires_grad=False``, not in the optimizer): MindSpore's debugger showed every parameter, and "weight not
  changed" on a frozen layer is exactly what a person checks when a layer does not learn;
* the optimizer gets one ``Apply<Optimizer>`` node per weight in ``Default/<attr>-<Optimizer>``, fed by the
  weight, its states (``moments.conv1.weight``) and the shared ones (``learning_rate``, ``global_step``); names
  containing ``optimizer-`` are not weights for MindInsight, so weight watchpoints do not pick up states;
* the loss cell's node has a scalar output: the loss value;
* every trained weight gets a gradient node, ``Gradients/<its cell's scope>/GradOf_<weight>-op<N>`` (MindInsight
  counts full names under ``Gradients/`` as gradients, so its gradient conditions select them), fed by the loss node;
* every cell's node carries, as its stack (``source_address``), the ``def construct`` line of its class and of each
  cell containing it, innermost first (e.g. ``Conv2d`` in MindSpore, then the script's ``LeNet5``), so the UI's Stack
  Info and "search by code line" find the layer; before them the script's line that calls the layer
  (``x = self.conv1(x)``, when its parent's ``construct`` calls it by attribute) and the one that defines it
  (``self.conv1 = nn.Conv2d(...)``), and for the loss node the script's line that computes the loss (under
  ``Model.train``: the ``model.train(...)`` call); a gradient node carries its weight's layer's call and definition
  (``source_lines.py``). So a hit on a weight, a gradient or the loss names a line of the script. A functional
  operator (``ops.log(x)`` inside a ``construct``) has no node in this cell-level graph: the dump source has one.

The result also says where each tensor comes from (``DebugGraph.parameters``, ``DebugGraph.loss_node``,
``DebugGraph.cells`` for cell outputs, ``DebugGraph.gradients`` and ``DebugGraph.updates`` for the weight behind a
gradient or an optimizer node), which is what the session needs to answer views and evaluate watchpoints.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import inspect

import numpy as np

from msdebug_hooks.wire import ms_graph_pb2 as graph_pb
from msdebug_hooks.wire.dtypes import data_type
from msdebug_hooks.debugger.source_lines import call_site_trace, call_trace, definition_trace

__all__ = ["GraphParameter", "DebugGraph", "build_graph", "scope_of", "DATA_INPUT", "LABEL_INPUT"]

DATA_INPUT = "data"
LABEL_INPUT = "label"
_FORBIDDEN = str.maketrans({"<": "_", ">": "_", '"': "_"})   # MindInsight rejects these in names


@dataclass(frozen=True)
class GraphParameter:
    """One graph parameter: ``role`` is "weight" (trainable), "frozen" (a cell's parameter that is not trained:
    ``requires_grad=False``, BatchNorm statistics), "optimizer_state" or "input"; ``source`` the MindSpore
    Parameter holding its value (None for data inputs)."""

    name: str
    role: str
    shape: tuple[int, ...]
    dtype: np.dtype
    source: Any = None


@dataclass
class DebugGraph:
    """The graph to send and the tensors behind its names."""

    proto: graph_pb.GraphProto
    parameters: dict[str, GraphParameter] = field(default_factory=dict)   # bare name -> parameter
    loss_node: str | None = None                                        # full name of the loss node (slot "0")
    nodes: dict[str, str] = field(default_factory=dict)                   # full name -> op type
    cells: dict[str, Any] = field(default_factory=dict)                   # cell node full name -> the cell
    gradients: dict[str, str] = field(default_factory=dict)               # gradient node -> weight (bare name)
    updates: dict[str, str] = field(default_factory=dict)                 # optimizer node -> weight it updates
    optimizers: list = field(default_factory=list)                       # [(optimizer cell, [weight names])]

    @property
    def name(self) -> str:
        return self.proto.name

    def weights(self) -> list[GraphParameter]:
        return [p for p in self.parameters.values() if p.role == "weight"]


def scope_of(path: str, classes: dict[str, str], root: str = "Default") -> str:
    """MindSpore's scope of the cell at dotted ``path``: ``Default/<attr>-<Class>/...`` (``classes`` maps each
    dotted prefix to its cell class name)."""
    parts, prefix = [root], ""
    for attr in path.split(".") if path else []:
        prefix = f"{prefix}.{attr}" if prefix else attr
        parts.append(f"{attr}-{classes[prefix]}".translate(_FORBIDDEN))
    return "/".join(parts)


def _tensor_type(dtype: np.dtype, shape: Sequence[int] | None) -> graph_pb.TypeProto:
    tensor = graph_pb.TypeProto.Tensor(elem_type=data_type(dtype) or graph_pb.DT_FLOAT32)
    if shape:
        tensor.shape.dim.extend(graph_pb.TensorShapeProto.Dimension(size=int(s)) for s in shape)
    return graph_pb.TypeProto(data_type=graph_pb.DT_TENSOR, tensor_type=tensor)


def _numpy_dtype(param) -> np.dtype:
    """A MindSpore Parameter's dtype as NumPy's (float32 where NumPy has no equivalent, e.g. bfloat16)."""
    try:
        return np.dtype(str(param.dtype).lower())     # MindSpore names its dtypes like NumPy: Float32, Int64, Bool
    except TypeError:
        return np.dtype(np.float32)


def _is_optimizer(cell) -> bool:
    from mindspore import nn

    return isinstance(cell, nn.Optimizer)


def _is_loss(cell) -> bool:
    from mindspore import nn

    return isinstance(cell, nn.LossBase)


class _Builder:
    """Accumulates nodes and parameters; ids are 1-based decimal strings as MindSpore's exporter used."""

    def __init__(self, graph_name: str) -> None:
        self.proto = graph_pb.GraphProto(name=graph_name, root_name=graph_name.rsplit("_", 1)[-1])
        self.graph = DebugGraph(self.proto)

    def parameter(self, name: str, role: str, shape: Sequence[int], dtype: np.dtype, source=None) -> str:
        name = name.translate(_FORBIDDEN)
        if name not in self.graph.parameters:
            self.graph.parameters[name] = GraphParameter(name, role, tuple(int(s) for s in shape), dtype, source)
            self.proto.parameters.add(name=name, type=_tensor_type(dtype, shape))
        return name

    def node(self, op_type: str, scope: str, inputs: Iterable[str], output: graph_pb.TypeProto,
             source_address: str = "") -> tuple[str, str]:
        node_id = str(len(self.proto.node) + 1)
        op_type = op_type.translate(_FORBIDDEN)
        full_name = f"{scope}/{op_type}-op{node_id}"
        self.proto.node.add(name=node_id, op_type=op_type, scope=scope, full_name=full_name,
                            input=[graph_pb.InputProto(name=n, type=graph_pb.InputProto.DATA_EDGE) for n in inputs],
                            output_type=output, source_address=source_address)
        self.graph.nodes[full_name] = op_type
        return node_id, full_name


def build_graph(network, *, optimizer=None, loss_fn=None, graph_name: str = "kernel_graph_0",
                loss_source: str | None = None) -> DebugGraph:
    """Describe ``network`` (usually ``model.train_network``, a ``TrainOneStepCell``; any ``nn.Cell`` works).

    Args:
        network: the cell the training step runs.
        optimizer: an optimizer that is not a cell of ``network`` (a hand-written loop's), shown as
            ``Default/optimizer-<Class>``.
        loss_fn: likewise a loss cell outside ``network``, shown as ``Default/loss_fn-<Class>``; its node's value
            is the loss.
        graph_name: ``<name>_<integer>``, as MindInsight sorts graphs by the trailing integer.
        loss_source: the ``source_address`` frame of the line computing the loss (``source_lines.trace_line``);
            None: the innermost line of the training's own code calling this (``model.train(...)``).
    Example:
        >>> graph = build_graph(model.train_network)
        >>> transport.send_graph(graph.proto.SerializeToString())
    """
    if not graph_name.rsplit("_", 1)[-1].isdigit():
        raise ValueError(f"graph_name={graph_name!r}: allowed names end in _<integer>, e.g. 'kernel_graph_0'")
    builder = _Builder(graph_name)
    cells = list(network.cells_and_names())
    members = {id(cell) for _, cell in cells}
    for attr, extra in (("loss_fn", loss_fn), ("optimizer", optimizer)):
        if extra is not None and id(extra) not in members:     # a separate cell: its cells under "<attr>."
            cells.extend((f"{attr}.{path}" if path else attr, cell) for path, cell in extra.cells_and_names())
    classes = {path: cell.cls_name for path, cell in cells}
    optimizers = [(path, cell) for path, cell in cells if path and _is_optimizer(cell)]
    inside_optimizer = tuple(f"{path}." for path, _ in optimizers)
    trainable = {id(p) for p in network.trainable_params()}

    def is_leaf(cell) -> bool:
        return not list(cell.name_cells())

    leaf_owned = {id(p) for _, cell in cells if is_leaf(cell) for p in cell.get_parameters(expand=False)}
    weight_scopes: dict[str, str] = {}
    weight_lines: dict[str, str] = {}       # weight -> the script's line defining it, for its gradient node
    by_path = dict(cells)
    loss_line = call_site_trace() if loss_source is None else loss_source
    previous = builder.parameter(DATA_INPUT, "input", (), np.dtype(np.float32))
    for path, cell in cells:
        if not path or path.startswith(inside_optimizer) or any(path == p for p, _ in optimizers):
            continue
        own = list(cell.get_parameters(expand=False))
        if not is_leaf(cell):
            # a composite cell gets a node only for parameters it holds itself (not aliases of its leaves')
            own = [p for p in own if id(p) not in leaf_owned]
            if not own:
                continue
        inputs = [previous]
        scope = scope_of(path, classes)
        called = call_trace(by_path, path)      # the line calling the layer, then the one defining it
        for param in own:
            role = "weight" if id(param) in trainable else "frozen"
            inputs.append(builder.parameter(param.name, role, param.shape, _numpy_dtype(param), param))
            weight_scopes.setdefault(param.name, scope)
            weight_lines.setdefault(param.name, "\n".join(filter(None, (called, definition_trace(by_path, path,
                                                                                                  param)))))
        is_loss = _is_loss(cell)
        if is_loss:
            inputs.append(builder.parameter(LABEL_INPUT, "input", (), np.dtype(np.int32)))
        output = _tensor_type(np.dtype(np.float32), None)
        own_lines = (loss_line,) if is_loss else (called, definition_trace(by_path, path))
        stack = "\n".join(filter(None, (*own_lines, *(construct_stack(by_path[p]) for p in _self_and_ancestors(path)))))
        node_id, full_name = builder.node(cell.cls_name, scope, inputs, output, stack)
        if is_leaf(cell) and not is_loss:
            builder.graph.cells[full_name] = cell
        if is_loss and builder.graph.loss_node is None:
            builder.graph.loss_node = full_name
        previous = node_id

    loss_id = next((n.name for n in builder.proto.node if n.full_name == builder.graph.loss_node), previous)
    for path, optimizer in optimizers:
        _add_optimizer(builder, path, optimizer, classes, trainable)
        _add_gradients(builder, optimizer, trainable, weight_scopes, loss_id, weight_lines)
    return builder.graph


def _self_and_ancestors(path: str) -> list[str]:
    """``a.b.c`` -> ``["a.b.c", "a.b", "a", ""]``: the cell, then the cells that contain it (innermost first)."""
    parts = path.split(".")
    return [".".join(parts[:n]) for n in range(len(parts), -1, -1)]


def construct_stack(cell) -> str:
    """``source_address`` text for a cell's node: the ``def construct`` line of its class, in the form MindInsight
    parses (``# In file <path>:<line>/<code>/``); empty when the source is not available."""
    try:
        construct = type(cell).construct
        path = inspect.getsourcefile(construct)
        lines, number = inspect.getsourcelines(construct)
    except (TypeError, OSError, AttributeError):
        return ""
    if not path or not lines:
        return ""
    code = lines[0].strip().replace("/", "|")
    return f"# In file {path}:{number}/    {code}/"


def _add_gradients(builder: _Builder, optimizer, trainable: set[int], weight_scopes: dict[str, str],
                   loss_id: str, weight_lines: dict[str, str]) -> None:
    """One gradient node per weight the optimizer updates, in its order (the order of the gradients it receives),
    each an input of its weight's ``Apply<Optimizer>`` node."""
    names = []
    gradient_ids: dict[str, str] = {}
    for weight in optimizer.parameters:
        names.append(weight.name)
        if id(weight) not in trainable or weight.name not in builder.graph.parameters:
            continue
        scope = "Gradients/" + weight_scopes.get(weight.name, "Default")
        node_id, full_name = builder.node(f"GradOf_{weight.name}", scope, [loss_id],
                                          _tensor_type(_numpy_dtype(weight), weight.shape),
                                          weight_lines.get(weight.name, ""))
        builder.graph.gradients[full_name] = weight.name
        gradient_ids[weight.name] = node_id
    builder.graph.optimizers.append((optimizer, names))
    for node in builder.proto.node:      # the update consumes its gradient: an edge, so readers see the step's order
        weight_name = builder.graph.updates.get(node.full_name)
        if weight_name in gradient_ids:
            node.input.add(name=gradient_ids[weight_name], type=graph_pb.InputProto.DATA_EDGE)


def _add_optimizer(builder: _Builder, path: str, optimizer, classes: dict[str, str], trainable: set[int]) -> None:
    """One ``Apply<Optimizer>`` node per optimised weight, fed by the weight, its own states and the shared ones."""
    weights = [p for p in optimizer.parameters if id(p) in trainable]
    weight_ids = {id(p) for p in weights}
    states = [p for p in optimizer.get_parameters(expand=False) if id(p) not in weight_ids]
    per_weight = {w.name: [s for s in states if s.name.endswith("." + w.name)] for w in weights}
    owned = {id(s) for group in per_weight.values() for s in group}
    shared = [s for s in states if id(s) not in owned]
    scope = scope_of(path, classes)
    for weight in weights:
        names = [builder.parameter(weight.name, "weight", weight.shape, _numpy_dtype(weight), weight)]
        for state in per_weight[weight.name] + shared:
            names.append(builder.parameter(state.name, "optimizer_state", state.shape, _numpy_dtype(state), state))
        _, full_name = builder.node(f"Apply{optimizer.cls_name}", scope, names,
                                    _tensor_type(_numpy_dtype(weight), weight.shape))
        builder.graph.updates[full_name] = weight.name    # its output is the updated weight
