"""A tiny in-process ``debugger.EventListener`` server for unit tests of the transport and the session.

It is not MindInsight: it records every request, answers ``WaitCMD`` from a queue the test fills (blocking until
the test provides a command, like a person in the UI), and keeps gRPC's default 4 MiB receive limit, as
MindInsight's server does. Tests against the real MindInsight 2.3.1 live beside it (``mindinsight_server``).
"""
from __future__ import annotations

import queue
import threading
import time
from concurrent import futures
from dataclasses import dataclass, field
from typing import Callable

import grpc

import debug_grpc_pb2_grpc as pb_grpc   # generated into tests/ by protos/generate.py
from msdebug_hooks.wire import debug_grpc_pb2 as pb
from msdebug_hooks.wire import ms_graph_pb2 as graph_pb

OK = pb.EventReply(status=pb.EventReply.OK)


@dataclass
class Recorded:
    """Everything the client sent, in arrival order per RPC."""

    metadata: list = field(default_factory=list)          # SendMetadata requests
    waits: list = field(default_factory=list)             # WaitCMD requests
    wait_deadlines: list = field(default_factory=list)    # per WaitCMD: seconds the client allowed (huge: none)
    heartbeats: list = field(default_factory=list)
    graph_streams: list = field(default_factory=list)     # per SendGraph call: list[Chunk]
    multi_graph_streams: list = field(default_factory=list)
    tensor_streams: list = field(default_factory=list)    # per SendTensors call: list[TensorProto]
    base_streams: list = field(default_factory=list)
    stat_streams: list = field(default_factory=list)
    hit_streams: list = field(default_factory=list)
    order: list = field(default_factory=list)             # RPC names in arrival order


class _Servicer(pb_grpc.EventListenerServicer):
    def __init__(self, owner: "DebugTestServer") -> None:
        self.owner = owner

    def _hook(self, name: str, request):
        hook = self.owner.hooks.get(name)
        return hook(request) if hook else None

    def WaitCMD(self, request, context):
        self.owner.recorded.order.append("WaitCMD")
        self.owner.recorded.wait_deadlines.append(context.time_remaining())
        self.owner.recorded.waits.append(request)
        self.owner.wait_arrived.set()
        while context.is_active():
            try:
                return self.owner.commands.get_nowait() if self.owner.auto_reply else \
                    self.owner.commands.get(timeout=0.05)
            except queue.Empty:
                if self.owner.auto_reply is not None:     # "continue" mode: answer every wait at once
                    return self.owner.auto_reply
                continue
        return pb.EventReply(status=pb.EventReply.FAILED)

    def SendMetadata(self, request, context):
        self.owner.recorded.order.append("SendMetadata")
        self.owner.recorded.metadata.append(request)
        return self._hook("SendMetadata", request) or pb.EventReply(status=pb.EventReply.OK, version_matched=True)

    def SendHeartbeat(self, request, context):
        self.owner.recorded.heartbeats.append(request)
        return self._hook("SendHeartbeat", request) or OK

    def _collect(self, name: str, bucket: list, request_iterator):
        items = list(request_iterator)
        self.owner.recorded.order.append(name)
        bucket.append(items)
        return self._hook(name, items) or OK

    def SendGraph(self, request_iterator, context):
        return self._collect("SendGraph", self.owner.recorded.graph_streams, request_iterator)

    def SendMultiGraphs(self, request_iterator, context):
        return self._collect("SendMultiGraphs", self.owner.recorded.multi_graph_streams, request_iterator)

    def SendTensors(self, request_iterator, context):
        return self._collect("SendTensors", self.owner.recorded.tensor_streams, request_iterator)

    def SendTensorBase(self, request_iterator, context):
        return self._collect("SendTensorBase", self.owner.recorded.base_streams, request_iterator)

    def SendTensorStats(self, request_iterator, context):
        return self._collect("SendTensorStats", self.owner.recorded.stat_streams, request_iterator)

    def SendWatchpointHits(self, request_iterator, context):
        return self._collect("SendWatchpointHits", self.owner.recorded.hit_streams, request_iterator)


class DebugTestServer:
    """Start with ``with DebugTestServer() as server:``; ``server.address`` is ``127.0.0.1:<free port>``.

    ``server.command(reply)`` queues a WaitCMD answer; ``server.auto_reply = reply`` answers every wait with no
    queued command at once (a MindInsight running "continue" without pause); ``server.hooks[name] =
    fn(request_or_items)`` overrides a reply (return None to keep the default, raise to fail the call, sleep to test
    deadlines).
    """

    def __init__(self, port: int = 0) -> None:
        self.recorded = Recorded()
        self.commands: "queue.Queue[pb.EventReply]" = queue.Queue()
        self.hooks: dict[str, Callable] = {}
        self.wait_arrived = threading.Event()
        self.auto_reply: pb.EventReply | None = None   # answer for waits when no command is queued (None: block)
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        pb_grpc.add_EventListenerServicer_to_server(_Servicer(self), self._server)
        self.port = self._server.add_insecure_port(f"127.0.0.1:{port}")
        self.address = f"127.0.0.1:{self.port}"

    def __enter__(self) -> "DebugTestServer":
        self._server.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.stop(grace=None)

    def command(self, reply: pb.EventReply) -> None:
        self.commands.put(reply)

    def wait_for_waits(self, count: int, timeout: float = 10.0) -> None:
        """Block until the client has made ``count`` WaitCMD calls in total."""
        deadline = time.monotonic() + timeout
        while len(self.recorded.waits) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"client made {len(self.recorded.waits)} WaitCMD calls, expected {count}")
            time.sleep(0.01)


def reassemble_tensors(pieces: list) -> list:
    """Join TensorProto pieces into whole tensors the way MindInsight does (content until ``finished``)."""
    tensors, content = [], b""
    for piece in pieces:
        content += piece.tensor_content
        if piece.finished:
            whole = graph_pb.TensorProto()
            whole.CopyFrom(piece)
            whole.tensor_content = content
            tensors.append(whole)
            content = b""
    return tensors
