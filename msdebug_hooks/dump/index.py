"""Tie the three views of one graph together: dump file names, the ``.ir`` nodes and the execution order.

File names carry a flattened name (``Default_network-WithLossCell__backbone-LeNet5_conv1-Conv2d_Conv2D-op0``);
the ``.ir`` and ``execution_order/`` carry the real one (``Default/network-WithLossCell/_backbone-LeNet5/...``). The
flattening cannot be undone (``_backbone`` has its own ``_``), so names are matched through the ``.ir``. MindSpore 2.10
CPU numbers a few kernels differently in file names than in the ``.ir`` (``Conv2DBackpropFilter-op0`` on disk is
``...-op1`` in the graph); such leftovers are paired by scope and type when both sides have the same count.
"""
from __future__ import annotations

import re
import threading
from collections import OrderedDict, defaultdict
from dataclasses import dataclass, field
from typing import Optional

from msdebug_hooks.dump.ir_trace import IrGraph, IrNode, StackFrame
from msdebug_hooks.dump.layout import TensorFile, flatten_name
from msdebug_hooks.dump.reader import DumpDir

_OP_SUFFIX = re.compile(r"-op\d+$")
_NOT_KERNELS = {"Load", "UpdateState", "MakeTuple", "Depend", "Return", "TupleGetItem", "Parameter"}

OPERATOR, PARAMETER, CONSTANT = "operator", "parameter", "constant"


@dataclass
class NodeInfo:
    """Everything known about one node of one rank's graph."""

    name: str
    rank: int
    graph_id: int
    graph_name: str
    node_type: str                    # operator / parameter / constant
    op_type: str
    flat_name: Optional[str]          # the name in file names, None if never dumped
    stack: list[StackFrame] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)
    output_slots: tuple[int, ...] = ()
    input_slots: tuple[int, ...] = ()
    exec_index: Optional[int] = None  # position in execution order (operators)
    is_weight: bool = False

    @property
    def order_group(self) -> int:
        """Where this node's tensors sort within an iteration: graph inputs, operators, then weights (dumped last)."""
        if self.node_type == CONSTANT or (self.node_type == PARAMETER and not self.is_weight):
            return 0
        return 1 if self.node_type == OPERATOR else 2


def _stem(flat: str) -> str:
    return _OP_SUFFIX.sub("", flat)


class GraphIndex:
    """Nodes of every (rank, graph) and a per-iteration-directory lookup of their files."""

    def __init__(self, dump: DumpDir, cache_dirs: int = 64) -> None:
        self.dump = dump
        self.nodes: dict[tuple[int, str, str], NodeInfo] = {}      # (rank, graph_name, name) -> info
        self.graph_names: dict[tuple[int, int], str] = {}
        self._by_flat: dict[tuple[int, int], dict[str, NodeInfo]] = {}
        self._lookup_cache: "OrderedDict[tuple, dict]" = OrderedDict()
        self._cache_dirs = cache_dirs
        self._history: dict[tuple[int, int], list[int]] = {}
        self._lock = threading.Lock()
        for rank in dump.ranks():
            for graph_id in dump.graphs(rank):
                self._build(rank, graph_id)

    # ---- building ---------------------------------------------------------------------------------------------
    def _build(self, rank: int, graph_id: int) -> None:
        ir: Optional[IrGraph] = self.dump.ir_graph(rank, graph_id)
        graph_name = ir.graph_name if ir else f"kernel_graph{graph_id}"
        self.graph_names[(rank, graph_id)] = graph_name
        order = {name: pos for pos, name in enumerate(self.dump.execution_order(rank, graph_id))}
        iterations = self.dump.iterations(rank, graph_id)
        sample = []
        for iteration in sorted({iterations[0], iterations[-1]}) if iterations else ():
            files = self.dump.tensor_files(rank, graph_id, iteration)
            self._remember((rank, graph_id, iteration), files)      # a check starts there: no second listing
            sample = sample + files
        constants = self.dump.constant_files(rank, graph_id)

        slots: dict[str, dict[str, set]] = defaultdict(lambda: {"output": set(), "input": set()})
        op_types: dict[str, str] = {}
        first_stamp: dict[str, int] = {}
        for item in sample + constants:
            slots[item.op_name][item.io].add(item.slot)
            op_types[item.op_name] = item.op_type
            first_stamp.setdefault(item.op_name, item.timestamp)
        constant_names = {item.op_name for item in constants}

        ir_nodes: dict[str, IrNode] = ir.nodes if ir else {}
        flat_to_ir = {flatten_name(name): node for name, node in ir_nodes.items()}
        matched: dict[str, IrNode] = {}
        leftovers = [flat for flat in slots if flat not in flat_to_ir and flat not in constant_names]
        for flat in slots:
            if flat in flat_to_ir:
                matched[flat] = flat_to_ir[flat]
        # pair renumbered kernels: same scope + type, same count on both sides
        used = {node.name for node in matched.values()}
        spare_ir: dict[str, list[IrNode]] = defaultdict(list)
        for node in ir_nodes.values():
            if node.name not in used and node.op_type not in _NOT_KERNELS and node.name in order:
                spare_ir[_stem(flatten_name(node.name))].append(node)
        spare_files: dict[str, list[str]] = defaultdict(list)
        for flat in leftovers:
            spare_files[_stem(flat)].append(flat)
        for stem, flats in spare_files.items():
            candidates = spare_ir.get(stem, [])
            if candidates and len(candidates) == len(flats):
                ordered_ir = sorted(candidates, key=lambda n: order.get(n.name, n.index))
                ordered_flats = sorted(flats, key=lambda f: first_stamp.get(f, 0))
                for flat, node in zip(ordered_flats, ordered_ir):
                    matched[flat] = node

        by_flat: dict[str, NodeInfo] = {}
        for flat, slot_sets in slots.items():
            node = matched.get(flat)
            if flat in constant_names:
                info = NodeInfo(name=flat, rank=rank, graph_id=graph_id, graph_name=graph_name,
                                node_type=CONSTANT, op_type=op_types[flat], flat_name=flat)
            elif node is not None:
                kind = PARAMETER if node.is_parameter else OPERATOR
                info = NodeInfo(name=node.name, rank=rank, graph_id=graph_id, graph_name=graph_name,
                                node_type=kind, op_type=op_types[flat], flat_name=flat, stack=list(node.stack),
                                inputs=list(node.inputs), exec_index=order.get(node.name, None),
                                is_weight=node.is_weight)
                if info.exec_index is None and kind == OPERATOR:
                    info.exec_index = len(order) + node.index
            else:
                kind = PARAMETER if op_types[flat] == "Parameter" else OPERATOR
                info = NodeInfo(name=flat, rank=rank, graph_id=graph_id, graph_name=graph_name, node_type=kind,
                                op_type=op_types[flat], flat_name=flat, is_weight=kind == PARAMETER)
            info.output_slots = tuple(sorted(slot_sets["output"]))
            info.input_slots = tuple(sorted(slot_sets["input"]))
            by_flat[flat] = info
            self.nodes[(rank, graph_name, info.name)] = info
        # graph nodes that were never dumped (Load, UpdateState, ...): selectable, but without tensors
        for name, node in ir_nodes.items():
            if (rank, graph_name, name) in self.nodes:
                continue
            kind = PARAMETER if node.is_parameter else OPERATOR
            self.nodes[(rank, graph_name, name)] = NodeInfo(
                name=name, rank=rank, graph_id=graph_id, graph_name=graph_name, node_type=kind,
                op_type=node.op_type, flat_name=None, stack=list(node.stack), inputs=list(node.inputs),
                exec_index=order.get(name), is_weight=node.is_weight)
        self._by_flat[(rank, graph_id)] = by_flat

    # ---- queries ----------------------------------------------------------------------------------------------
    def node(self, rank: int, graph_name: str, name: str) -> Optional[NodeInfo]:
        return self.nodes.get((rank, graph_name, name))

    def _dir_lookup(self, rank: int, graph_id: int, iteration: Optional[int]) -> dict:
        with self._lock:          # checker threads look files up concurrently
            return self._dir_lookup_locked(rank, graph_id, iteration)

    def _dir_lookup_locked(self, rank: int, graph_id: int, iteration: Optional[int]) -> dict:
        key = (rank, graph_id, iteration)
        table = self._lookup_cache.get(key)
        if table is not None:
            self._lookup_cache.move_to_end(key)
            return table
        files = (self.dump.constant_files(rank, graph_id) if iteration is None
                 else self.dump.tensor_files(rank, graph_id, iteration))
        return self._remember(key, files)

    def _remember(self, key: tuple, files: list[TensorFile]) -> dict:
        """The lookup table of one directory's ``files``, kept in the bounded LRU under ``key``."""
        table = {}
        for item in files:   # sorted by timestamp: the newest file of a tensor wins, as MindInsight showed it
            table[(item.op_name, item.io, item.slot)] = item
        self._lookup_cache[key] = table
        if len(self._lookup_cache) > self._cache_dirs:
            self._lookup_cache.popitem(last=False)
        return table

    def tensor_file(self, info: NodeInfo, iteration: int, slot: int, io: str = "output") -> Optional[TensorFile]:
        """The file holding ``info``'s ``io`` ``slot`` at ``iteration`` (constants: the ``constants/`` file)."""
        if info.flat_name is None:
            return None
        if info.node_type == CONSTANT:
            return self._dir_lookup(info.rank, info.graph_id, None).get((info.flat_name, io, slot))
        return self._dir_lookup(info.rank, info.graph_id, iteration).get((info.flat_name, io, slot))

    def previous_iteration(self, info: NodeInfo, iteration: int) -> Optional[int]:
        """The iteration before ``iteration`` in which this node's graph ran (graph history, else ``iteration-1``)."""
        key = (info.rank, info.graph_id)
        if key not in self._history:
            self._history[key] = self.dump.graph_history(*key)
        history = self._history[key]
        earlier = [i for i in history if i < iteration]
        if history:
            return max(earlier) if earlier else None
        return iteration - 1 if iteration > 0 else None
