"""Cutting what the client streams to the server's size limit: graphs as ``Chunk`` pieces, tensors as ``TensorProto``
pieces (docs/debugger-protocol.md 1.1).

The server keeps gRPC's default 4 MiB receive limit, so every streamed message is cut to at most ``CHUNK_BYTES``
serialised; a tensor's pieces repeat its names and only the last carries ``finished=True``. ``Transport``
(``transport.py``) sends what these make.
"""
from __future__ import annotations

from typing import Iterator

from msdebug_hooks.wire import debug_grpc_pb2 as pb
from msdebug_hooks.wire import ms_graph_pb2 as graph_pb

__all__ = ["CHUNK_BYTES", "MIN_CHUNK_BYTES", "graph_chunks", "serialized_tensor_pieces", "payload_budget"]

CHUNK_BYTES = 3 * 1024 * 1024        # largest serialised message we stream (MindSpore's g_chunk_size)
MIN_CHUNK_BYTES = 64 * 1024          # room for the largest header (long names) beside some payload


def graph_chunks(serialized: bytes, *, chunk_bytes: int = CHUNK_BYTES) -> Iterator[pb.Chunk]:
    """Cut one serialised GraphProto into ``Chunk`` messages of at most ``chunk_bytes`` serialised each; the last
    has ``finished=True`` (``SendMultiGraphs`` needs it to end a graph; ``SendGraph`` ignores it). An empty graph
    still yields one chunk."""
    payload = payload_budget(pb.Chunk(finished=True), chunk_bytes)
    view = memoryview(serialized)
    total = len(view)
    start = 0
    while True:
        end = min(start + payload, total)
        last = end >= total
        yield pb.Chunk(buffer=bytes(view[start:end]), finished=last)
        if last:
            return
        start = end


_CONTENT_TAG = b"\x1a"   # TensorProto.tensor_content: field 3, length-delimited


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def serialized_tensor_pieces(header: graph_pb.TensorProto, content, *,
                             chunk_bytes: int = CHUNK_BYTES) -> Iterator[bytes]:
    """A tensor's ``TensorProto`` pieces for ``SendTensors``, already serialised, cut straight from ``content``
    (bytes or a 1-D byte ``memoryview``, e.g. of a NumPy array): each payload byte is copied once, into its piece.

    ``header`` holds every field except ``tensor_content`` and ``finished``. A piece is the header's bytes, then
    the ``tensor_content`` field written by hand (tag, length, payload); protobuf parsers accept fields in any order,
    so the server reads the same tensor as if each piece were a whole message with ``tensor_content`` set.
    Every piece repeats the header (names, iter, truncate, dtype, dims); only the last has ``finished=True``.
    """
    middle = graph_pb.TensorProto()
    middle.CopyFrom(header)
    middle.ClearField("tensor_content")
    middle.finished = False
    last = graph_pb.TensorProto()
    last.CopyFrom(middle)
    last.finished = True
    head_middle, head_last = middle.SerializeToString(), last.SerializeToString()
    payload = chunk_bytes - len(head_last) - len(_CONTENT_TAG) - 10     # 10: the longest varint length
    if payload <= 0:
        raise ValueError(f"chunk_bytes={chunk_bytes} leaves no room for payload beside a {len(head_last)}-byte "
                         f"header; allowed: more than {len(head_last) + 11}")
    view = memoryview(content)
    total = len(view)
    if total == 0:
        yield head_last
        return
    for start in range(0, total, payload):
        piece = view[start:start + payload]
        head = head_last if start + payload >= total else head_middle
        yield b"".join((head, _CONTENT_TAG, _varint(len(piece)), piece))


def payload_budget(header, chunk_bytes: int) -> int:
    """Bytes of payload that fit beside ``header`` in one message of ``chunk_bytes`` (tag + length prefix <= 16)."""
    budget = chunk_bytes - header.ByteSize() - 16
    if budget <= 0:
        raise ValueError(f"chunk_bytes={chunk_bytes} leaves no room for payload beside a {header.ByteSize()}-byte "
                         f"header; allowed: more than {header.ByteSize() + 16}")
    return budget
