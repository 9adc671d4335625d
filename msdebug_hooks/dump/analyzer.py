"""``DumpAnalyzer``: MindInsight's offline debugger API over a MindSpore 2.x sync dump, in plain numpy.

MindInsight's ``DumpAnalyzer`` needs ``mindspore.offline_debug``, which MindSpore 2.10 no longer ships. This one reads
the dump directory itself; a script written for ``mindinsight.debugger`` runs after changing only its imports::

    from msdebug_hooks import DumpAnalyzer, Watchpoint, TensorTooLargeCondition

    analyzer = DumpAnalyzer("/path/to/dump_dir")                        # the dump config's "path"
    tensors = analyzer.select_tensors("lenet.py:58", select_by="code_stack")
    hits = analyzer.check_watchpoints([Watchpoint(tensors, TensorTooLargeCondition(abs_mean_gt=0.001))])
    for hit in hits:
        print(hit.get_hit_detail(), hit.tensor.iteration, hit.tensor.node.name)

Unlike MindInsight, checking runs in threads of this process (no ``if __name__ == "__main__"`` needed) and works on
CPU dumps. Hits come sorted by iteration, then execution order, so the first producer of a NaN is the first hit.
"""
from __future__ import annotations

import csv
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Optional, Union

from msdebug_hooks.dump.index import CONSTANT, OPERATOR, PARAMETER, GraphIndex, NodeInfo
from msdebug_hooks.dump.nodes import DebuggerTensor, IntOrList, Node, NodeFeature, NodeTable, as_int_list, as_slot_set
from msdebug_hooks.dump.reader import DumpDir
from msdebug_hooks.dump.watchpoints import HitDetail, Watchpoint, WatchpointHit, check_watchpoints
from msdebug_hooks.errors import ConfigError
from msdebug_hooks.validation import optional_whole_number

__all__ = ["DumpAnalyzer", "Node", "NodeFeature", "DebuggerTensor", "Watchpoint", "WatchpointHit", "HitDetail",
           "GraphRun"]

_MEM_LIMIT_RANGE = (2048, 2147483647)
_SELECT_BY = ("node_name", "code_stack")


@dataclass(frozen=True)
class GraphRun:
    """One entry of the graph execution history: ``graph_name`` ran at ``iteration``; ``has_data`` if dumped."""

    rank: int
    graph_id: int
    graph_name: str
    iteration: int
    has_data: bool


class DumpAnalyzer:
    """Inspect a dump: select nodes and tensors by name or source line, read values, check watchpoints.

    Args:
        dump_dir: the dump config's ``path`` (the directory holding ``rank_<id>/``).
        mem_limit: MB a single checked tensor (with its previous value) may take; larger ones are reported with
            error code 8 instead of being read. ``None`` (default): no limit. Allowed: 2048 to 2147483647.
        workers: threads used by ``check_watchpoints`` (default: up to 2).
    """

    def __init__(self, dump_dir: Union[str, Path], mem_limit: Optional[int] = None, *,
                 workers: Optional[int] = None) -> None:
        optional_whole_number("mem_limit", mem_limit, minimum=_MEM_LIMIT_RANGE[0], maximum=_MEM_LIMIT_RANGE[1],
                              allowed="None or an int number of MB from 2048 to 2147483647")
        optional_whole_number("workers", workers, minimum=1, allowed="None or an int >= 1")
        self._dump = DumpDir(dump_dir)
        self._dump_dir = str(self._dump.root)
        self._mem_limit = mem_limit
        self._workers = workers
        self._index = GraphIndex(self._dump)
        self._table = NodeTable(self._index)
        self._nodes = self._table.nodes

    # ---- ranks, iterations, history ----------------------------------------------------------------------------
    def get_ranks(self) -> list[int]:
        """Ranks with data in this dump, sorted."""
        return self._dump.ranks()

    def get_iterations(self, ranks: IntOrList = None) -> list[int]:
        """Iterations with dumped data on ``ranks`` (default: all), sorted."""
        ranks = self._ranks(ranks)
        return sorted({i for rank in ranks for i in self._dump.iterations(rank)})

    def get_graph_history(self, ranks: IntOrList = None, has_data: Optional[bool] = None) -> list[GraphRun]:
        """The graph execution history: every (graph, iteration) that ran, and whether it was dumped.

        Read from ``execution_order/ms_global_execution_order_graph_<g>.csv``; graphs without that file list their
        dumped iterations. ``has_data=True``/``False`` keeps only runs with/without dumped data.
        """
        runs = []
        for rank in self._ranks(ranks):
            for graph_id in self._dump.graphs(rank):
                dumped = set(self._dump.iterations(rank, graph_id))
                history = self._dump.graph_history(rank, graph_id) or sorted(dumped)
                name = self._index.graph_names.get((rank, graph_id), f"kernel_graph{graph_id}")
                for iteration in history:
                    run = GraphRun(rank, graph_id, name, iteration, iteration in dumped)
                    if has_data is None or run.has_data == has_data:
                        runs.append(run)
        return sorted(runs, key=lambda r: (r.iteration, r.rank, r.graph_id))

    def layout_warnings(self) -> list[str]:
        """What this dump lacks that changes the answers, one sentence per rank and graph (empty: nothing).

        Without ``graphs/`` nodes have no source lines (``select_by="code_stack"`` finds nothing) and keep the
        names of their files; without ``execution_order/`` hits within an iteration are not in the order the
        operators ran (a gradient may come before the forward operator that caused it). A rank with no operator
        under ``Gradients/`` holds no backward pass: MindSpore dumps what runs as a graph, so a PyNative training
        without ``@jit`` leaves only its optimizer's update in the dump (an inference dump has none either).
        """
        notes = []
        for rank in self.get_ranks():
            operators = self.list_nodes(rank, OPERATOR)
            if operators and not any(n.name.startswith("Gradients/") for n in operators):
                kinds = sorted({n._info.op_type for n in operators})
                notes.append(f"rank_{rank}: no operator of a backward pass (none under Gradients/); only "
                             f"{len(operators)} operator(s) of type {', '.join(kinds[:6])}"
                             f"{' ...' if len(kinds) > 6 else ''} were dumped. MindSpore dumps what runs as a graph: "
                             "a PyNative training without @mindspore.jit dumps its optimizer alone, not the forward "
                             "and backward passes (dump in GRAPH_MODE, or put the training step under "
                             "@mindspore.jit); an inference has no backward pass")
            for graph_id in self._dump.graphs(rank):
                where = f"rank_{rank}, graph {graph_id}"
                if self._dump.ir_graph(rank, graph_id) is None:
                    notes.append(f"{where}: no graphs/ms_output_trace_code_graph_{graph_id}.ir, so nodes have no "
                                 "source lines (code_stack selects nothing) and are named after their files")
                if not self._dump.execution_order(rank, graph_id):
                    notes.append(f"{where}: no execution_order/ms_execution_order_graph_{graph_id}.csv, so hits "
                                 "within an iteration are not in the order the operators ran")
        return notes

    # ---- nodes ------------------------------------------------------------------------------------------------
    def list_nodes(self, ranks: IntOrList = None, node_type: Optional[str] = None) -> list[Node]:
        """Every node, in execution order within each rank; ``node_type``: operator, parameter or constant."""
        if node_type not in (None, OPERATOR, PARAMETER, CONSTANT):
            raise ConfigError("node_type", node_type, "None, 'operator', 'parameter' or 'constant'")
        ranks = set(self._ranks(ranks))
        nodes = [n for n in self._nodes.values()
                 if n.rank in ranks and (node_type is None or n._info.node_type == node_type)]
        return sorted(nodes, key=lambda n: (n.rank, n.root_graph_id, n._info.order_group,
                                            n._info.exec_index if n._info.exec_index is not None else -1, n.name))

    def select_nodes(self, query_string: str, use_regex: bool = False, select_by: str = "node_name",
                     ranks: IntOrList = None, case_sensitive: bool = True) -> list[Node]:
        """Nodes whose name (``select_by="node_name"``) or source stack (``"code_stack"``) contains or matches
        ``query_string``. A stack entry reads ``<file_path>:<line_no>\\n<code_line>``; a query ending in a line
        number matches that line exactly (``lenet.py:5`` does not match line 58)."""
        match = self._matcher(query_string, use_regex, select_by, case_sensitive)
        nodes = self.list_nodes(ranks)
        if select_by == "code_stack" and not any(node.stack for node in nodes):
            warnings.warn(f"no node of {self._dump_dir} has source lines (its graphs/ directory is missing), so "
                          f"select_by='code_stack' selects nothing", stacklevel=2)
        return [node for node in nodes if match(node)]

    def select_tensors(self, query_string: str, use_regex: bool = False, select_by: str = "node_name",
                       iterations: IntOrList = None, ranks: IntOrList = None, slots: IntOrList = None,
                       case_sensitive: bool = True) -> list[DebuggerTensor]:
        """Output tensors of the nodes :meth:`select_nodes` finds, for the given iterations, ranks and slots.

        Only nodes that have dumped tensors contribute (``Load``, ``UpdateState`` ... are never dumped).
        """
        nodes = self.select_nodes(query_string, use_regex, select_by, ranks, case_sensitive)
        iterations = self._iterations(iterations, ranks)
        slots = as_slot_set(slots)
        tensors = []
        for node in nodes:
            if node._info.output_slots:
                tensors.extend(node.get_output_tensors(iterations, slots))
        return tensors

    def get_input_nodes(self, node: Node) -> list[Node]:
        """Nodes whose outputs ``node`` reads, in input order (a ``Load`` of a parameter is shown as the
        parameter)."""
        return self._table.input_nodes(self._validate_node(node))

    def get_output_nodes(self, node: Node) -> list[Node]:
        """Nodes that read an output of ``node``."""
        info = self._validate_node(node)
        targets = {info.name}
        targets |= {n.name for n in self._nodes.values()
                    if n.rank == info.rank and n.graph_name == info.graph_name and n._info.op_type == "Load"
                    and n._info.inputs[:1] == [info.name]}
        return [n for n in self.list_nodes(info.rank)
                if n.graph_name == info.graph_name and targets & set(n._info.inputs) and n.name not in targets]

    def list_affected_nodes(self, tensor: DebuggerTensor) -> list[Node]:
        """Nodes that use ``tensor`` as an input (its node's output nodes)."""
        if not isinstance(tensor, DebuggerTensor):
            raise ConfigError("tensor", type(tensor).__name__, "a DebuggerTensor from select_tensors()")
        return self.get_output_nodes(tensor.node)

    def export_graphs(self, output_dir: Union[str, Path, None] = None) -> str:
        """Write each graph's nodes with their stacks to ``<output_dir>/<graph>_rank<r>.csv``; returns the directory.

        MindInsight wrote ``.xlsx``; CSV keeps this dependency-free and opens in the same tools.
        """
        from msdebug_hooks._files import atomic_path

        out = Path(output_dir) if output_dir is not None else Path.cwd()
        for rank in self.get_ranks():
            by_graph: dict[str, list[Node]] = {}
            for node in self.list_nodes(rank):
                by_graph.setdefault(node.graph_name, []).append(node)
            for graph_name, nodes in by_graph.items():
                with atomic_path(out / f"{graph_name}_rank{rank}.csv", mode=0o644) as tmp:
                    with open(tmp, "w", newline="", encoding="utf-8") as handle:
                        writer = csv.writer(handle)
                        writer.writerow(["name", "type", "op_type", "inputs", "stack"])
                        for node in nodes:
                            stack = " | ".join(f"{f['file_path']}:{f['line_no']} {f['code_line']}" for f in node.stack)
                            writer.writerow([node.name, node.node_type, node.op_type, ";".join(node._info.inputs),
                                             stack])
        return str(out)

    # ---- watchpoints ------------------------------------------------------------------------------------------
    def check_watchpoints(self, watchpoints: Iterable[Watchpoint], error_on_no_value: bool = False) -> list[
            WatchpointHit]:
        """Check every watchpoint on its tensors; each tensor is read once for all watchpoints naming it.

        Returns the hits sorted by iteration, rank, then execution order (graph inputs first, weights, which
        MindSpore dumps after the step, last). A tensor that could not be checked is a hit with ``error_code``
        set (NaN/Inf for value conditions, no previous value for change conditions, ...).
        """
        if not isinstance(error_on_no_value, bool):
            raise ConfigError("error_on_no_value", error_on_no_value, "True or False")
        return check_watchpoints(list(watchpoints), self._order_key, error_on_no_value=error_on_no_value,
                                 mem_limit_mb=self._mem_limit, workers=self._workers)

    # ---- helpers ----------------------------------------------------------------------------------------------
    def _order_key(self, tensor: DebuggerTensor) -> tuple:
        info: NodeInfo = tensor.node._info
        position = info.exec_index if info.exec_index is not None else -1
        return (tensor.iteration, tensor.rank, info.graph_id, info.order_group, position, info.name, tensor.slot)

    def _ranks(self, ranks: IntOrList) -> list[int]:
        available = self.get_ranks()
        wanted = as_int_list(ranks, "ranks")
        if wanted is None:
            return available
        missing = [r for r in wanted if r not in available]
        if missing:
            raise ConfigError("ranks", ranks, f"ranks present in the dump: {available}")
        return wanted

    def _iterations(self, iterations: IntOrList, ranks: IntOrList = None) -> Optional[list[int]]:
        wanted = as_int_list(iterations, "iterations")
        if wanted is None:
            return None
        available = self.get_iterations(ranks)
        if wanted and not set(wanted) & set(available):
            raise ConfigError("iterations", iterations, f"iterations present in the dump: {available}")
        return [i for i in wanted if i in available]

    def _validate_node(self, node: Node) -> NodeInfo:
        if not isinstance(node, Node):
            raise ConfigError("node", type(node).__name__, "a Node from select_nodes() or list_nodes()")
        found = self._nodes.get((node.rank, node.graph_name, node.name))
        if found is None:
            raise ConfigError("node", node.name, f"a node of this dump ({self._dump_dir}), rank {node.rank}")
        return found._info

    @staticmethod
    def _matcher(query: str, use_regex: bool, select_by: str, case_sensitive: bool) -> Callable[[Node], bool]:
        if not isinstance(query, str):
            raise ConfigError("query_string", query, "a string")
        for field, value in (("use_regex", use_regex), ("case_sensitive", case_sensitive)):
            if not isinstance(value, bool):
                raise ConfigError(field, value, "True or False")
        if select_by not in _SELECT_BY:
            raise ConfigError("select_by", select_by, "'node_name' or 'code_stack'")
        flags = 0 if case_sensitive else re.IGNORECASE
        if use_regex:
            try:
                pattern = re.compile(query, flags)
            except re.error as exc:
                raise ConfigError("query_string", query, "a valid Python regular expression",
                                  detail=str(exc)) from None
        else:
            exact_line = select_by == "code_stack" and re.search(r":\d+$", query) is not None
            pattern = re.compile(re.escape(query) + (r"(?!\d)" if exact_line else ""), flags)
        if select_by == "node_name":
            return lambda node: pattern.search(node.name) is not None
        return lambda node: any(pattern.search(f"{f['file_path']}:{f['line_no']}\n{f['code_line']}")
                                for f in node.stack)

    def __repr__(self) -> str:
        return f"DumpAnalyzer({self._dump_dir!r}, ranks={self.get_ranks()}, iterations={self.get_iterations()})"
