"""The ``debugger.EventListener`` gRPC service, thin: parse each request, find its job, hand it over.

Requests arrive as raw bytes and are parsed here, so a client sending something that is not the protocol is reported
(which client, which method, what was wrong) and answered ``FAILED`` instead of vanishing inside gRPC. A job is
the client connection it came from (``context.peer()``): one training, or one rank of a multi-rank job.
"""
from __future__ import annotations

from typing import Callable, Iterator, Optional

import grpc
from google.protobuf.message import DecodeError

from msdebug_hooks.wire import debug_grpc_pb2 as pb
from msdebug_hooks.wire import ms_graph_pb2 as graph_pb
from msdebug_hooks.server import commands
from msdebug_hooks.server.connections import Connections
from msdebug_hooks.server.graph import parse_graph
from msdebug_hooks.server.tensors import assemble

__all__ = ["method_handlers", "SERVICE"]

SERVICE = "debugger.EventListener"


class _Garbage(Exception):
    pass


def _parse(message_type, data: bytes, method: str):
    try:
        return message_type.FromString(data)
    except (DecodeError, ValueError, TypeError) as exc:
        raise _Garbage(f"{method}: {len(data)} bytes that are no {message_type.DESCRIPTOR.name} ({exc})") from None


class _Servicer:
    def __init__(self, connections: Connections, port: int) -> None:
        self.connections = connections
        self.port = port

    def _stream(self, message_type, iterator: Iterator[bytes], method: str) -> list:
        return [_parse(message_type, data, method) for data in iterator]

    def WaitCMD(self, data: bytes, context) -> pb.EventReply:
        request = _parse(pb.Metadata, data, "WaitCMD")
        job = self.connections.job_for(context.peer(), self.port, "WaitCMD")
        if job is None:
            return commands.failed()
        return job.on_wait(request, context.is_active)

    def SendMetadata(self, data: bytes, context) -> pb.EventReply:
        request = _parse(pb.Metadata, data, "SendMetadata")
        job = self.connections.job_for(context.peer(), self.port, "SendMetadata", create=not request.training_done)
        if job is None:
            return commands.ok()
        return job.on_metadata(request)

    def SendHeartbeat(self, data: bytes, context) -> pb.EventReply:
        request = _parse(pb.Heartbeat, data, "SendHeartbeat")
        if not 5 <= request.period <= 3600:
            self.connections.report(f"{context.peer()}: heartbeat period {request.period} s is outside 5..3600")
            return commands.failed()
        job = self.connections.job_for(context.peer(), self.port, "SendHeartbeat", quiet=True)
        if job is not None:
            job.on_heartbeat(request.period, request.message)
        return commands.ok()

    def _graphs(self, iterator: Iterator[bytes], context, method: str, multi: bool) -> pb.EventReply:
        chunks = self._stream(pb.Chunk, iterator, method)
        job = self.connections.job_for(context.peer(), self.port, method)
        if job is None:
            return commands.failed()
        pieces: list[list[bytes]] = [[]]
        for chunk in chunks:
            pieces[-1].append(chunk.buffer)
            if multi and chunk.finished:
                pieces.append([])
        blobs = [b"".join(p) for p in pieces if p] if multi else [b"".join(pieces[0])]
        protos = [_parse(graph_pb.GraphProto, blob, method) for blob in blobs]
        job.on_graph(protos, parse_graph(protos))
        self.connections.report(f"{job.label}: graph received ({len(job.graph)} nodes in {len(protos)} graph(s))")
        return commands.ok()

    def SendGraph(self, iterator, context) -> pb.EventReply:
        return self._graphs(iterator, context, "SendGraph", multi=False)

    def SendMultiGraphs(self, iterator, context) -> pb.EventReply:
        return self._graphs(iterator, context, "SendMultiGraphs", multi=True)

    def _answer(self, iterator, context, method: str, message_type, level: str, convert: Callable) -> pb.EventReply:
        items = self._stream(message_type, iterator, method)
        job = self.connections.job_for(context.peer(), self.port, method)
        if job is None:
            return commands.failed()
        if not job.on_view_answer(level, convert(items)):
            self.connections.report(f"{job.label}: {method} with {len(items)} item(s) nobody asked for; ignored")
        return commands.ok()

    def SendTensors(self, iterator, context) -> pb.EventReply:
        return self._answer(iterator, context, "SendTensors", graph_pb.TensorProto, "value", assemble)

    def SendTensorBase(self, iterator, context) -> pb.EventReply:
        return self._answer(iterator, context, "SendTensorBase", pb.TensorBase, "base", list)

    def SendTensorStats(self, iterator, context) -> pb.EventReply:
        return self._answer(iterator, context, "SendTensorStats", pb.TensorSummary, "statistics", list)

    def SendWatchpointHits(self, iterator, context) -> pb.EventReply:
        hits = self._stream(pb.WatchpointHit, iterator, "SendWatchpointHits")
        job = self.connections.job_for(context.peer(), self.port, "SendWatchpointHits")
        if job is None:
            return commands.failed()
        for problem in job.on_hits(hits):
            self.connections.report(f"{job.label}: {problem}; dropped")
        return commands.ok()


_UNARY = ("WaitCMD", "SendMetadata", "SendHeartbeat")
_STREAMS = ("SendGraph", "SendMultiGraphs", "SendTensors", "SendTensorBase", "SendTensorStats",
            "SendWatchpointHits")


def method_handlers(connections: Connections, port: int, *,
                    on_call: Optional[Callable[[str], None]] = None) -> grpc.GenericRpcHandler:
    """The service's handlers for one listening port of the server whose jobs are ``connections``; every failure is
    reported and answered, never raised. ``on_call(peer)`` is told of every call first (a TLS server: which
    connections got in, ``handshakes.py``)."""
    servicer = _Servicer(connections, port)

    def guarded(name: str):
        method = getattr(servicer, name)

        def handler(request, context):
            if on_call is not None:
                on_call(context.peer())
            try:
                return method(request, context)
            except _Garbage as exc:
                connections.report(f"{context.peer()}: garbage: {exc}")
                return commands.failed()
            except Exception as exc:          # a bug or a broken stream: report, keep serving
                connections.report(f"{context.peer()}: {name} failed: {type(exc).__name__}: {exc}")
                return commands.failed()
        return handler

    handlers = {}
    for name in _UNARY:
        handlers[name] = grpc.unary_unary_rpc_method_handler(guarded(name),
                                                             response_serializer=pb.EventReply.SerializeToString)
    for name in _STREAMS:
        handlers[name] = grpc.stream_unary_rpc_method_handler(guarded(name),
                                                              response_serializer=pb.EventReply.SerializeToString)
    return grpc.method_handlers_generic_handler(SERVICE, handlers)
