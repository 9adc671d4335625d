"""The replies a ``WaitCMD`` can carry, built as the protocol defines them (``EventReply``'s ``cmd`` oneof).

* run one step: ``RunCMD{run_level:"step", run_steps:1}``; the server counts multi-step runs itself, one per
  ``WaitCMD``, because clients ignore ``run_steps`` and stop at their next step end anyway;
* free run (our clients only, ``wire/protocol.py``): ``RunCMD{run_level:"free", run_steps:N}``, N steps or, with
  0, until the server calls the training back by answering its watch call;
* recheck: ``RunCMD{run_level:"recheck"}`` (the client re-evaluates every watchpoint and stays suspended);
* set / delete a watchpoint: ``SetCMD`` with every parameter of the condition, enabled or ``disabled``, in the
  condition's order, and the watched nodes by full name;
* view tensors: ``ViewCMD`` (level value / statistics / base), ``truncate`` set for parameters, ``iter:"prev"`` for
  the previous step's value;
* terminate: ``exit``.
"""
from __future__ import annotations

from typing import Sequence

from msdebug_hooks.wire import debug_grpc_pb2 as pb
from msdebug_hooks.wire import ms_graph_pb2 as graph_pb
from msdebug_hooks.conditions import Condition
from msdebug_hooks.wire.protocol import FREE_RUN_LEVEL, PREVIOUS_STEP, RECHECK_LEVEL, STEP_LEVEL, VIEW_LEVELS
from msdebug_hooks.server.graph import Node

__all__ = ["run_step", "free_run", "recheck", "terminate", "set_watchpoint", "delete_watchpoint", "view", "ok",
           "failed", "version_reply"]


def ok() -> pb.EventReply:
    return pb.EventReply(status=pb.EventReply.OK)


def failed() -> pb.EventReply:
    return pb.EventReply(status=pb.EventReply.FAILED)


def version_reply(matched: bool) -> pb.EventReply:
    return pb.EventReply(status=pb.EventReply.OK, version_matched=matched)


def run_step() -> pb.EventReply:
    return pb.EventReply(status=pb.EventReply.OK, run_cmd=pb.RunCMD(run_level=STEP_LEVEL, run_steps=1))


def free_run(steps: int) -> pb.EventReply:
    """Run ``steps`` steps (0: until called back) without a ``WaitCMD`` per step."""
    return pb.EventReply(status=pb.EventReply.OK, run_cmd=pb.RunCMD(run_level=FREE_RUN_LEVEL, run_steps=steps))


def recheck() -> pb.EventReply:
    return pb.EventReply(status=pb.EventReply.OK, run_cmd=pb.RunCMD(run_level=RECHECK_LEVEL))


def terminate() -> pb.EventReply:
    return pb.EventReply(status=pb.EventReply.OK, exit=True)


def set_watchpoint(watchpoint_id: int, condition: Condition, nodes: Sequence[Node]) -> pb.EventReply:
    wc = pb.WatchCondition(condition=condition.condition_id)
    for name, value, disabled in condition.protocol_params():
        wc.params.add(name=name, disabled=disabled, value=float(value))
    enabled = [float(v) for _, v, d in condition.protocol_params() if not d]
    if enabled:
        wc.value = enabled[-1]          # legacy field: the last enabled parameter, as MindInsight fills it
    cmd = pb.SetCMD(id=watchpoint_id, watch_condition=wc,
                    watch_nodes=[pb.WatchNode(node_name=n.name, node_type=n.type, graph_name=n.graph, rank_id=0)
                                 for n in nodes])
    return pb.EventReply(status=pb.EventReply.OK, set_cmd=cmd)


def delete_watchpoint(watchpoint_id: int) -> pb.EventReply:
    return pb.EventReply(status=pb.EventReply.OK, set_cmd=pb.SetCMD(id=watchpoint_id, delete=True))


def view(requests: Sequence[tuple[Node, int, bool]], level: str = "value") -> pb.EventReply:
    """``requests``: (node, output slot, previous step) triples."""
    tensors = [graph_pb.TensorProto(node_name=node.name, slot=str(slot), iter=PREVIOUS_STEP if previous else "",
                                    truncate=node.is_parameter) for node, slot, previous in requests]
    return pb.EventReply(status=pb.EventReply.OK, view_cmd=pb.ViewCMD(tensors=tensors, level=VIEW_LEVELS[level]))
