"""A debugger session against our in-process test server (real gRPC, real transport, no MindInsight): one Dense
weight and a loss, the values the session reads, and the commands a server sends. tests/debugger/conftest.py makes
fixtures of them."""
from __future__ import annotations

import numpy as np

from msdebug_hooks.debugger.graph import DebugGraph, GraphParameter
from msdebug_hooks.debugger.session import DebuggerSession
from msdebug_hooks.debugger.transport import Transport
from msdebug_hooks.wire import debug_grpc_pb2 as pb
from msdebug_hooks.wire import ms_graph_pb2 as graph_pb

from debug_test_server import DebugTestServer

SCOPE = "Default/network-Net/fc-Dense"
WEIGHT_NODE = f"{SCOPE}/fc.weight"          # how MindInsight names the parameter in SetCMD / ViewCMD
LOSS_NODE = "Default/network-Net/_loss_fn-MSELoss/MSELoss-op2"
Cond = pb.WatchCondition


def session_graph() -> DebugGraph:
    proto = graph_pb.GraphProto(name="kernel_graph_0", root_name="0")
    proto.parameters.add(name="fc.weight")
    proto.node.add(name="1", op_type="Dense", scope=SCOPE, full_name=f"{SCOPE}/Dense-op1",
                   input=[graph_pb.InputProto(name="fc.weight")])
    params = {"fc.weight": GraphParameter("fc.weight", "weight", (2, 3), np.dtype(np.float32), source="live")}
    return DebugGraph(proto, params, loss_node=LOSS_NODE, nodes={f"{SCOPE}/Dense-op1": "Dense"})


class Values(dict):
    """The provider: current values by name, counting reads."""

    reads = 0

    def __call__(self, name):
        self.reads += 1
        return self.get(name)


def session_values() -> Values:
    """The weight and the loss the session reads."""
    return Values({"fc.weight": np.full((2, 3), 0.5, np.float32), LOSS_NODE: np.float32(2.5)})


def new_session(server: DebugTestServer, values: Values) -> DebuggerSession:
    """A session connected to ``server`` through a real transport (the caller closes it)."""
    return DebuggerSession(Transport(server.address, timeout=5), session_graph(), values, ms_version="2.10.0",
                           progress_interval=0.2, sleep=lambda s: None)


def run_cmd(steps: int = 1) -> pb.EventReply:
    return pb.EventReply(run_cmd=pb.RunCMD(run_level="step", run_steps=steps))


def set_cmd(wp_id: int, condition: int, params: list[tuple[str, float, bool]], nodes=(WEIGHT_NODE,)) -> pb.EventReply:
    return pb.EventReply(set_cmd=pb.SetCMD(id=wp_id, watch_nodes=[pb.WatchNode(node_name=n, node_type="Parameter")
                                                                  for n in nodes],
        watch_condition=Cond(condition=condition, params=[Cond.Parameter(name=n, value=v, disabled=d)
                                                          for n, v, d in params])))


def view_cmd(level: int, *requests: tuple[str, str, bool]) -> pb.EventReply:
    return pb.EventReply(view_cmd=pb.ViewCMD(level=level, tensors=[
        graph_pb.TensorProto(node_name=n, slot="0", iter=it, truncate=t) for n, it, t in requests]))
