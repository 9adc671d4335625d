"""A protocol client in a thread, speaking ``debugger.EventListener`` the way MindSpore's own C++ client does (one
``WaitCMD`` per step end, no free runs unless its heartbeat says so): for tests of the server's state machine that
need exact control of what the training does (a hit at a chosen step, a silent death, an error at the end) and no
MindSpore. It is a client of the real protocol over real gRPC, not a stand-in for MindSpore's training.
"""
from __future__ import annotations

import threading
import time
from typing import Optional

import grpc

from msdebug_hooks.wire import debug_grpc_pb2 as pb
from msdebug_hooks.wire import ms_graph_pb2 as graph_pb

F32 = graph_pb.TypeProto(data_type=graph_pb.DT_TENSOR,
                         tensor_type=graph_pb.TypeProto.Tensor(elem_type=graph_pb.DT_FLOAT32))
LOSS = "Default/net-Net/loss-Loss/Loss-op2"


def small_graph() -> graph_pb.GraphProto:
    """``fc.weight`` feeding a MatMul, then a loss node: enough to watch and to hit."""
    g = graph_pb.GraphProto(name="kernel_graph_0", root_name="0")
    for param in ("x", "fc.weight"):
        g.parameters.add(name=param, type=F32)
    g.node.add(name="1", op_type="MatMul", scope="Default/net-Net/fc-Dense",
               full_name="Default/net-Net/fc-Dense/MatMul-op1",
               input=[graph_pb.InputProto(name="x"), graph_pb.InputProto(name="fc.weight")], output_type=F32)
    g.node.add(name="2", op_type="Loss", scope="Default/net-Net/loss-Loss", full_name=LOSS,
               input=[graph_pb.InputProto(name="1")], output_type=F32)
    return g


class ProtocolTraining:
    """Runs steps as the server's ``WaitCMD`` answers say, in a thread.

    ``hit_steps``: at these step ends it sends a hit on the loss for every watchpoint it was given (before that
    step end's wait, as the protocol says). ``vanish_at``: at that step end it stops calling (no wait, no
    heartbeat, connection left open): a training that died without a word. ``error``: what its training-done
    message says in ``cur_node`` when its steps run out (``steps``). ``heartbeat``: its message, sent once.
    """

    def __init__(self, address: str, *, rank: int = 0, steps: int = 10_000, hit_steps: frozenset = frozenset(),
                 vanish_at: Optional[int] = None, error: str = "", heartbeat: str = "Debugger is alive",
                 period: int = 30, step_seconds: float = 0.001) -> None:
        self.channel = grpc.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])  # own peer
        self.rank, self.steps, self.hit_steps = rank, steps, hit_steps
        self.vanish_at, self.error, self.heartbeat, self.period = vanish_at, error, heartbeat, period
        self.step_seconds = step_seconds
        self.step = 0
        self.watchpoints: dict[int, pb.WatchCondition] = {}
        self.replies: list[str] = []
        self.ended = ""
        self._unary = {name: self.channel.unary_unary(f"/debugger.EventListener/{name}",
                                                      request_serializer=kind.SerializeToString,
                                                      response_deserializer=pb.EventReply.FromString)
                       for name, kind in (("WaitCMD", pb.Metadata), ("SendMetadata", pb.Metadata),
                                          ("SendHeartbeat", pb.Heartbeat))}
        self._graph = self.channel.stream_unary("/debugger.EventListener/SendGraph",
                                                request_serializer=pb.Chunk.SerializeToString,
                                                response_deserializer=pb.EventReply.FromString)
        self._hits = self.channel.stream_unary("/debugger.EventListener/SendWatchpointHits",
                                               request_serializer=pb.WatchpointHit.SerializeToString,
                                               response_deserializer=pb.EventReply.FromString)
        self.thread = threading.Thread(target=self._run, daemon=True, name=f"protocol-training-{rank}")

    def __enter__(self) -> "ProtocolTraining":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.thread.join(1.0)          # a last call in flight (training done) gets its answer
        self.channel.close()
        self.thread.join(10)

    def _meta(self, **fields) -> pb.Metadata:
        return pb.Metadata(device_name=f"{self.rank}:0", cur_step=self.step, backend="GPU", **fields)

    def _run(self) -> None:
        try:
            self._unary["SendMetadata"](self._meta(ms_version="2.10.0", graph_num=1), timeout=10)
            self._graph(iter([pb.Chunk(buffer=small_graph().SerializeToString(), finished=True)]), timeout=10)
            self._unary["SendHeartbeat"](pb.Heartbeat(message=self.heartbeat, period=self.period), timeout=10)
            self._loop()
        except grpc.RpcError as exc:
            self.ended = self.ended or f"rpc error: {exc.code()}"
        except ValueError:                           # the test closed the channel under a call
            self.ended = self.ended or "channel closed"

    def _loop(self) -> None:
        while True:
            reply = self._unary["WaitCMD"](self._meta())
            kind = reply.WhichOneof("cmd")
            self.replies.append(reply.run_cmd.run_level if kind == "run_cmd" else str(kind))
            if kind == "exit":
                self.ended = "exit"
                return
            if kind == "set_cmd":
                if reply.set_cmd.delete:
                    self.watchpoints.pop(reply.set_cmd.id, None)
                else:
                    self.watchpoints[reply.set_cmd.id] = reply.set_cmd.watch_condition
                continue
            if kind != "run_cmd" or reply.run_cmd.run_level == "recheck":
                if kind == "run_cmd":
                    self._send_hits()
                elif reply.status == pb.EventReply.FAILED:
                    self.ended = "failed"
                    return
                continue
            time.sleep(self.step_seconds)            # the step
            self.step += 1
            if self.step == self.vanish_at:
                self.ended = "vanished"
                return
            if self.step >= self.steps:
                self._unary["SendMetadata"](self._meta(training_done=True, cur_node=self.error), timeout=10)
                self.ended = "done"
                return
            self._send_hits()

    def _send_hits(self) -> None:
        if self.step not in self.hit_steps or not self.watchpoints:
            return
        hits = [pb.WatchpointHit(id=wp_id, watch_condition=cond, tensor=graph_pb.TensorProto(node_name=LOSS, slot="0"))
                for wp_id, cond in self.watchpoints.items()]
        self._hits(iter(hits), timeout=10)
