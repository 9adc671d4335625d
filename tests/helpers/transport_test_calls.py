"""Calls of the debugger protocol that the client never makes in production, kept for tests that drive a server
directly: whole-tensor ``SendTensors``, ``SendMultiGraphs`` and a ``WaitCMD`` that returns at once (a future).

The client itself sends tensors with ``Transport.send_tensor_values`` (copy-free pieces) and waits with the blocking
``Transport.wait_cmd``; ``tensor_chunks`` is the plain reference those pieces are checked against.
"""
from __future__ import annotations

import threading
from typing import Iterable, Iterator, Sequence

import grpc

from msdebug_hooks.wire import debug_grpc_pb2 as pb
from msdebug_hooks.wire import ms_graph_pb2 as graph_pb
from msdebug_hooks.debugger.chunking import CHUNK_BYTES, graph_chunks, payload_budget
from msdebug_hooks.debugger.transport import Transport, _parse_reply
from msdebug_hooks.debugger.transport_errors import RequestTimeout, TransportClosed

__all__ = ["WaitHandle", "start_wait_cmd", "send_tensors", "send_multi_graphs", "tensor_chunks"]


def tensor_chunks(tensor: graph_pb.TensorProto, *, chunk_bytes: int = CHUNK_BYTES) -> Iterator[graph_pb.TensorProto]:
    """Cut one whole ``TensorProto`` into pieces of at most ``chunk_bytes`` serialised each: every piece repeats all
    fields except ``tensor_content``, carries the next slice of it, and only the last has ``finished=True``."""
    header = graph_pb.TensorProto()
    header.CopyFrom(tensor)
    header.ClearField("tensor_content")
    header.finished = True
    payload = payload_budget(header, chunk_bytes)
    content = memoryview(tensor.tensor_content)
    total = len(content)
    start = 0
    while True:
        end = min(start + payload, total)
        piece = graph_pb.TensorProto()
        piece.CopyFrom(header)
        if end > start:
            piece.tensor_content = bytes(content[start:end])
        piece.finished = end >= total
        yield piece
        if end >= total:
            return
        start = end


def send_tensors(transport: Transport, tensors: Iterable[graph_pb.TensorProto]) -> pb.EventReply:
    """Whole tensors, in order, each cut by ``tensor_chunks``."""
    def chunks() -> Iterator[graph_pb.TensorProto]:
        for tensor in tensors:
            yield from tensor_chunks(tensor, chunk_bytes=transport.chunk_bytes)
    return transport._stream("SendTensors", transport._stub.SendTensors, chunks())


def send_multi_graphs(transport: Transport, serialized_graphs: Sequence[bytes]) -> pb.EventReply:
    """Several graphs (``SendMultiGraphs``): each one's last chunk has ``finished=True``."""
    def chunks() -> Iterator[pb.Chunk]:
        for serialized in serialized_graphs:
            yield from graph_chunks(serialized, chunk_bytes=transport.chunk_bytes)
    return transport._stream("SendMultiGraphs", transport._stub.SendMultiGraphs, chunks())


class WaitHandle:
    """A ``WaitCMD`` in flight; ``result()`` blocks for the reply. Closing the transport cancels it."""

    def __init__(self, future: grpc.Future, transport: Transport) -> None:
        self._future = future
        self._transport = transport
        self._generation = transport.generation
        self._finished = threading.Event()
        future.add_done_callback(lambda _f: self._finished.set())

    def done(self) -> bool:
        return self._future.done()

    def wait(self, timeout: float | None = None) -> bool:
        return self._finished.wait(timeout)

    def result(self, timeout: float | None = None) -> pb.EventReply:
        try:
            return _parse_reply("WaitCMD", self._future.result(timeout=timeout))
        except grpc.FutureTimeoutError:
            raise RequestTimeout("WaitCMD", f"no command within {timeout} s (still waiting)") from None
        except grpc.FutureCancelledError:
            raise TransportClosed("WaitCMD", "wait cancelled", grpc.StatusCode.CANCELLED) from None
        except grpc.RpcError as exc:
            raise self._transport.rpc_error("WaitCMD", exc, self._generation) from None

    def cancel(self) -> bool:
        return self._future.cancel()


def start_wait_cmd(transport: Transport, metadata: pb.Metadata) -> WaitHandle:
    """Send ``WaitCMD`` and return at once."""
    transport._check_open("WaitCMD")
    return WaitHandle(transport._stub.WaitCMD.future(metadata), transport)
