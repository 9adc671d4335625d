"""Issue 14: the online debugger checks the tensors that share a condition list in one batched statistics call. That
must change nothing a server sees: the hits (which, in which order, with which values and error codes) equal those
of checking each tensor on its own with ``check_many``.
"""
from __future__ import annotations

import numpy as np

from msdebug_hooks.wire import debug_grpc_pb2 as pb
from msdebug_hooks.wire import ms_graph_pb2 as graph_pb
from msdebug_hooks.conditions import check_many
from msdebug_hooks.debugger.graph import DebugGraph, GraphParameter
from msdebug_hooks.debugger.sources import ValuesByName
from msdebug_hooks.debugger.watchpoints import WatchpointTable, _hit

Cond = pb.WatchCondition
SCOPE = "Default/network-Net"
SHAPES = {"a.weight": ((3, 4), np.float32), "b.weight": ((50,), np.float32), "c.bias": ((7,), np.float16),
          "d.weight": ((40000,), np.float32), "e.steps": ((5,), np.int32), "f.weight": ((2, 2), np.float64)}


def _graph() -> DebugGraph:
    proto = graph_pb.GraphProto(name="kernel_graph_0", root_name="0")
    params = {}
    for name, (shape, dtype) in SHAPES.items():
        proto.parameters.add(name=name)
        params[name] = GraphParameter(name, "weight", shape, np.dtype(dtype), source="live")
    return DebugGraph(proto, params, loss_node=f"{SCOPE}/loss-op9", nodes={})


def _set(table: WatchpointTable, wp_id: int, condition: int, params: list, names: list[str]) -> None:
    table.apply(pb.SetCMD(id=wp_id, watch_condition=Cond(condition=condition, params=[
        Cond.Parameter(name=n, value=v) for n, v in params]),
        watch_nodes=[pb.WatchNode(node_name=f"{SCOPE}/{n}", node_type="Parameter") for n in names]))


def _values(rng: np.random.Generator, step: int) -> dict[str, np.ndarray]:
    values = {name: (rng.standard_normal(shape) * (1 + step)).astype(dtype) for name, (shape, dtype) in SHAPES.items()}
    values["b.weight"][3] = np.nan if step == 1 else values["b.weight"][3]
    values["f.weight"][0, 0] = np.inf if step == 2 else values["f.weight"][0, 0]
    return values


def _reference(table: WatchpointTable, source: ValuesByName, previous: dict) -> list:
    """What the table reported before batching: tensors in watch order, each checked on its own."""
    entries: dict[str, list] = {}
    for wp in table.by_id.values():
        for node in wp.nodes:
            entries.setdefault(source.tensor_name(node), []).append((wp, node))
    hits = []
    for tensor, pairs in entries.items():
        results = check_many([wp.condition for wp, _ in pairs], source.current(tensor), previous.get(tensor))
        hits += [_hit(wp, node, r) for (wp, node), r in zip(pairs, results) if r.reportable]
    return hits


def test_batched_hits_equal_one_by_one_hits_step_after_step():
    rng = np.random.default_rng(7)
    current: dict[str, np.ndarray] = {}
    source = ValuesByName(_graph(), lambda name: current.get(name))
    table = WatchpointTable(source.graph, source, lambda key, message: None)
    everything = list(SHAPES)
    _set(table, 1, Cond.tensor_general_overflow, [], everything)
    _set(table, 2, Cond.tensor_too_large, [("abs_mean_gt", 0.5)], everything)
    _set(table, 3, Cond.tensor_change_too_large, [("abs_mean_update_ratio_gt", 0.1)], ["a.weight", "c.bias"])
    _set(table, 4, Cond.tensor_not_changed, [("rtol", 1e-5)], ["e.steps", "a.weight", "f.weight"])
    _set(table, 5, Cond.tensor_range, [("range_start_inclusive", -1.0), ("range_end_inclusive", 1.0),
                                       ("range_percentage_gt", 50.0)], ["d.weight", "b.weight"])
    compared = 0                  # b and d share a batch with c between them: the order is that of the watches
    for step in range(4):
        previous = {name: source.previous(name) for name in SHAPES if source.previous(name) is not None}
        current.update(_values(rng, step))
        if step == 3:
            current["e.steps"] = source.previous("e.steps").copy()       # unchanged: watchpoint 4 hits on it
        source.forget_current()
        got = table.check(initial=step == 0, step_end=step > 0)
        want = _reference(table, source, previous) if step > 0 else got
        assert [h.SerializeToString() for h in got] == [h.SerializeToString() for h in want]
        compared += len(got)
        source.keep_previous(table.watched_parameters())
    assert compared > 20          # NaN, Inf, no-previous errors and real hits were all compared

