"""``Node`` and ``DebuggerTensor``: MindInsight's offline-debugger objects, over our dump index.

Names, properties and printed forms follow ``mindinsight.debugger`` so scripts written for it keep working:
``node.name`` is the full scope name (``Default/network-WithLossCell/_backbone-LeNet5/conv1-Conv2d/Conv2D-op0``) or the
parameter name (``conv1.weight``); a ``DebuggerTensor`` is always an *output* of its node. Users do not build these;
``DumpAnalyzer`` hands them out from its :class:`NodeTable` (the nodes of the dump's index, which is all they need).
"""
from __future__ import annotations

import collections
from typing import Iterable, Optional, Sequence, Union

import numpy as np

from msdebug_hooks.dump import npy
from msdebug_hooks.dump.index import GraphIndex, NodeInfo
from msdebug_hooks.errors import ConfigError
from msdebug_hooks.validation import whole_number

NodeFeature = collections.namedtuple("NodeFeature", ["name", "rank", "stack", "graph_name", "root_graph_id"])
IntOrList = Union[int, Sequence[int], None]


def as_int_list(value: IntOrList, field: str) -> Optional[list[int]]:
    """``value`` (an int, a list of ints or None) as a list of ints >= 0, or None; ``ConfigError`` naming ``field``."""
    if value is None:
        return None
    items = [value] if isinstance(value, int) and not isinstance(value, bool) else value
    try:
        items = list(items)
    except TypeError:
        raise ConfigError(field, value, "an int, a list of ints, or None") from None
    try:
        return [whole_number(field, item, minimum=0) for item in items]
    except ConfigError:      # named with the whole value the user gave
        raise ConfigError(field, value, "an int >= 0, a list of them, or None") from None


def as_slot_set(slots: IntOrList) -> Optional[set[int]]:
    wanted = as_int_list(slots, "slots")
    return None if wanted is None else set(wanted)


class NodeTable:
    """Every node of a dump's index, by ``(rank, graph_name, name)``, and the links between them."""

    def __init__(self, index: GraphIndex) -> None:
        self.index = index
        self.nodes: dict[tuple[int, str, str], Node] = {
            key: Node._from_info(info, self) for key, info in index.nodes.items()}

    def get(self, rank: int, graph_name: str, name: str) -> Optional["Node"]:
        return self.nodes.get((rank, graph_name, name))

    def input_nodes(self, info: NodeInfo) -> list["Node"]:
        """Nodes whose outputs ``info``'s node reads, in input order (a ``Load`` of a parameter is the parameter)."""
        result = []
        for name in info.inputs:
            found = self.get(info.rank, info.graph_name, name)
            if found is not None and found._info.op_type == "Load" and found._info.inputs:
                found = self.get(info.rank, info.graph_name, found._info.inputs[0]) or found
            if found is not None:
                result.append(found)
        return result

    def iterations(self, info: NodeInfo, iterations: IntOrList) -> list[int]:
        """The dumped iterations of ``info``'s graph, restricted to ``iterations`` (None: all)."""
        dumped = self.index.dump.iterations(info.rank, info.graph_id)
        wanted = as_int_list(iterations, "iterations")
        return dumped if wanted is None else [i for i in dumped if i in set(wanted)]


class Node:
    """A node of the executed graph on one rank (an operator, a parameter or a constant)."""

    def __init__(self, node_feature: NodeFeature, *, _info: Optional[NodeInfo] = None,
                 _table: Optional[NodeTable] = None) -> None:
        self._node_feature = node_feature
        self._info = _info
        self._table = _table

    @classmethod
    def _from_info(cls, info: NodeInfo, table: NodeTable) -> "Node":
        feature = NodeFeature(info.name, info.rank, [frame.as_dict() for frame in info.stack], info.graph_name,
                              info.graph_id)
        return cls(feature, _info=info, _table=table)

    @property
    def name(self) -> str:
        """Full name (scope + ``-opN``) of an operator, or the parameter's name."""
        return self._node_feature.name

    @property
    def rank(self) -> int:
        return self._node_feature.rank

    @property
    def stack(self) -> list[dict]:
        """Source lines behind the node, innermost last: ``{'file_path', 'line_no', 'code_line', 'has_substack'}``."""
        return self._node_feature.stack

    @property
    def graph_name(self) -> str:
        return self._node_feature.graph_name

    @property
    def root_graph_id(self) -> int:
        return self._node_feature.root_graph_id

    # ---- extras (not in MindInsight) --------------------------------------------------------------------------
    @property
    def node_type(self) -> str:
        """``"operator"``, ``"parameter"`` or ``"constant"``."""
        return self._info.node_type if self._info else "operator"

    @property
    def op_type(self) -> str:
        return self._info.op_type if self._info else ""

    def source_lines(self, exclude: Iterable[str] = ("site-packages", "dist-packages")) -> list[dict]:
        """The stack without framework frames: the user's own lines, outermost first."""
        return [frame for frame in self.stack if not any(part in frame["file_path"] for part in exclude)]

    # ---- tensors ----------------------------------------------------------------------------------------------
    def get_output_tensors(self, iterations=None, slots=None) -> list["DebuggerTensor"]:
        """Output tensors of this node for the given iterations (default: all dumped) and slots (default: all)."""
        table = self._require_table()
        iterations = table.iterations(self._info, iterations)
        wanted = as_slot_set(slots)
        return [DebuggerTensor(self, slot, iteration)
                for slot in self._info.output_slots if wanted is None or slot in wanted
                for iteration in iterations]

    def get_input_tensors(self, iterations=None, slots=None) -> list["DebuggerTensor"]:
        """Output tensors of this node's input nodes; ``slots`` counts over the inputs in order."""
        table = self._require_table()
        wanted = as_slot_set(slots)
        result, index = [], 0
        for node in table.input_nodes(self._info):
            node_slots = node._info.output_slots or (0,)
            chosen = [s for s in node._info.output_slots if wanted is None or index + s in wanted]
            if chosen:
                result.extend(node.get_output_tensors(iterations, chosen))
            index += len(node_slots)
        return result

    def _require_table(self) -> NodeTable:
        if self._table is None or self._info is None:
            raise ValueError(f"node {self.name!r} was not produced by a DumpAnalyzer; select nodes through one")
        return self._table

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Node) and (self.rank, self.graph_name, self.name) == (
            other.rank, other.graph_name, other.name)

    def __hash__(self) -> int:
        return hash((self.rank, self.graph_name, self.name))

    def __repr__(self) -> str:
        return f"Node({self.name!r}, rank={self.rank}, graph_name={self.graph_name!r})"

    def __str__(self) -> str:
        return f"rank: {self.rank}\ngraph_name: {self.graph_name}\nnode_name: {self.name}"


class DebuggerTensor:
    """One output tensor of a node at one iteration on one rank; ``value()`` reads it from the dump."""

    def __init__(self, node: Node, slot: int, iteration: int) -> None:
        self._node = node
        self._slot = slot
        self._iteration = iteration
        self._identity: Optional[tuple] = None   # _key(), built on first use: checks hash tensors many times

    @property
    def node(self) -> Node:
        return self._node

    @property
    def slot(self) -> int:
        return self._slot

    @property
    def iteration(self) -> int:
        return self._iteration

    @property
    def rank(self) -> int:
        return self._node.rank

    @property
    def root_graph_id(self) -> int:
        return self._node.root_graph_id

    # ---- extras -----------------------------------------------------------------------------------------------
    @property
    def file(self):
        """Path of the ``.npy`` holding this tensor, or ``None`` when it was not dumped."""
        index = self._node._require_table().index
        found = index.tensor_file(self._node._info, self._iteration, self._slot)
        return found.path if found else None

    def has_value(self) -> bool:
        return self.file is not None

    def previous(self) -> Optional["DebuggerTensor"]:
        """The same tensor at the previous iteration its graph ran, or ``None`` (first iteration)."""
        index = self._node._require_table().index
        before = index.previous_iteration(self._node._info, self._iteration)
        return None if before is None else DebuggerTensor(self._node, self._slot, before)

    def value(self) -> Optional[np.ndarray]:
        """The tensor (read-only, memory-mapped); ``None`` if no file holds it. ``DumpError`` if the file is bad."""
        path = self.file
        return None if path is None else npy.load(path)

    def _key(self) -> tuple:
        if self._identity is None:
            self._identity = (self.rank, self._node.graph_name, self._node.name, self._slot, self._iteration)
        return self._identity

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DebuggerTensor) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"DebuggerTensor({self._node.name!r}, slot={self._slot}, iteration={self._iteration}, rank={self.rank})"

    def __str__(self) -> str:
        return (f"rank: {self.rank}\ngraph_name: {self._node.graph_name}\nnode_name: {self._node.name}\n"
                f"slot: {self._slot}\niteration: {self._iteration}")
