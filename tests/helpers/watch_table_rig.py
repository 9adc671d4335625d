"""A watchpoint table over six parameters of every dtype the debugger reads, with random values per step, and what
the table reported before batching (each tensor checked on its own) to hold the batched checks against."""
from __future__ import annotations

import numpy as np

from msdebug_hooks.conditions import check_many
from msdebug_hooks.debugger.graph import DebugGraph, GraphParameter
from msdebug_hooks.debugger.sources import ValuesByName
from msdebug_hooks.debugger.watchpoints import WatchpointTable, _hit
from msdebug_hooks.wire import debug_grpc_pb2 as pb
from msdebug_hooks.wire import ms_graph_pb2 as graph_pb

Cond = pb.WatchCondition
SCOPE = "Default/network-Net"
SHAPES = {"a.weight": ((3, 4), np.float32), "b.weight": ((50,), np.float32), "c.bias": ((7,), np.float16),
          "d.weight": ((40000,), np.float32), "e.steps": ((5,), np.int32), "f.weight": ((2, 2), np.float64)}


def table_graph() -> DebugGraph:
    proto = graph_pb.GraphProto(name="kernel_graph_0", root_name="0")
    params = {}
    for name, (shape, dtype) in SHAPES.items():
        proto.parameters.add(name=name)
        params[name] = GraphParameter(name, "weight", shape, np.dtype(dtype), source="live")
    return DebugGraph(proto, params, loss_node=f"{SCOPE}/loss-op9", nodes={})


def watch(table: WatchpointTable, wp_id: int, condition: int, params: list, names: list[str]) -> None:
    table.apply(pb.SetCMD(id=wp_id, watch_condition=Cond(condition=condition, params=[
        Cond.Parameter(name=n, value=v) for n, v in params]),
        watch_nodes=[pb.WatchNode(node_name=f"{SCOPE}/{n}", node_type="Parameter") for n in names]))


def random_values(rng: np.random.Generator, step: int) -> dict[str, np.ndarray]:
    values = {name: (rng.standard_normal(shape) * (1 + step)).astype(dtype) for name, (shape, dtype) in SHAPES.items()}
    values["b.weight"][3] = np.nan if step == 1 else values["b.weight"][3]
    values["f.weight"][0, 0] = np.inf if step == 2 else values["f.weight"][0, 0]
    return values


def one_by_one_hits(table: WatchpointTable, source: ValuesByName, previous: dict) -> list:
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
